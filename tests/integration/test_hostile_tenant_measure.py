"""The hostile-tenant measurement's smoke form (#45): ``scripts/hostile_tenant.py`` with short
phases and small attacks against its own embedded ``hrt serve``. It asserts what holds before the
fixes of #45 and after: the run completes, every phase is reported with its fields, the honest
key never gets a 5xx (nor does the hostile one), the server neither dies nor logs a traceback.
How much the attacks cost the honest key is measured, not asserted (docs/security.md has a run's
figures). About 1.5 minutes."""

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


def phase_names() -> list[str]:
    """The script's phases, in order, as its PHASES table declares them."""
    table = (ROOT / "scripts" / "hostile_tenant.py").read_text().split("\nPHASES = [", 1)[1].split("\n]\n", 1)[0]
    return re.findall(r'^    Phase\(\s*"(\w+)"', table, re.M)


HONEST_FIELDS = {"requests", "p50_ms", "p95_ms", "error_rate", "server_errors", "statuses"}


def test_the_hostile_tenant_measurement_runs_and_reports_every_phase(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "hostile_tenant.py"),
            *("--seconds", "3", "--quiet-seconds", "3", "--rate", "3", "--writes", "1", "--export-every", "1.5"),
            *("--large-entities", "30", "--entity-kb", "10", "--body-mib", "1", "--heavy-kb", "5"),
            *("--heavy-messages", "1", "--mcp-records", "200", "--settle-max", "60", "--out", str(tmp_path)),
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "hostile-tenant-embedded.json").read_text())
    assert report["server"]["died"] is False and report["server"]["tracebacks"] == 0, report["server"]
    phases = report["phases"]
    assert [p["phase"] for p in phases] == phase_names()
    for p in phases:
        assert set(p) >= {"findings", "attack", "seconds", "settle_s", "honest", "hostile", "rss_peak_mb"}, p
        assert p["rss_start_mb"] > 0 and p["rss_peak_mb"] >= p["rss_start_mb"], p
        honest = p["honest"]
        assert set(honest["all"]) >= HONEST_FIELDS and honest["all"]["requests"] > 0, p
        for op, stats in honest.items():
            assert stats["server_errors"] == 0, (p["phase"], op, stats)  # refused or slow, never a 5xx
            assert not any(s.startswith("5") for s in stats["statuses"]), (p["phase"], op, stats)
        assert {"retrieve", "write"} <= set(honest), p
        if p["phase"] != "baseline":
            assert p["hostile"], p  # the attack ran and its answers were counted
            against = honest["all"]["p95_vs_quiet"]
            assert against["against"] == "quiet" and honest["quiet"]["requests"] > 0, against
            low, high = against["diff_ci_ms"]
            assert low <= high and against["ratio"] > 0 and isinstance(against["within_noise"], bool), against
        hostile = [what.split()[1] for what in p["hostile"] if len(what.split()) > 1]
        assert not any(status.startswith("5") for status in hostile), p  # nor for the hostile key
    echo = next(p for p in phases if p["phase"] == "echo_probes")
    assert {pr["finding"] for pr in echo["probes"]} == {"M4", "M5"}, echo["probes"]
    for probe in echo["probes"]:
        assert {"probe", "status", "request_bytes", "response_bytes"} <= set(probe), probe
    table = (tmp_path / "hostile-tenant-embedded.md").read_text()
    assert all(f"| {p['phase']} |" in table for p in phases)


def test_the_p95_against_the_baseline_is_within_noise_only_when_the_interval_reaches_zero() -> None:
    import importlib.util
    import random

    spec = importlib.util.spec_from_file_location("hostile_tenant", ROOT / "scripts" / "hostile_tenant.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    sys.modules["hostile_tenant"] = script
    spec.loader.exec_module(script)
    rng = random.Random(7)
    base = [rng.lognormvariate(3.0, 0.4) for _ in range(80)]
    same = [rng.lognormvariate(3.0, 0.4) for _ in range(80)]
    slower = [2.5 * x for x in same]
    assert script.versus(base, same, seed=1)["within_noise"] is True
    worse = script.versus(base, slower, seed=1)
    assert worse["within_noise"] is False and worse["diff_ci_ms"][0] > 0 and worse["ratio"] > 2
    assert script.versus(base, same[:3], seed=1) is None  # too few to say
