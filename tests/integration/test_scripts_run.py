"""The measuring scripts of ``scripts/`` that no other test runs, each run for real at the smallest
size its flags allow (issue #49): they exit 0 and what they print or write has its fields and sane
numbers. The same tree on both sides of an A/B answers byte for byte alike, so "identical N of N"
is asserted, not just printed. What they measure is not asserted (the docs cite the full runs)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def run_script(
    name: str, *args: str, cwd: Path | None = None, timeout: int = 300, tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``scripts/<name>``; with ``tmp``, its temporary files go there (``TMPDIR``)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / name), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), **({"TMPDIR": str(tmp)} if tmp else {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
    return done


def test_key_verify_speed_prints_the_three_timings() -> None:
    report = json.loads(run_script("key_verify_speed.py").stdout)
    assert set(report) == {"authenticate_right_secret_us", "authenticate_wrong_secret_us", "scrypt_once_ms"}
    assert all(0 < v < 1_000_000 for v in report.values()), report


def test_response_digest_is_stable_and_compares(tmp_path: Path) -> None:
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    run_script("response_digest.py", "--out", str(before))
    run_script("response_digest.py", "--out", str(after), "--drop", "retrieval_metadata")
    digests = json.loads(before.read_text())
    assert len(digests) > 10 and all(re.fullmatch(r"[0-9a-f]{24}", v) for v in digests.values()), digests
    same = run_script("response_digest.py", "--compare", str(before), str(before))
    assert f"{len(digests)} requests in both, 0 differ, 0 in one only" in same.stdout
    # the dropped key changes every digest: --compare names the difference and exits 1
    differ = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "response_digest.py"), "--compare", str(before), str(after)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert differ.returncode == 1 and f"{len(digests)} differ" in differ.stdout, differ.stdout


def test_write_ab_answers_identical_for_the_same_tree(tmp_path: Path) -> None:
    scratch = tmp_path.parent / f"{tmp_path.name}-tmp"
    scratch.mkdir()
    out = run_script("write_ab.py", str(ROOT), str(ROOT), "6", cwd=tmp_path, tmp=scratch).stdout
    for kind in ("ingest", "conv"):
        line = next(x for x in out.splitlines() if x.startswith(f"{kind}:"))
        assert "identical 6 of 6" in line and re.search(r"A p50 [\d.]+ ms .*B p50 [\d.]+ ms", line), out
    assert not list(tmp_path.iterdir()), "write_ab wrote into its working directory"
    assert not list(scratch.glob("hrt-*")), "write_ab left its temporary files"


def test_serve_ab_and_ab_main_on_a_tiny_store(tmp_path: Path) -> None:
    """ab_main builds a 300-entity store with the base's own bench (here this tree, ``--tree``) and
    runs serve_ab on two copies of it; serve_ab writes its logs under its own directory."""
    work, cwd = tmp_path / "work", tmp_path / "cwd"
    cwd.mkdir()
    summary = tmp_path / "ab.txt"
    args = ("--base", "HEAD", "--tree", str(ROOT), "--size", "300", "--requests", "4", "--work", str(work))
    out = run_script("ab_main.py", *args, "--out", str(summary), cwd=cwd, timeout=600).stdout
    assert "byte-identical responses: 24 of 24" in out, out  # 4 measured + serve_ab's 20 warm-up
    assert re.search(r"^A .*p50 [\d.]+ ms, p95 [\d.]+ ms", out, re.M) and re.search(r"^B .*p50", out, re.M), out
    assert summary.read_text().startswith("base HEAD")
    assert not list(cwd.iterdir()) and not list(work.glob("serve-ab-*.log")), "logs written into the cwd"
    logs = tmp_path / "logs"
    store = work / "store-300" / "work" / "embedded-300.db"
    b = work / "b.db"
    serve = ("--a", str(ROOT), "--b", str(ROOT), "--db", str(work / "a.db"), "--size", "300")
    out = run_script(
        "serve_ab.py", *serve, "--b-env", f"HRT_DB_PATH={b}", "--requests", "2", "--warmup", "1",
        "--logs", str(logs), cwd=cwd,
    ).stdout  # fmt: skip
    assert store.exists() and "byte-identical responses: 3 of 3" in out, out
    assert f"server logs: {logs}" in out
    assert sorted(p.name for p in logs.iterdir()) == ["serve-ab-A.log", "serve-ab-B.log"]
    assert not list(cwd.iterdir())


def test_soak_short_run_reports_and_checks_the_store(tmp_path: Path) -> None:
    args = ("--minutes", "0.1", "--clients", "1", "--batch", "2", "--cycle", "3")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run_script("soak.py", *args, "--out", str(tmp_path), tmp=scratch)
    assert not list(scratch.glob("hrt-*")), "soak left its temporary files"
    report = json.loads((tmp_path / "soak-embedded.json").read_text())
    assert report["errors"] == 0 and report["retrievals"] > 0 and report["ingests"] > 0, report
    assert report["final_check"]["ok"] is True, report["final_check"]
    assert report["per_minute"] and report["per_minute"][0]["rss_mb"], report["per_minute"]


def test_fuzz_api_script_runs_the_fuzz_tests_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "fuzz.json"
    run_script("fuzz_api.py", "--examples", "1", "--out", str(out), timeout=600)
    report = json.loads(out.read_text())
    assert report["pytest_exit"] == 0 and "passed" in report["pytest_summary"], report
    assert report["examples_per_operation_and_mode"] == 1 and report["seconds"] > 0, report
    assert report["statuses"]["/v1/retrieve"]["200"] >= 1, report["statuses"]
    assert not (tmp_path / "fuzz.statuses.json").exists()


def test_inspector_screenshots_writes_the_page_and_every_picture(tmp_path: Path) -> None:
    from tests.integration.inspector_browser import chromium_path

    chromium_path()  # skips (or fails in CI) without a browser, as the inspector's own tests do
    run_script("inspector_screenshots.py", "--out", str(tmp_path), timeout=600)
    written = (tmp_path / "inspector.md").read_text(encoding="utf-8")
    assert written == (ROOT / "docs" / "inspector.md").read_text(encoding="utf-8")
    pictures = re.findall(r"\]\((img/inspector-[a-z]+\.png)\)", written)
    assert len(pictures) >= 5
    for picture in pictures:
        assert (tmp_path / picture).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", picture
