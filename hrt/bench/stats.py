"""Sizes (``10k``, ``1m``), nearest-rank percentiles, latency summaries and the issue's goals."""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from typing import Any

# The goals (2-core machine). (deployment, entities) -> metric -> bound.
GOALS: dict[tuple[str, int], dict[str, float]] = {
    ("embedded", 100_000): {"p50_ms": 20.0, "p95_ms": 40.0, "sustainable_rps_min": 50.0, "server_peak_rss_mb": 1228.8},
    ("embedded", 1_000_000): {"p50_ms": 35.0, "p95_ms": 70.0},
    ("services", 100_000): {"p50_ms": 35.0, "p95_ms": 70.0},
}


def parse_size(text: str) -> int:
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1_000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    value = float(t) * mult
    if value < 10 or value != int(value):
        raise argparse.ArgumentTypeError(f"bad size {text!r}: use e.g. 300, 10k, 100k, 1m")
    return int(value)


def size_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1])."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(ms: Sequence[float]) -> dict[str, float]:
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 0.50), 2),
        "p95_ms": round(pct(ms, 0.95), 2),
        "p99_ms": round(pct(ms, 0.99), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
        "max_ms": round(max(ms), 2),
    }


def evaluate_goals(run: dict[str, Any]) -> list[dict[str, Any]]:
    goals = GOALS.get((run["deployment"], run["entities"]))
    if not goals or run.get("status") != "ok":
        return []
    seq = run["sequential"]["end_to_end"]
    measured = {
        "p50_ms": seq["p50_ms"],
        "p95_ms": seq["p95_ms"],
        "sustainable_rps_min": run["concurrent"]["sustainable_rps"],
        "server_peak_rss_mb": run["server"]["peak_rss_mb"],
    }
    out = []
    for name, bound in goals.items():
        value = measured[name]
        met = value >= bound if name.endswith("_min") else value <= bound
        out.append({"goal": name, "bound": bound, "measured": value, "met": bool(met)})
    return out


# Goals between runs of one bench (issue #46): ratios on one host, so a slower day moves both sides.
def _figure(run: dict[str, Any], *path: str) -> float | None:
    """The number at ``path`` in a run's results (None where the run has none)."""
    value: Any = run
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return float(value) if isinstance(value, (int, float)) else None


def _p50(run: dict[str, Any], stage: str | None = None) -> float | None:
    return (
        _figure(run, "sequential", "end_to_end", "p50_ms")
        if stage is None
        else _figure(run, "sequential", "stages", stage, "p50_ms")
    )


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


_TURN = {"embedded": 25.0, "services": 60.0}  # a conversation call of 4 messages, p50 ms
_VISIBLE = {"embedded": 100.0, "services": 1_000.0}  # a write to visible, p95 ms


def cross_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The goals that compare runs of this bench (embedded 100k against its intake, services against
    embedded, 1M against 100k, HRT against the peer, writes), each with what it compares; a goal
    whose runs are missing is left out."""
    ok = {(r["deployment"], r["entities"]): r for r in results.get("runs", []) if r.get("status") == "ok"}
    e100, s100, e1m = ok.get(("embedded", 100_000)), ok.get(("services", 100_000)), ok.get(("embedded", 1_000_000))
    rows: list[tuple[str, float | None, float]] = []
    if e100:
        rows.append(("embedded 100k p50 / its intake p50", _ratio(_p50(e100), _p50(e100, "intake")), 1.3))
        rows.append(("embedded 100k intake p50, ms", _p50(e100, "intake"), 15.0))
    if e100 and s100:
        rows.append(
            (
                "services 100k CPU a request / embedded's",
                _ratio(*(_figure(r, "sequential", "cpu_ms_per_request", "total") for r in (s100, e100))),
                2.0,
            )
        )
        rows.append(("services 100k p50 / embedded's", _ratio(_p50(s100), _p50(e100)), 2.0))
    if e100 and e1m:
        rows.append(("embedded 1M p50 / embedded 100k's", _ratio(_p50(e1m), _p50(e100)), 1.5))
    for peer in results.get("peer", []):
        if peer.get("status") == "ok" and peer.get("entities") == 100_000:
            rows.append(("HRT / peer p50 at 100k (depth 1)", peer.get("ratio_p50"), 0.1))
    for (deployment, n), run in sorted(ok.items()):
        visible = _figure(run, "writes", "write_to_visible", "visible_ms", "p95_ms")
        if n >= 100_000 and visible is not None:
            rows.append((f"{deployment} {size_label(n)} write to visible p95, ms", visible, _VISIBLE[deployment]))
        call = _figure(run, "conversations", "call_ms", "p50_ms")
        if n == 100_000 and call is not None:
            rows.append((f"{deployment} 100k conversation call (4 messages) p50, ms", call, _TURN[deployment]))
    return [
        {"goal": goal, "bound": bound, "measured": value, "met": value is not None and value <= bound}
        for goal, value, bound in rows
    ]
