"""Would passage-level evidence raise LoCoMo recall? An offline probe on the dev conversations.

Every question is asked with the eval's headline request (``request_for``, the product's
defaults); the pipeline's trace hook gives every memory unit it scored with its semantic term.
Each turn's text is cut into sentences, each sentence embedded on its own (``context``: prefixed
with its speaker, ``Caroline: ...``; ``bare``: alone), and a candidate's passage evidence is its
best sentence cosine to the key phrases. The candidates are then re-ranked by ``semantic +
lambda x passage`` and recall@10 (categories 1-4 and multi-hop) compared with the pipeline's own
order, with the paired bootstrap. The candidates stay those the pipeline scored (ranking only),
unless ``--search K`` also adds each question's K best turns by their best sentence (a passage
search leg). It measured what became HRT's passage vectors (docs/eval-locomo.md, "Scoring
defaults"); the pipeline runs here with ``passage_weight`` 0, as before they existed.

    python scripts/locomo_passage_probe.py --db /tmp/lab/locomo.db
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
from pathlib import Path
from typing import Any

import numpy as np

from hrt.config import Settings
from hrt.eval.locomo.compare import paired_bootstrap
from hrt.eval.locomo.evaluation import import_samples
from hrt.eval.locomo.metrics import recall_at
from hrt.eval.locomo.systems import EvalConfig, request_for
from hrt.extraction.locomo import load_samples
from hrt.records import Kind, MemoryUnit

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def sentences(content: str, mode: str) -> list[str]:
    """The turn's sentences (at least 4 characters); ``context`` prefixes each but the first, which
    already starts ``Speaker said, "...``, with ``Speaker:``."""
    speaker = content.split(" said,", 1)[0]
    parts = [p.strip() for p in SENTENCE_END.split(content) if len(p.strip()) > 3]
    if mode == "bare":
        return parts
    if mode == "lead":  # each sentence after the first, behind the first
        return parts[:1] + [f"{parts[0]} {p}" for p in parts[1:]]
    if mode == "pairs":  # each pair of neighbouring sentences
        return parts[:1] if len(parts) < 2 else [f"{a} {b}" for a, b in itertools.pairwise(parts)]
    return [p if p.startswith(speaker) else f"{speaker}: {p}" for p in parts]


async def main(args: argparse.Namespace) -> None:
    from hrt.embedder import CachedEmbedder
    from hrt.service import HRTService, load_embedder

    samples = load_samples(args.data)
    imported, questions, _ = import_samples(samples)
    texts = {(c.user_id, r.muid): r.content for c in imported for r in c.records if isinstance(r, MemoryUnit)}
    embedder = CachedEmbedder(load_embedder(Settings()), 1 << 16)
    fresh = not args.db.exists()
    # passage evidence off: the probe adds its own to the order the pipeline gives without it
    service = HRTService(Settings(db_path=args.db, passage_weight=0.0), embedder=embedder)
    await service.start()
    cfg = EvalConfig()
    scored: dict[str, Any] = {}
    service.tool.trace = lambda _intake, items: scored.__setitem__("items", items)
    traced: list[tuple[Any, list[tuple[str, float]], np.ndarray]] = []
    try:
        if fresh:
            for conv in imported:
                await service.ingest(conv.records)
        for q in questions:
            request = request_for(q, cfg, args.depth, cfg.weights)
            await service.tool.retrieve(request)
            mus = [(x.id, x.semantic) for x in scored["items"] if x.kind is Kind.MEMORY_UNIT]
            phrases = np.asarray(embedder.embed(list(request.key_phrases)), dtype=np.float32)
            traced.append((q, mus, phrases / np.linalg.norm(phrases, axis=1, keepdims=True)))
    finally:
        await service.close()
    for mode in args.modes:
        vectors: dict[str, np.ndarray] = {}
        for key, content in texts.items():
            v = np.asarray(embedder.embed(sentences(content, mode)), dtype=np.float32)
            vectors["\0".join(key)] = v / np.linalg.norm(v, axis=1, keepdims=True)
        users: dict[str, list[str]] = {}
        for key in vectors:
            users.setdefault(key.split("\0", 1)[0], []).append(key)
        # per question: the pipeline's order, its semantic terms, and each turn's passage evidence
        # (every candidate's; with --search, also the user's K best turns by passage, which join)
        pools: list[tuple[Any, list[str], dict[str, float], dict[str, float]]] = []
        for q, mus, phrases in traced:
            base = [i for i, _ in mus]
            passage = {i: float((vectors[f"{q.user_id}\0{i}"] @ phrases.T).max()) for i in base}
            if args.search:
                mine = [k.split("\0", 1)[1] for k in users[q.user_id]]
                best = {i: float((vectors[f"{q.user_id}\0{i}"] @ phrases.T).max()) for i in mine}
                passage.update(sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[: args.search])
            pools.append((q, base, dict(mus), passage))
        for lam in args.lambdas:
            before: list[float] = []
            after: list[float] = []
            categories: list[int] = []
            for q, base, semantic, passage in pools:
                mixed = sorted(passage, key=lambda i: (-(semantic.get(i, 0.0) + lam * passage[i]), i))
                before.append(recall_at(base, q.evidence, 10))
                after.append(recall_at(mixed, q.evidence, 10))
                categories.append(q.category)
            for label, cats in (("overall (1-4)", {1, 2, 3, 4}), ("multi-hop", {1})):
                idx = [k for k, c in enumerate(categories) if c in cats]
                d, lo, hi, better, worse = paired_bootstrap([before[k] for k in idx], [after[k] for k in idx])
                print(
                    f"{mode:7s} lambda {lam:3.1f} {label:13s} recall@10 {100 * np.mean([before[k] for k in idx]):5.1f}"
                    f" -> {100 * np.mean([after[k] for k in idx]):5.1f}  {d:+.2f} [{lo:+.2f}, {hi:+.2f}]"
                    f"  {better} better / {worse} worse",
                    flush=True,
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo-dev.json"))
    parser.add_argument("--db", type=Path, required=True, help="the embedded store (imported when absent)")
    parser.add_argument("--modes", nargs="+", default=["context", "bare"], choices=["context", "bare", "lead", "pairs"])
    parser.add_argument("--lambdas", nargs="+", type=float, default=[1.0, 1.5, 2.0])
    parser.add_argument("--depth", type=int, default=None, help="max_depth (default: HRT_DEFAULT_DEPTH)")
    parser.add_argument("--search", type=int, default=0, help="also add the user's K best turns by passage")
    asyncio.run(main(parser.parse_args()))
