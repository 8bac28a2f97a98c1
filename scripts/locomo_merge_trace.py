"""What fills the first ten places when memory units and artifacts are merged by score (the eval's
"R@10 +artifacts"), per kind of item, for the headline request under each ``--variant``: places
taken and their precision (the item is an evidence turn, or an artifact derived from one), over the
582 questions of categories 1-4; then the artifact list alone, ranked by its own scores, credited
like the metric (recall@5 and @10). It measured what became
``artifact_evidence`` ``source`` (docs/eval-locomo.md, "Scoring defaults").

Item kinds are read from the LoCoMo import's ids (``turn:``, ``obs:``, ``summary:``), so this is a
LoCoMo tool. It reuses the lab's kept store (``scripts/locomo_lab.py --db``; imported if absent).

    python scripts/locomo_merge_trace.py --db /tmp/lab/locomo.db \
        --variant 'own={"artifact_evidence": "own"}' --variant 'source={}'
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

from hrt.config import Settings
from hrt.eval.locomo.evaluation import import_samples
from hrt.eval.locomo.systems import EvalConfig, request_for
from hrt.extraction.locomo import load_samples


def covered(ids: Iterable[str], derived: Mapping[str, frozenset[str]]) -> set[str]:
    """The turns a list of items covers: a turn itself, an artifact the turns it derives from."""
    out: set[str] = set()
    for i in ids:
        out |= derived.get(i, frozenset([i]))
    return out


async def main(args: argparse.Namespace) -> None:
    from hrt.embedder import CachedEmbedder
    from hrt.service import HRTService, load_embedder

    imported, questions, _ = import_samples(load_samples(args.data))
    derived = {c.user_id: c.derived_from for c in imported}
    cfg = EvalConfig()
    embedder = CachedEmbedder(load_embedder(Settings()), 8192)
    fresh = not args.db.exists()
    for spec in args.variant:
        name, _, raw = spec.partition("=")
        service = HRTService(Settings(db_path=args.db, **json.loads(raw or "{}")), embedder=embedder)
        await service.start()
        places, hits = Counter[str](), Counter[str]()
        merged_recall, alone = 0.0, {5: 0.0, 10: 0.0}
        asked = [q for q in questions if q.category != 5]
        try:
            if fresh:
                for conv in imported:
                    await service.ingest(conv.records)
                fresh = False
            for q in asked:
                ctx = await service.tool.retrieve(request_for(q, cfg, None, cfg.weights))
                table = derived.get(q.user_id, {})
                units = [(-m.final_retrieval_score, m.muid) for m in ctx.retrieved_memory_units]
                artifacts = sorted((-a.final_retrieval_score, a.id) for a in ctx.retrieved_artifacts)
                top = [i for _, i in sorted(units + artifacts)[:10]]
                for i in top:
                    kind = i.split(":", 1)[0]
                    places[kind] += 1
                    hits[kind] += bool(covered([i], table) & q.evidence)
                merged_recall += len(covered(top, table) & q.evidence) / len(q.evidence)
                for k in alone:
                    alone[k] += len(covered([i for _, i in artifacts[:k]], table) & q.evidence) / len(q.evidence)
        finally:
            await service.close()
        n = len(asked)
        kinds = ", ".join(f"{k} {places[k]} ({100 * hits[k] / places[k]:.1f}%)" for k in sorted(places))
        print(
            f"{name:12s} merged R@10 {100 * merged_recall / n:5.1f} | places (precision): {kinds}"
            f" | artifacts alone R@5 {100 * alone[5] / n:5.1f} R@10 {100 * alone[10] / n:5.1f}",
            flush=True,
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--variant", action="append", required=True, help="NAME=JSON Settings overrides")
    return parser


if __name__ == "__main__":
    asyncio.run(main(build_parser().parse_args()))
