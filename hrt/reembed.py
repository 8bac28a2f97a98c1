"""``hrt reembed``: rewrite every vector of a store with the configured embedding model, in place.

The store records the model its vectors belong to (:mod:`hrt.stores.vector_meta`) and a server
refuses another model's store. ``hrt reembed`` moves a store to the configured model: it marks the
store as moving to it (``reembed_target``), then embeds every entity's text and passages again,
a page at a time in (user_id, id) order, and commits each page's vectors with the key of its last
entity (``reembed_cursor``). Killed, it resumes from that cursor when run again with the same
model (another model starts over); a server refuses the store until the re-embedding finishes,
since its vectors are of two models meanwhile. At the end the store records the new model and
dimension, and the vector index is brought up to date (the embedded HNSW graphs are dropped to be
rebuilt; Weaviate receives the new vectors through the outbox).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from hrt.config import Settings
from hrt.embedder import Embedder
from hrt.ingest import embed_entities
from hrt.stores import vector_meta
from hrt.stores.base import Vector, VectorRewriter

PAGE = 256


@dataclass(frozen=True)
class ReembedResult:
    model_id: str
    previous: str | None  # the model the store recorded before; None: none recorded
    entities: int  # rewritten by this run
    resumed: bool  # this run continued an unfinished re-embedding


async def reembed(
    store: VectorRewriter,
    embedder: Embedder,
    *,
    page: int = PAGE,
    progress: Callable[[int, int], None] | None = None,
) -> ReembedResult:
    """Move ``store`` to ``embedder``'s model; ``progress(done, total)`` after each page."""
    meta = await store.vector_meta()
    target = embedder.model_id
    previous = meta.get(vector_meta.MODEL_KEY)
    cursor = vector_meta.cursor_of(meta, target)
    resumed = cursor is not None
    if not resumed:
        await store.set_vector_meta({vector_meta.TARGET_KEY: target, vector_meta.CURSOR_KEY: None})
    total = await store.count_entities()
    done = total - await store.count_entities(cursor) if cursor is not None else 0
    rewritten = 0
    if progress is not None:
        progress(done, total)
    while entities := await store.entity_page(cursor, page):
        vectors: dict[tuple[str, str], Vector] = {}
        passages: dict[tuple[str, str], Vector] = {}
        await asyncio.to_thread(embed_entities, entities, embedder, vectors, passages)
        cursor = (entities[-1].user_id, entities[-1].id)
        await store.rewrite_vectors(vectors, passages, {vector_meta.CURSOR_KEY: vector_meta.cursor_value(cursor)})
        done += len(entities)
        rewritten += len(entities)
        if progress is not None:
            progress(done, total)
    await store.finish()
    await store.set_vector_meta(
        {
            vector_meta.MODEL_KEY: target,
            vector_meta.DIM_KEY: str(embedder.dim),
            vector_meta.TARGET_KEY: None,
            vector_meta.CURSOR_KEY: None,
        }
    )
    return ReembedResult(model_id=target, previous=previous, entities=rewritten, resumed=resumed)


class _Unchecked:
    """The embedder, presented to the stores as no model: the store's model is being replaced."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.name = inner.name
        self.model_id = ""

    def embed(self, texts: Sequence[str]) -> Vector:
        return self.inner.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> Vector:
        return self.inner.embed_queries(texts)


async def run(settings: Settings, *, page: int = PAGE, show_progress: bool = False) -> dict[str, Any]:
    """``hrt reembed``: the configured store moved to the configured model, with a progress bar on
    stderr (on a terminal, or always with ``show_progress``); returns the report it prints."""
    from tqdm import tqdm

    from hrt.service import HRTService, load_embedder

    embedder = load_embedder(settings)
    service = await HRTService(settings, embedder=_Unchecked(embedder)).start()
    started = time.perf_counter()
    try:
        store = service.vector_rewriter()
        disable = False if show_progress else None  # None: tqdm shows it on a terminal only
        with tqdm(desc=f"reembed {embedder.model_id}", unit="entity", file=sys.stderr, disable=disable) as bar:

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.n = done
                bar.refresh()

            result = await reembed(store, embedder, page=page, progress=progress)
    finally:
        await service.close()
    return {
        "model": result.model_id,
        "previous_model": result.previous,
        "entities": result.entities,
        "resumed": result.resumed,
        "seconds": round(time.perf_counter() - started, 1),
    }
