"""``--compare BEFORE AFTER``: the paired bootstrap of two runs' per-question output (how two runs,
or two systems of one run, differ beyond noise).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hrt.eval.locomo.metrics import RENDER_BUDGETS

BOOTSTRAP_SEED = 20261125


def paired_bootstrap(
    before: Sequence[float], after: Sequence[float], resamples: int = 2000, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float, int, int]:
    """Mean of ``after - before`` over paired questions, its 95% percentile interval over
    ``resamples`` resamples of the questions (seeded: the same inputs give the same interval),
    and how many questions got better and worse. As percentages."""
    import random

    diffs = [b - a for a, b in zip(before, after, strict=True)]
    if not diffs:
        return 0.0, 0.0, 0.0, 0, 0
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    lo, hi = means[int(0.025 * resamples)], means[min(resamples - 1, int(0.975 * resamples) - 1)]
    better = sum(1 for d in diffs if d > 1e-12)
    worse = sum(1 for d in diffs if d < -1e-12)
    return 100.0 * sum(diffs) / n, 100.0 * lo, 100.0 * hi, better, worse


def _per_question(spec: str) -> tuple[dict[str, dict[str, Any]], str | None]:
    """``DIR``, ``DIR:SYSTEM``, ``FILE`` or ``FILE:SYSTEM`` -> (question key -> entry, system)."""
    path, system = Path(spec), None
    if not path.exists() and ":" in spec:
        head, _, system = spec.rpartition(":")
        path = Path(head)
    if path.is_dir():
        path = path / "locomo-questions.jsonl"
    entries: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            e = json.loads(line)
            entries[f"{e['sample_id']}/{e['qa_index']}"] = e
    return entries, system


COMPARED = (
    "recall@10",
    "recall@5",
    "ndcg@10",
    "recall@10+artifacts",
    "candidates",
    *(f"rendered@{b}" for b in RENDER_BUDGETS),  # the systems that render (hrt, hybrid-rrf)
)


def compare_report(before_spec: str, after_spec: str, metrics: Sequence[str] = COMPARED) -> str:
    """A markdown table: per system pair, per metric, after minus before over categories 1-4
    (adversarial apart), with the paired bootstrap's 95% interval and the questions better / worse."""
    before, sys_a = _per_question(before_spec)
    after, sys_b = _per_question(after_spec)
    keys = sorted(set(before) & set(after))
    if sys_a or sys_b:
        pairs = [(sys_a or sys_b or "", sys_b or sys_a or "")]
    else:
        first: dict[str, Any] = next(iter(before.values()), {"systems": {}})["systems"]
        second: dict[str, Any] = next(iter(after.values()), {"systems": {}})["systems"]
        pairs = [(n, n) for n in first if n in second]
    lines = [
        f"Paired bootstrap, {len(keys)} questions in both; after ({after_spec}) minus before ({before_spec}), "
        "95% intervals over 2,000 resamples:",
        "",
        "| systems | metric | questions | difference | 95% interval | better / worse |",
        "|---|---|---:|---:|---|---|",
    ]
    for a, b in pairs:
        for group, cats in (("overall (1-4)", {1, 2, 3, 4}), ("multi-hop", {1}), ("adversarial", {5})):
            ks = [k for k in keys if before[k]["category"] in cats and a in before[k]["systems"]]
            ks = [k for k in ks if b in after[k]["systems"]]
            for m in metrics if group == "overall (1-4)" else ("recall@10",):
                if not ks or m not in before[ks[0]]["systems"][a] or m not in after[ks[0]]["systems"][b]:
                    continue
                mean, lo, hi, better, worse = paired_bootstrap(
                    [before[k]["systems"][a][m] for k in ks], [after[k]["systems"][b][m] for k in ks]
                )
                label = a if a == b else f"{a} -> {b}"
                lines.append(
                    f"| {label} | {m} {group} | {len(ks)} | {mean:+.2f} | [{lo:+.2f}, {hi:+.2f}] | {better} / {worse} |"
                )
    return "\n".join(lines) + "\n"
