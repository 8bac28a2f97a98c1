"""Ingest through the Python API in a child process (its own peak RSS, nothing left behind in the
harness), and the embedders it may use (``--vectors``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from hrt.bench.host import proc_status_kb
from hrt.bench.synth import GraphStats, SynthConfig, batches, vocabulary
from hrt.bench.targets import Target
from hrt.text import words


class ComposedEmbedder:
    """FOR INGEST ONLY (``--vectors composed``): a text's vector is the L2-normalised sum of the
    real model's vectors of its vocabulary words (words outside the vocabulary are ignored; a text
    with none gets a deterministic pseudo-random unit vector). Deterministic from the text."""

    def __init__(self, inner: Any, terms: Sequence[str]) -> None:
        vocab = sorted({w for term in terms for w in words(term)})
        self._index = {w: i for i, w in enumerate(vocab)}
        self._vectors = np.asarray(inner.embed(vocab), dtype=np.float32)
        self.dim = int(inner.dim)
        self.name = f"composed from {inner.name}"
        # the bench's stores are read with the real model, which must accept them
        self.model_id = inner.model_id

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            idx = [i for w in words(text) if (i := self._index.get(w)) is not None]
            if idx:
                v = self._vectors[idx].sum(axis=0)
            else:
                seed = int.from_bytes(text.encode()[:32].ljust(8, b"\0")[:8], "little")
                v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[row] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out

    def embed_queries(self, texts: Sequence[str]) -> Any:
        return self.embed(texts)


class TimedEmbedder:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.name = inner.name
        self.model_id = inner.model_id
        self.seconds = 0.0
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Any:
        return self._timed(self.inner.embed, texts)

    def embed_queries(self, texts: Sequence[str]) -> Any:
        return self._timed(self.inner.embed_queries, texts)

    def _timed(self, embed: Any, texts: Sequence[str]) -> Any:
        t = time.perf_counter()
        out = embed(texts)
        self.seconds += time.perf_counter() - t
        self.texts += len(texts)
        return out


def import_object(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def make_ingest_embedder(vectors: str) -> Any:
    """``real``: the configured model; ``composed``: see :class:`ComposedEmbedder`; anything with a
    colon: ``module:Class`` built without arguments (tests only, and the server uses it too)."""
    if ":" in vectors:
        return import_object(vectors)()
    from hrt.config import Settings
    from hrt.service import load_embedder

    real = load_embedder(Settings())
    if vectors == "real":
        return real
    return ComposedEmbedder(real, vocabulary())


def _ingest_child(
    cfg: dict[str, Any], settings: dict[str, Any], vectors: str, batch_size: int, parent: int | None = None
) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    embedder = TimedEmbedder(make_ingest_embedder(vectors))
    setup_s = time.perf_counter() - t0
    try:
        return asyncio.run(_ingest(SynthConfig(**cfg), settings, embedder, batch_size, setup_s, parent))
    except _Orphaned as exc:
        # the stores are closed (the ingest's finally ran); end the pool's worker process too, or
        # it would wait forever for work from a parent that is gone
        print(f"hrt bench ingest: {exc}", file=sys.stderr, flush=True)
        os._exit(3)


class _Orphaned(Exception):
    pass


def orphaned(parent: int | None) -> bool:
    """Whether the harness that started this ingest child is gone (the child was re-parented)."""
    return parent is not None and os.getppid() != parent


async def _ingest(
    cfg: SynthConfig,
    overrides: dict[str, Any],
    embedder: TimedEmbedder,
    batch_size: int,
    setup_s: float,
    parent: int | None = None,
) -> dict[str, Any]:
    from hrt.config import Settings
    from hrt.service import HRTService

    settings = Settings(**overrides)
    svc = await HRTService(settings, embedder=embedder).start()
    if svc.stores.outbox is not None:  # the record store is new: clear projections of an earlier run
        await svc.graph.delete_user(cfg.user_id)
        await svc.vectors.delete_user(cfg.user_id)
    stats = GraphStats()
    t0 = time.perf_counter()
    try:
        n_records, parse_s = await _write_graph(svc, cfg, batch_size, stats, parent)
        seconds = time.perf_counter() - t0
        t = time.perf_counter()
        svc.preload_users([cfg.user_id])  # build the user's in-process caches and HNSW graph, as a server would
        index_s = time.perf_counter() - t
    finally:
        await svc.close()
    entities = stats.n_entities
    return {
        "seconds": round(seconds, 2),
        "entities": entities,
        "relations": stats.n_relations,
        "records": n_records,
        "entities_per_s": round(entities / seconds, 1),
        "records_per_s": round(n_records / seconds, 1),
        "embed_seconds": round(embedder.seconds, 2),
        "parse_seconds": round(parse_s, 2),
        "write_seconds": round(seconds - embedder.seconds - parse_s, 2),
        "index_seconds": round(index_s, 2),
        "embedder": embedder.name,
        "embedder_setup_seconds": round(setup_s, 2),
        "batch_size": batch_size,
        "process_peak_rss_mb": round((proc_status_kb(os.getpid(), "VmHWM") or 0) / 1024, 1),
        "graph": {
            "entities": dict(stats.entities),
            "relations": dict(sorted(stats.relations.items())),
            "preferences": stats.preferences,
            "concept_degree": stats.degree_summary(),
        },
    }


async def _write_graph(
    svc: Any, cfg: SynthConfig, batch_size: int, stats: GraphStats, parent: int | None
) -> tuple[int, float]:
    """The generated graph ingested batch by batch: the records written and the seconds parsing them."""
    from hrt.ingest import parse_record

    n_records = 0
    parse_s = 0.0
    for raw in batches(cfg, batch_size, stats):
        # `hrt bench` killed (not by Ctrl-C, which reaches the whole process group): stop at the
        # next batch instead of writing into the stores for the hour a 1M ingest takes
        if orphaned(parent):
            raise _Orphaned(f"hrt bench (pid {parent}) is gone: ingest stopped after {n_records} records")
        t = time.perf_counter()
        records = [parse_record(obj, f"record {n_records + i}") for i, obj in enumerate(raw)]
        parse_s += time.perf_counter() - t
        await svc.ingest(records)
        n_records += len(records)
    return n_records, parse_s


def run_ingest(cfg: SynthConfig, target: Target, vectors: str, batch_size: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        future = pool.submit(_ingest_child, asdict(cfg), target.settings, vectors, batch_size, os.getpid())
        result: dict[str, Any] = future.result()
    return result
