"""The LoCoMo lab: import once, then ask every question under several configurations and compare
them pairwise (the harness behind docs/eval-locomo.md's "what changed" tables).

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
from hrt.eval.locomo.dataset import load_samples
from hrt.eval.locomo.importer import import_conversation
from hrt.eval.locomo.metrics import CATEGORY_NAMES, PER_QUESTION_METRICS, question_metrics
from hrt.eval.locomo.questions import build_questions
from hrt.eval.locomo.systems import EvalConfig, Traced, hrt_system

GROUPS = {"overall": {1, 2, 3, 4}, **{name: {c} for c, name in CATEGORY_NAMES.items()}}


async def main(args: argparse.Namespace, embedder: Embedder | None = None) -> dict[str, list[dict[str, Any]]]:
    """Run every variant; returns the per-question rows by variant name (also written to --out)."""
    from hrt.embedder import CachedEmbedder
    from hrt.service import HRTService, load_embedder

    samples = load_samples(args.data)
    imported = [import_conversation(s) for s in samples]
    questions = [q for s, c in zip(samples, imported, strict=True) for q in build_questions(s, c)[0]]
    cfg = EvalConfig(phrases=args.phrases)
    embedder = CachedEmbedder(embedder or load_embedder(Settings()), 8192)
    fresh = not args.db.exists()
    args.db.parent.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
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
            derived = {c.user_id: c.derived_from for c in imported}
            traced = Traced()
            run = hrt_system(service.tool, derived, cfg, depth, None if unweighted else cfg.weights, traced)
            rows = []
            t0 = time.perf_counter()
            for q in questions:
                ranking = await run(q)
                m = question_metrics(ranking, q.evidence)
                rows.append(
                    {
                        "sample_id": q.sample_id,
                        "qa_index": q.index,
                        "category": q.category,
                        "evidence": sorted(q.evidence),
                        "systems": {
                            "hrt": {
                                "evidence_ranks": [
                                    r for r, mu in enumerate(ranking.memory_units, start=1) if mu in q.evidence
                                ],
                                **{k: round(m[k], 4) for k in PER_QUESTION_METRICS},
                            }
                        },
                    }
                )
            seconds = time.perf_counter() - t0
        finally:
            await service.close()
        results[name] = rows
        (args.out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        report(name, rows, results[args.variant[0].partition("=")[0]], seconds)
    return results


def mean(rows: list[dict[str, Any]], metric: str, cats: set[int]) -> float:
    vals = [r["systems"]["hrt"][metric] for r in rows if r["category"] in cats]
    return 100.0 * sum(vals) / max(1, len(vals))


def report(name: str, rows: list[dict[str, Any]], base: list[dict[str, Any]], seconds: float) -> None:
    cells = " ".join(f"{g[:5]} {mean(rows, 'recall@10', c):5.1f}" for g, c in GROUPS.items())
    line = (
        f"{name:28s} {cells} | +art {mean(rows, 'recall@10+artifacts', GROUPS['overall']):5.1f}"
        f" cand {mean(rows, 'candidates', GROUPS['overall']):5.1f} ndcg {mean(rows, 'ndcg@10', GROUPS['overall']):5.1f}"
        f" | {1000 * seconds / len(rows):.1f} ms/q"
    )
    if rows is not base:
        ks = [i for i, r in enumerate(rows) if r["category"] in GROUPS["overall"]]
        for metric in ("recall@10", "recall@10+artifacts"):
            d, lo, hi, better, worse = paired_bootstrap(
                [base[i]["systems"]["hrt"][metric] for i in ks], [rows[i]["systems"]["hrt"][metric] for i in ks]
            )
            line += f" | {metric[9:] or 'R@10'} {d:+.2f} [{lo:+.2f}, {hi:+.2f}] {better}/{worse}"
        mh = [i for i, r in enumerate(rows) if r["category"] == 1]
        d, lo, hi, *_ = paired_bootstrap(
            [base[i]["systems"]["hrt"]["recall@10"] for i in mh], [rows[i]["systems"]["hrt"]["recall@10"] for i in mh]
        )
        line += f" | mh {d:+.2f} [{lo:+.2f}, {hi:+.2f}]"
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
