"""``hrt bench`` cannot rot: the generator is deterministic and power-law-ish, and a tiny run of the
whole harness (child-process ingest, a real ``hrt serve`` over HTTP, JSON, table, plot) completes.

Benchmarks are commands, not tests: nothing here asserts a speed. The tiny run uses the hashing
test embedder for both ingest and the server, so it takes seconds and loads no model.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from hrt.bench import harness, host, report, stats, targets
from hrt.bench import run as bench
from hrt.bench.synth import GraphStats, SynthConfig, generate, key_phrases
from hrt.ingest import parse_record


def digest(cfg: SynthConfig) -> str:
    h = hashlib.sha256()
    for record in generate(cfg):
        h.update(json.dumps(record, sort_keys=True).encode())
    return h.hexdigest()


def test_generator_is_deterministic_and_seeded() -> None:
    cfg = SynthConfig(entities=2000, seed=3)
    assert digest(cfg) == digest(SynthConfig(entities=2000, seed=3))
    assert digest(cfg) != digest(SynthConfig(entities=2000, seed=4))
    assert key_phrases(cfg, 20) == key_phrases(SynthConfig(entities=2000, seed=3), 20)


def test_generator_counts_kinds_and_valid_records() -> None:
    cfg = SynthConfig(entities=1000, id_prefix="t-")
    stats = GraphStats()
    records = list(generate(cfg, stats))
    kinds = Counter(r["kind"] for r in records if r["kind"] != "relation")
    assert stats.n_entities == 1000
    assert kinds["concept"] == cfg.n_concepts == 250
    assert kinds["artifact"] == cfg.n_artifacts == 150
    assert kinds["memory_unit"] == cfg.n_memory_units == 600
    assert stats.n_relations == sum(1 for r in records if r["kind"] == "relation")
    for i, r in enumerate(records):  # every record is valid ingest input
        parse_record(r, f"record {i}")
    # dependency order: a relation names only entities yielded before it
    seen: set[str] = set()
    for r in records:
        if r["kind"] == "relation":
            assert r["source"] in seen and r["target"] in seen, r
        elif r["kind"] != "preference":
            seen.add(r.get("muid") or r["id"])


def test_concept_degrees_are_power_law_ish() -> None:
    stats = GraphStats()
    for _ in generate(SynthConfig(entities=20_000), stats):
        pass
    d = stats.degree_summary()
    assert d["max"] >= 30 * d["p50"]  # hubs exist
    assert d["p99"] >= 5 * d["p50"]  # a heavy tail, not a few outliers
    assert -1.2 <= d["loglog_slope"] <= -0.5  # rank-frequency is a straight line in log-log


def test_key_phrases_are_distinct_across_requests() -> None:
    requests = key_phrases(SynthConfig(entities=500), 200)
    flat = [p.casefold() for req in requests for p in req]
    assert all(len(req) == 3 for req in requests)
    assert len(flat) == len(set(flat))


def test_sizes_parse() -> None:
    assert [stats.parse_size(s) for s in ("300", "10k", "100K", "1m")] == [300, 10_000, 100_000, 1_000_000]
    assert stats.size_label(1_000_000) == "1m" and stats.size_label(300) == "300"
    with pytest.raises(argparse.ArgumentTypeError):
        stats.parse_size("1.5")


def test_tiny_run_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "results"
    argv = [
        "--sizes", "300",
        "--deployments", "embedded",
        "--out", str(out),
        "--requests", "6",
        "--warmup", "1",
        "--concurrency", "2",
        "--vectors", "tests.helpers:HashingEmbedder",
        "--writes", "3",
        "--trickle-s", "2",
        "--second-start",
        "--conversations", "3",
    ]  # fmt: skip
    assert bench.main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["schema"] == harness.SCHEMA
    assert results["command"].startswith("hrt bench --sizes 300")
    assert {"cpu", "cores", "memory_gb", "python"} <= set(results["machine"])
    assert results["versions"]["servers"]["neo4j"]
    [run] = results["runs"]
    assert run["status"] == "ok", run.get("error")
    assert run["deployment"] == "embedded" and run["entities"] == 300
    assert run["ingest"]["entities"] == 300 and run["ingest"]["entities_per_s"] > 0
    e2e = run["sequential"]["end_to_end"]
    assert e2e["n"] == 6 and 0 < e2e["p50_ms"] <= e2e["p95_ms"] <= e2e["p99_ms"]
    assert {"intake", "grounding", "expansion", "scoring", "hydration", "assembly", "total"} <= set(
        run["sequential"]["stages"]
    )
    assert [lv["clients"] for lv in run["concurrent"]["levels"]] == [1, 2]
    assert all(lv["errors"] == 0 and lv["requests"] == 6 for lv in run["concurrent"]["levels"])
    assert run["server"]["peak_rss_mb"] > 0
    # --second-start: the server measured is a second one on the same store, the first stopped once ready
    assert run["first_start"]["start_to_ready_s"] > 0 and run["server"]["start_to_ready_s"] > 0
    assert (out / "work" / "server-embedded-300-second.log").exists()
    cpu = run["sequential"]["cpu_ms_per_request"]  # the embedded deployment has no store process
    assert set(cpu) == {"hrt", "total"} and cpu["total"] == cpu["hrt"] >= 0
    assert run["goals"] == []  # no goal is set for 300 entities
    readme = (out / "README.md").read_text()
    assert "| embedded | 300 |" in readme and "Command: `hrt bench" in readme
    assert "## CPU per request" in readme and f"| embedded | 300 | {report._fmt(cpu['hrt'])} | - | - | - |" in readme
    assert (out / "latency_vs_size.png").stat().st_size > 0
    writes = run["writes"]  # each write returned, with its concept, by a retrieval after it
    alone = writes["write_to_visible"]
    assert alone["visible_ms"]["n"] == 3 and alone["n_errors"] == 0 and alone["refused_429"] == 0
    assert 0 < alone["ingest_ms"]["p50_ms"] <= alone["visible_ms"]["p50_ms"]
    trickle = writes["trickle"]
    assert trickle["visible_ms"]["n"] >= 1 and trickle["n_errors"] == 0 and trickle["refused_429"] == 0
    assert trickle["reads_idle"]["n"] > 0 and trickle["reads_beside_writes"]["n"] > 0
    turns = run["conversations"]  # each call of 4 messages answered 200
    assert turns["call_ms"]["n"] == 3 and turns["n_errors"] == 0 and turns["refused_429"] == 0
    assert "| embedded | 300 | 3 | " + report._fmt(turns["call_ms"]["p50_ms"]) in readme
    assert "## Writes" in readme and "| embedded | 300 | " + report._fmt(alone["visible_ms"]["p50_ms"]) in readme


@contextlib.contextmanager
def burning_child(cpu_s: float, wait_for_go: bool = False) -> Iterator[subprocess.Popen[str]]:
    """A child process that burns ``cpu_s`` seconds of CPU (after a line on its stdin, if
    ``wait_for_go``), then sleeps; killed on exit."""
    go = "import sys\nsys.stdin.readline()\n" if wait_for_go else ""
    burn = f"import time\nt = time.process_time()\nwhile time.process_time() - t < {cpu_s}: pass\ntime.sleep(60)"
    script = go + burn
    child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, text=True)
    try:
        yield child
    finally:
        child.kill()
        child.wait()


def test_cpu_per_request_reads_a_process_tree() -> None:
    """``tree_cpu_s`` counts a child's CPU in its parent's tree, and the per-request figures add up."""
    with burning_child(0.3, wait_for_go=True) as child:
        before = host.tree_cpu_s(os.getpid())
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()
        deadline = time.monotonic() + 20
        while host.tree_cpu_s(os.getpid()) - before < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        after = host.tree_cpu_s(os.getpid())
    assert after - before >= 0.25  # the child's busy loop, read through this process's tree
    per = host.cpu_ms_per_request({"hrt": 1.0, "neo4j": 2.0}, {"hrt": 1.5, "neo4j": 2.25}, 10)
    assert per == {"hrt": 50.0, "neo4j": 25.0, "total": 75.0}


def test_measurement_waits_for_busy_stores_to_settle() -> None:
    """A store still busy after an ingest (here a child burning 1.5 s of CPU) is waited for; an
    idle one is not, and a store that never settles ends the wait at its timeout."""
    with burning_child(1.5) as child:
        waited, settled = host.wait_for_quiet({"store": child.pid}, window_s=0.5, timeout_s=20)
        assert settled and 1.0 <= waited < 20
        waited, settled = host.wait_for_quiet({"store": child.pid}, window_s=0.5, timeout_s=20)
        assert settled and waited < 1.0  # one quiet window
    with burning_child(60) as spinning:
        assert host.wait_for_quiet({"store": spinning.pid}, window_s=0.5, timeout_s=1.5)[1] is False


def test_reuse_serves_the_kept_store_without_ingesting(tmp_path: Path) -> None:
    out = tmp_path / "results"
    argv = ["--sizes", "300", "--deployments", "embedded", "--out", str(out), "--requests", "3", "--warmup", "0"]
    argv += ["--concurrency", "1", "--vectors", "tests.helpers:HashingEmbedder", "--writes", "0"]
    one_write = ["--writes", "1", "--trickle-s", "0", "--conversations", "0"]
    assert bench.main([*argv, *one_write, "--keep"]) == 0
    first = json.loads((out / "results.json").read_text())["runs"][0]
    assert (out / "work" / "embedded-300.db").exists() and "reused" not in first["ingest"]
    assert bench.main([*argv, *one_write, "--reuse"]) == 0
    [again] = json.loads((out / "results.json").read_text())["runs"]
    assert again["status"] == "ok" and again["ingest"] == {**first["ingest"], "reused": True}
    assert again["sequential"]["end_to_end"]["n"] == 3 and again["reuse_round"] == 1
    # the reuse wrote a new memory, numbered past the first run's (written again, it was a rewrite)
    with sqlite3.connect(out / "work" / "embedded-300.db") as db:
        written = {i for (i,) in db.execute("SELECT id FROM docs WHERE id LIKE 'w-%'")}
    assert written == {"w-000000", f"w-{harness.REUSE_STRIDE:06d}"}
    # another seed is another store: it is ingested afresh, not served from the kept file
    assert bench.main([*argv, "--reuse", "--seed", "8"]) == 0
    assert "reused" not in json.loads((out / "results.json").read_text())["runs"][0]["ingest"]


def test_a_failed_deployment_is_reported_and_the_run_goes_on(tmp_path: Path) -> None:
    plan = harness.Plan(
        sizes=[300],
        deployments=["embedded"],
        out=tmp_path,
        requests=2,
        concurrency=1,
        warmup=0,
        vectors="tests.helpers:HashingEmbedder",
        batch_size=1000,
        depth=2,
        seed=7,
        peer=False,
        stack_dir=None,
        command="hrt bench (test)",
    )

    def broken() -> targets.Target:
        raise RuntimeError("store did not start")

    run = harness.bench_one(plan, "services", 300, broken, tmp_path, None)
    assert run["status"] == "failed" and "store did not start" in run["error"]
    assert run["goals"] == []


def test_a_failed_peer_fails_the_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """``--peer`` asked for and failed (as when every request answered 401): exit 1, never a line in
    results.json alone; tests/integration/test_bench_peer.py runs the real comparison."""
    run = {
        "deployment": "services",
        "size": "300",
        "status": "ok",
        "sequential": {"end_to_end": {"p50_ms": 1.0, "p95_ms": 2.0}},
        "concurrent": {"throughput_rps": 1.0},
        "server": {"peak_rss_mb": 1.0},
        "goals": [],
    }
    peer: dict[str, object] = {"size": "300", "status": "failed", "error": "RuntimeError: /v1/retrieve answered 401"}
    monkeypatch.setattr(bench, "run_plan", lambda plan: {"runs": [run], "peer": [peer]})
    argv = ["--sizes", "300", "--deployments", "services", "--peer", "--out", str(tmp_path)]
    assert bench.main(argv) == 1
    assert "answered 401" in capsys.readouterr().out
    hrt = {"end_to_end": {"p50_ms": 1.0}}
    peer.update(status="ok", hrt=hrt, peer={"end_to_end": {"p50_ms": 2.0}}, ratio_p50=0.5)
    assert bench.main(argv) == 0


def test_services_memory_grows_with_the_largest_store(tmp_path: Path) -> None:
    from hrt import devstack

    assert harness.stack_memory(10_000) == harness.stack_memory(100_000) == {}  # the dev stack's defaults
    assert harness.stack_memory(1_000_000) == {"neo4j_page_cache": "3328m", "weaviate_memory": "4GiB"}
    assert harness.stack_memory(2_000_000) == {"neo4j_page_cache": "6400m", "weaviate_memory": "7GiB"}
    for bad in ({"neo4j_page_cache": "lots"}, {"weaviate_memory": "4G"}):  # refused before anything starts
        with pytest.raises(devstack.DevStackError):
            devstack.up(tmp_path / "stack", **bad)
        assert not (tmp_path / "stack").exists()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has exited (a container's init may never reap it)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_the_ingest_child_stops_when_the_harness_is_killed(tmp_path: Path) -> None:
    """A killed ``hrt bench`` (SIGKILL, which its ingest child does not see) must not leave the
    child writing into the stores: it stops at its next batch."""
    import signal

    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "harness.py"
    script.write_text(
        "import os\n"
        "from pathlib import Path\n"
        "from hrt.bench.ingest import run_ingest\n"
        "from hrt.bench.targets import embedded_target\n"
        "from hrt.bench.synth import SynthConfig\n"
        "if __name__ == '__main__':\n"
        "    cfg = SynthConfig(entities=2_000_000, seed=7, user_id='u-orphan', id_prefix='o-')\n"
        f"    run_ingest(cfg, embedded_target(Path({str(tmp_path)!r}), 'big'), 'tests.helpers:HashingEmbedder', 200)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)}
    harness = subprocess.Popen([sys.executable, str(script)], cwd=root, env=env)
    children: list[int] = []
    try:
        db = tmp_path / "embedded-big.db"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (db.exists() and db.stat().st_size > 0):
            time.sleep(0.2)  # the child is writing batches
        assert db.exists(), "the ingest child never started writing"
        children = [c for c in _children(harness.pid) if _running(c)]
        assert children
        harness.send_signal(signal.SIGKILL)
        harness.wait(timeout=30)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(_running(c) for c in children):
            time.sleep(0.2)
        assert not any(_running(c) for c in children), "the ingest child outlived the killed harness"
    finally:
        if harness.poll() is None:
            harness.kill()
        for child in children:
            if _running(child):
                os.kill(child, signal.SIGKILL)


def test_hrt_dev_up_sizes_default_to_the_dev_stack_and_bad_ones_are_refused(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    from hrt import cli, devstack

    assert cli.main(["dev", "up", "--dir", str(tmp_path / "s"), "--neo4j-page-cache", "lots"]) == 2
    assert "page cache" in capsys.readouterr().err and not (tmp_path / "s").exists()

    calls: list[dict[str, object]] = []

    class Started:
        def __init__(self) -> None:
            self.services: dict[str, object] = {}

        def env(self, *, redacted: bool = False) -> dict[str, str]:
            return {"HRT_NEO4J_PASSWORD": devstack.REDACTED if redacted else "s3cret"}

    def fake_up(directory: Path, services: tuple[str, ...], **sizes: object) -> Started:
        calls.append(sizes)
        return Started()

    monkeypatch.setattr(devstack, "up", fake_up)
    assert cli.main(["dev", "up", "--dir", str(tmp_path / "s")]) == 0
    assert cli.main(["dev", "up", "--dir", str(tmp_path / "s"), "--weaviate-memory", "4GiB"]) == 0
    assert calls == [{}, {"weaviate_memory": "4GiB"}]  # unset: devstack's own defaults apply
    printed = capsys.readouterr().out
    assert "s3cret" not in printed and devstack.REDACTED in printed  # secrets stay in stack.env


def test_peer_sizes_and_second_start_parse() -> None:
    parser = bench.build_parser()
    plan = bench.plan_from_args(parser.parse_args(["--sizes", "300", "--peer", "10k,1m", "--second-start"]), [])
    assert plan.peer and plan.peer_sizes == [10_000, 1_000_000] and plan.second_start
    every = bench.plan_from_args(parser.parse_args(["--peer", "--sizes", "300"]), [])
    assert every.peer and every.peer_sizes is None and not every.second_start
    assert not bench.plan_from_args(parser.parse_args([]), []).peer
    with pytest.raises(bench.UsageError, match=r"^--peer: "):
        bench.plan_from_args(parser.parse_args(["--peer", "lots"]), [])


def _ok_run(deployment: str, n: int, p50: float, intake: float, cpu: float, visible_p95: float) -> dict[str, object]:
    return {
        "deployment": deployment,
        "entities": n,
        "status": "ok",
        "sequential": {
            "end_to_end": {"p50_ms": p50},
            "stages": {"intake": {"p50_ms": intake}},
            "cpu_ms_per_request": {"total": cpu},
        },
        "writes": {"write_to_visible": {"visible_ms": {"p95_ms": visible_p95}}},
        "conversations": {"call_ms": {"p50_ms": 2 * visible_p95}},
    }


def test_goals_between_runs_are_ratios_of_one_run() -> None:
    results = {
        "runs": [
            _ok_run("embedded", 100_000, 40.0, 20.0, 50.0, 60.0),
            _ok_run("services", 100_000, 120.0, 22.0, 90.0, 120.0),
            _ok_run("embedded", 1_000_000, 50.0, 20.0, 55.0, 110.0),
            {"deployment": "services", "entities": 1_000_000, "status": "failed"},
        ],
        "peer": [{"status": "ok", "entities": 100_000, "ratio_p50": 0.05}],
    }
    goals = {g["goal"]: (g["measured"], g["met"]) for g in stats.cross_goals(results)}
    assert goals["embedded 100k p50 / its intake p50"] == (2.0, False)
    assert goals["embedded 100k intake p50, ms"] == (20.0, False)
    assert goals["services 100k CPU a request / embedded's"] == (1.8, True)
    assert goals["services 100k p50 / embedded's"] == (3.0, False)
    assert goals["embedded 1M p50 / embedded 100k's"] == (1.25, True)
    assert goals["HRT / peer p50 at 100k (depth 1)"] == (0.05, True)
    assert goals["embedded 1m write to visible p95, ms"] == (110.0, False)
    assert goals["services 100k write to visible p95, ms"] == (120.0, True)  # services: under 1 s
    assert goals["embedded 100k conversation call (4 messages) p50, ms"] == (120.0, False)
    assert goals["services 100k conversation call (4 messages) p50, ms"] == (240.0, False)
    assert not any("services 1m" in g for g in goals)  # a failed run is left out
    table = "\n".join(report._cross_goals_table(results))
    assert "| embedded 100k p50 / its intake p50 | 1.3 | 2 | NO |" in table


def test_conversation_calls_are_seeded_and_name_the_graphs_concepts() -> None:
    from hrt.bench import turns

    cfg = SynthConfig(entities=2000, seed=3)
    names = turns.concept_names(cfg, cfg.n_concepts)
    generated = {r["name"] for r in generate(cfg) if r["kind"] == "concept"}
    assert {n for group in names.values() for n in group} == generated
    body = turns.call_body(cfg, names, 7)
    assert body == turns.call_body(cfg, names, 7) and body != turns.call_body(cfg, names, 8)
    assert body["session_id"] == "bench-turns-1" and [m["role"] for m in body["messages"]] == [
        "user", "assistant", "user", "assistant",
    ]  # fmt: skip
    said = " ".join(m["content"] for m in body["messages"])
    assert any(name in said for name in names["person"])
