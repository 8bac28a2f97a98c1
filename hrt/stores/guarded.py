"""The graph store and the vector index behind their circuits (:mod:`hrt.stores.circuit`), with
retrieval's reads falling back to the record store while one is down (:mod:`hrt.stores.fallback`).

The composition root (:mod:`hrt.stores.factory`) wraps the Neo4j and Weaviate adapters in these,
so the pipeline, the projector and the tools see the same ports as before:

- every call goes through the store's circuit: while it is open, a write or a maintenance read
  raises :class:`~hrt.errors.StoreDown` at once (503 naming the store, with ``Retry-After``; the
  projector leaves the events in the outbox);
- retrieval's reads (search and cosines; the walk and the neighbour lists) that fail because the
  store is unavailable are answered by the fallback, and noted (:func:`hrt.stores.fallback.note`)
  so the response is marked ``degraded`` with the stage and the store.

The lifecycle's calls (open, ping, apply_schema) run even while the circuit is open (they are how
a store comes back), and a failure of theirs opens it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from hrt.errors import StoreUnavailable
from hrt.metrics import Metrics
from hrt.records import EdgeType, Kind
from hrt.stores.base import (
    ExpansionCaps,
    GraphCandidate,
    GraphEdge,
    GraphNode,
    GraphStore,
    PhraseVectors,
    SearchFilter,
    StoreLifecycle,
    Vector,
    VectorDoc,
    VectorHit,
    VectorIndex,
)
from hrt.stores.circuit import StoreCircuit
from hrt.stores.fallback import STAGE, RecordGraph, RecordVectors, note

SEARCH_REASON = "grounding: {store} unavailable; seeds from PostgreSQL's text search and stored vectors"
WALK_REASON = "expansion: {store} unavailable; no graph walk, the seeds alone (read from PostgreSQL)"
NEIGHBOURS_REASON = "{stage}: {store} unavailable; relations read from PostgreSQL"


class _Guarded:
    inner: StoreLifecycle  # the store behind the circuit: its lifecycle, the same for every port

    def __init__(self, circuit: StoreCircuit, metrics: Metrics | None) -> None:
        self.circuit = circuit
        self._metrics = metrics

    async def open(self, *, keep_trying: bool = False) -> None:
        await self.circuit.call(lambda: self.inner.open(keep_trying=keep_trying), gate=False)

    async def close(self) -> None:
        await self.circuit.close()
        await self.inner.close()

    async def ping(self) -> None:
        await self.circuit.call(self.inner.ping, gate=False)

    async def apply_schema(self) -> None:
        await self.circuit.call(self.inner.apply_schema, gate=False)

    async def warm(self) -> None:
        await self.circuit.call(self.inner.warm)

    def _fell_back(self, read: str) -> None:
        if self._metrics is not None:
            self._metrics.store_fallbacks.labels(store=self.circuit.store, read=read).inc()


class GuardedVectorIndex(_Guarded):
    """A :class:`VectorIndex` behind its circuit; ``fallback`` answers retrieval's reads while it
    is down (None: they fail as 503)."""

    inner: VectorIndex

    def __init__(
        self, inner: VectorIndex, circuit: StoreCircuit, fallback: RecordVectors | None, metrics: Metrics | None = None
    ) -> None:
        super().__init__(circuit, metrics)
        self.inner = inner
        self.fallback = fallback

    async def upsert(self, user_id: str, docs: Sequence[VectorDoc]) -> None:
        await self.circuit.call(lambda: self.inner.upsert(user_id, docs))

    async def delete(self, user_id: str, ids: Sequence[str]) -> None:
        await self.circuit.call(lambda: self.inner.delete(user_id, ids))

    async def delete_user(self, user_id: str) -> None:
        await self.circuit.call(lambda: self.inner.delete_user(user_id))

    async def search(
        self,
        user_id: str,
        phrases: Sequence[str],
        vectors: PhraseVectors,
        kinds: Sequence[Kind],
        k: int,
        not_after: float | None = None,
        where: SearchFilter | None = None,
    ) -> list[list[VectorHit]]:
        try:
            return await self.circuit.call(
                lambda: self.inner.search(user_id, phrases, vectors, kinds, k, not_after, where)
            )
        except StoreUnavailable:
            if self.fallback is None:
                raise
        self._fell_back("search")
        note("grounding", self.circuit.store, SEARCH_REASON.format(store=self.circuit.store))
        return await self.fallback.search(user_id, phrases, vectors, kinds, k, not_after, where)

    async def similarities(self, user_id: str, ids: Sequence[str], vectors: Vector) -> dict[str, float]:
        try:
            return await self.circuit.call(lambda: self.inner.similarities(user_id, ids, vectors))
        except StoreUnavailable:
            if self.fallback is None:
                raise
        self._fell_back("similarities")  # exact: the same vectors, nothing to mark
        return await self.fallback.similarities(user_id, ids, vectors)

    async def passage_similarities(
        self, user_id: str, ids: Sequence[str], vectors: Vector
    ) -> dict[str, tuple[float, float]]:
        try:
            return await self.circuit.call(lambda: self.inner.passage_similarities(user_id, ids, vectors))
        except StoreUnavailable:
            if self.fallback is None:
                raise
        self._fell_back("passage_similarities")
        return await self.fallback.passage_similarities(user_id, ids, vectors)

    async def ids(self, user_id: str) -> dict[str, str]:
        return await self.circuit.call(lambda: self.inner.ids(user_id))

    async def docs(self, user_id: str) -> dict[str, VectorDoc]:
        return await self.circuit.call(lambda: self.inner.docs(user_id))


class GuardedGraphStore(_Guarded):
    """A :class:`GraphStore` behind its circuit; ``fallback`` answers retrieval's reads while it
    is down (None: they fail as 503)."""

    inner: GraphStore

    def __init__(
        self, inner: GraphStore, circuit: StoreCircuit, fallback: RecordGraph | None, metrics: Metrics | None = None
    ) -> None:
        super().__init__(circuit, metrics)
        self.inner = inner
        self.fallback = fallback

    @property
    def expansion_path(self) -> str:
        return self.inner.expansion_path

    async def upsert_nodes(self, user_id: str, nodes: Sequence[GraphNode]) -> None:
        await self.circuit.call(lambda: self.inner.upsert_nodes(user_id, nodes))

    async def delete_nodes(self, user_id: str, ids: Sequence[str]) -> None:
        await self.circuit.call(lambda: self.inner.delete_nodes(user_id, ids))

    async def upsert_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None:
        await self.circuit.call(lambda: self.inner.upsert_edges(user_id, edges))

    async def delete_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None:
        await self.circuit.call(lambda: self.inner.delete_edges(user_id, edges))

    async def delete_user(self, user_id: str) -> None:
        await self.circuit.call(lambda: self.inner.delete_user(user_id))

    async def expand(
        self,
        user_id: str,
        seeds: Mapping[str, float],
        caps: ExpansionCaps,
        not_after: float | None = None,
        valid_at: float | None = None,
    ) -> list[GraphCandidate]:
        try:
            return await self.circuit.call(lambda: self.inner.expand(user_id, seeds, caps, not_after, valid_at))
        except StoreUnavailable:
            if self.fallback is None:
                raise
        self._fell_back("expand")
        note("expansion", self.circuit.store, WALK_REASON.format(store=self.circuit.store))
        return await self.fallback.expand(user_id, seeds, caps, not_after, valid_at)

    async def neighbors(
        self,
        user_id: str,
        ids: Sequence[str],
        edge: EdgeType,
        outgoing: bool,
        limit: int,
        not_after: float | None = None,
        valid_at: float | None = None,
    ) -> dict[str, list[GraphNode]]:
        try:
            return await self.circuit.call(
                lambda: self.inner.neighbors(user_id, ids, edge, outgoing, limit, not_after, valid_at)
            )
        except StoreUnavailable:
            if self.fallback is None:
                raise
        self._fell_back("neighbors")
        stage = STAGE.get() or "expansion"
        note(stage, self.circuit.store, NEIGHBOURS_REASON.format(stage=stage, store=self.circuit.store))
        return await self.fallback.neighbors(user_id, ids, edge, outgoing, limit, not_after, valid_at)

    async def ids(self, user_id: str) -> dict[str, str]:
        return await self.circuit.call(lambda: self.inner.ids(user_id))

    async def nodes(self, user_id: str) -> dict[str, GraphNode]:
        return await self.circuit.call(lambda: self.inner.nodes(user_id))

    async def edges(self, user_id: str) -> list[GraphEdge]:
        return await self.circuit.call(lambda: self.inner.edges(user_id))
