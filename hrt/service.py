"""The HRT service: one object wiring settings, embedder, stores, reranker and metrics, used by
the CLI and the HTTP API alike."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from hrt.config import Settings
from hrt.contract import AugmentedMemoryContext, RetrieveRequest
from hrt.embedder import CachedEmbedder, Embedder, SentenceTransformerEmbedder
from hrt.errors import InvalidInput
from hrt.ingest import Record, build_batch
from hrt.metrics import Metrics
from hrt.pipeline import HybridRetrievalTool, utc_now
from hrt.records import Deletion, Kind, valid_id
from hrt.reranker import NoopReranker, Reranker
from hrt.stores.base import WriteResult
from hrt.stores.embedded import EmbeddedStore

log = logging.getLogger(__name__)


def load_embedder(settings: Settings) -> Embedder:
    inner = SentenceTransformerEmbedder(
        settings.embedding_model, device=settings.embedding_device, batch_size=settings.embedding_batch_size
    )
    return CachedEmbedder(inner, settings.embedding_cache_size)


class HRTService:
    def __init__(
        self,
        settings: Settings,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.settings = settings
        self.embedder = embedder or load_embedder(settings)
        self.metrics = Metrics()
        self.store = EmbeddedStore(settings.db_path, self.embedder.dim)
        self.tool = HybridRetrievalTool(
            settings,
            self.embedder,
            vectors=self.store.vectors,
            graph=self.store.graph,
            records=self.store.records,
            reranker=reranker or NoopReranker(),
            metrics=self.metrics,
            deployment=settings.backend,
            clock=clock,
        )

    async def retrieve(self, request: RetrieveRequest) -> AugmentedMemoryContext:
        return await self.tool.retrieve(request)

    async def retrieve_timed(self, request: RetrieveRequest) -> tuple[AugmentedMemoryContext, dict[str, float]]:
        return await self.tool.run(request)

    def ingest(self, records: Sequence[Record], progress: Callable[[int], None] | None = None) -> WriteResult:
        batch = build_batch(records, self.embedder, progress=progress)
        result = self.store.apply(batch)
        for r in records:
            self.metrics.ingested.labels(kind=r.kind).inc()
        return result

    def delete_entity(self, user_id: str, kind: Kind, ident: str) -> int:
        if not valid_id(ident):
            raise InvalidInput(f"{ident!r} is not a valid id", field="id")
        deletion = Deletion(op="delete", kind=Kind(kind).value, user_id=user_id, id=ident)
        return self.ingest([deletion]).deleted

    def delete_user(self, user_id: str) -> int:
        return self.store.delete_user(user_id)

    def close(self) -> None:
        self.store.close()
