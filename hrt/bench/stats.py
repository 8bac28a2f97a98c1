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
