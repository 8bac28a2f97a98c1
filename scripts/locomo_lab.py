"""The LoCoMo lab: import once, then ask every question under several configurations and compare
them pairwise (the harness behind docs/eval-locomo.md's "Scoring defaults" table).

``hrt eval locomo`` imports the data into a fresh store on every run (~50 s); this keeps the
import in ``--db`` and asks the headline request (the eval's own ``request_for``) under each
``--variant NAME=JSON`` (Settings overrides, JSON object), printing recall@10 overall and per
category, recall@10 +artifacts and candidate recall, each against the first variant with its
paired bootstrap interval. Per-question output goes to ``--out/<variant>.jsonl`` in the eval's
format, so ``hrt eval locomo --compare`` reads it too. Dev data only: tuning reads nothing else.

    python scripts/locomo_lab.py --db /tmp/lab/locomo.db --out /tmp/lab/out \
        --variant 'defaults={}' --variant 'depth1={"default_depth": 1}'
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from hrt.config import Settings
from hrt.embedder import Embedder
from hrt.eval.locomo.compare import paired_bootstrap
from hrt.eval.locomo.evaluation import import_samples, question_record, system_record
from hrt.eval.locomo.metrics import CATEGORY_NAMES, OVERALL, aggregate, question_metrics
from hrt.eval.locomo.systems import EvalConfig, Traced, hrt_system
from hrt.extraction.locomo import load_samples

# (label, aggregate's group key), as printed
GROUPS = [("overall", OVERALL), *((name, str(c)) for c, name in CATEGORY_NAMES.items())]


async def main(args: argparse.Namespace, embedder: Embedder | None = None) -> dict[str, list[dict[str, Any]]]:
    """Run every variant; returns the per-question rows by variant name (also written to --out)."""
    from hrt.embedder import CachedEmbedder
    from hrt.service import HRTService, load_embedder

    samples = load_samples(args.data)
    imported, questions, _ = import_samples(samples)
    cfg = EvalConfig(phrases=args.phrases)
    embedder = CachedEmbedder(embedder or load_embedder(Settings()), 8192)
    fresh = not args.db.exists()
    args.db.parent.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    derived = {c.user_id: c.derived_from for c in imported}
    results: dict[str, list[dict[str, Any]]] = {}
    for spec in args.variant:
        name, _, raw = spec.partition("=")
        overrides = json.loads(raw or "{}")
        depth = overrides.pop("max_depth", None)
        unweighted = overrides.pop("unweighted", False)
        service = HRTService(Settings(db_path=args.db, **overrides), embedder=embedder)
        await service.start()
        try:
            if fresh:
                for conv in imported:
                    await service.ingest(conv.records)
                fresh = False
            run = hrt_system(service.tool, derived, cfg, depth, None if unweighted else cfg.weights, Traced())
            rows: list[dict[str, Any]] = []
            metrics: list[tuple[int, dict[str, float]]] = []
            t0 = time.perf_counter()
            for q in questions:
                ranking = await run(q)
                m = question_metrics(ranking, q.evidence)
                metrics.append((q.category, m))
                rows.append(question_record(q))
                rows[-1]["systems"]["hrt"] = system_record(ranking, q.evidence, m)
            seconds = time.perf_counter() - t0
        finally:
            await service.close()
        results[name] = rows
        (args.out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        report(name, rows, aggregate(metrics), results[args.variant[0].partition("=")[0]], seconds)
    return results


Rows = list[dict[str, Any]]


def report(name: str, rows: Rows, means: dict[str, dict[str, float]], base: Rows, seconds: float) -> None:
    """One line: recall@10 per group, +artifacts, candidate recall and nDCG@10 over categories 1-4,
    then against the first variant (``base``) the paired bootstraps of recall@10 and +artifacts over
    categories 1-4 and of recall@10 over multi-hop."""
    cells = " ".join(f"{label[:5]} {means.get(group, {}).get('recall@10', 0.0):5.1f}" for label, group in GROUPS)
    overall = means.get(OVERALL, {})
    line = (
        f"{name:28s} {cells} | +art {overall.get('recall@10+artifacts', 0.0):5.1f}"
        f" cand {overall.get('candidates', 0.0):5.1f} ndcg {overall.get('ndcg@10', 0.0):5.1f}"
        f" | {1000 * seconds / len(rows):.1f} ms/q"
    )
    if rows is not base:
        overall_ids = [i for i, r in enumerate(rows) if r["category"] != 5]
        multi_hop = [i for i, r in enumerate(rows) if r["category"] == 1]
        compared = (("R@10", overall_ids, "recall@10"), ("+artifacts", overall_ids, "recall@10+artifacts"))
        for label, ids, metric in (*compared, ("mh", multi_hop, "recall@10")):
            d, lo, hi, better, worse = paired_bootstrap(
                [base[i]["systems"]["hrt"][metric] for i in ids], [rows[i]["systems"]["hrt"][metric] for i in ids]
            )
            line += f" | {label} {d:+.2f} [{lo:+.2f}, {hi:+.2f}] {better}/{worse}"
    print(line, flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--phrases", default="keywords")
    parser.add_argument("--variant", action="append", required=True, help="NAME=JSON Settings overrides")
    return parser


if __name__ == "__main__":
    asyncio.run(main(build_parser().parse_args()))
