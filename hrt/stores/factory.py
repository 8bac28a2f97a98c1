"""The composition root of the stores: the one module that reads which backend each role gets.

``HRT_RECORD_STORE``, ``HRT_GRAPH_STORE`` and ``HRT_VECTOR_INDEX`` choose the backends by name
(:mod:`hrt.stores.registry`); everything else (the service, the CLI, ``hrt doctor``, the bench, the
dev stack's users) asks this module for the ports of :mod:`hrt.stores.base` and never imports an
adapter. The record backend opens its side (the records, the writer, the outbox when a projector
delivers the projections, the reads that stand in for a projection server that is down); the graph
and vector backends open their ports, the ones that run as servers behind a circuit. With the
embedded record store a write commits records and projections in one SQLite transaction; with
PostgreSQL, records plus outbox rows that the projector (:mod:`hrt.projector`) delivers.

Adding a backend: a package under ``hrt/stores/`` implementing the ports with one
:class:`~hrt.stores.backend.Backend`, and its registration (docs/development.md, "Adding a backend").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hrt.config import Settings
from hrt.errors import StoreError
from hrt.stores import registry
from hrt.stores.backend import NOT_IN_PROCESS, Backend, InProcess, Opening, Role
from hrt.stores.base import GraphStore, Outbox, RecordStore, StoreLifecycle, VectorIndex, VectorRewriter, Writer
from hrt.stores.circuit import StoreCircuit
from hrt.stores.fallback import FallbackReads, RecordGraph, RecordVectors
from hrt.stores.guarded import GuardedGraphStore, GuardedVectorIndex

if TYPE_CHECKING:
    from hrt.metrics import Metrics


@dataclass
class Stores:
    """The configured stores as ports: records, graph, vectors, the writer of records, the outbox
    when projections are delivered by the projector (None: they commit with the records), what a
    server does for stores in its own process (:class:`~hrt.stores.backend.InProcess`), and the
    record backend's rewriter of vectors (``hrt reembed``)."""

    records: RecordStore
    graph: GraphStore
    vectors: VectorIndex
    writer: Writer
    outbox: Outbox | None
    deployment: str  # e.g. "embedded", "postgres+neo4j+weaviate"
    in_process: InProcess = NOT_IN_PROCESS
    rewriter: Callable[[Callable[[], Awaitable[None]]], VectorRewriter] | None = None

    @property
    def circuits(self) -> dict[str, StoreCircuit]:
        """The circuits of the stores behind servers, by port name (records, graph, vectors)."""
        out: dict[str, StoreCircuit] = {}
        circuit = getattr(self.records, "circuit", None)
        if isinstance(circuit, StoreCircuit):
            out["records"] = circuit
        if isinstance(self.graph, GuardedGraphStore):
            out["graph"] = self.graph.circuit
        if isinstance(self.vectors, GuardedVectorIndex):
            out["vectors"] = self.vectors.circuit
        return out

    @property
    def parts(self) -> tuple[StoreLifecycle, ...]:
        """The three stores, in the order they are opened and warmed."""
        return (self.records, self.graph, self.vectors)

    def vector_rewriter(self, drain: Callable[[], Awaitable[None]]) -> VectorRewriter:
        """The record store's vectors for ``hrt reembed``; ``drain`` waits until the projector
        delivered the new vectors (unused when they commit with the records)."""
        if self.rewriter is None:
            raise StoreError("this record store cannot rewrite its vectors")
        return self.rewriter(drain)

    def close(self) -> None:
        """Close what lives in this process (the other stores close through their lifecycle)."""
        self.in_process.close()


def chosen(settings: Settings) -> dict[Role, Backend]:
    """The backend each role gets, as the settings name them (a :class:`StoreError` for a name no
    backend of that role has)."""
    names: dict[Role, str] = {
        "records": settings.record_store,
        "graph": settings.graph_store,
        "vectors": settings.vector_index,
    }
    return {role: registry.backend(role, name) for role, name in names.items()}


def open_stores(settings: Settings, *, dim: int, model_id: str, metrics: Metrics | None = None) -> Stores:
    """The stores the settings configure, made but not connected (``StoreLifecycle.open`` connects).
    ``dim`` and ``model_id`` are the embedder's: a store written by another model is refused
    (:mod:`hrt.stores.vector_meta`); an empty ``model_id`` checks the dimension alone. Graph and
    vector backends that run as servers come behind their circuits (:mod:`hrt.stores.guarded`),
    with retrieval's reads falling back to the record store while one is down."""
    by_role = chosen(settings)
    record, graph_backend, vector_backend = by_role["records"], by_role["graph"], by_role["vectors"]
    opening = Opening(settings, dim, model_id, metrics)
    try:
        assert record.open_records is not None and graph_backend.open_graph and vector_backend.open_vectors
        side = record.open_records(opening)
        only = side.projects_only_into
        if only is not None and (graph_backend.name, vector_backend.name) != (only, only):
            raise StoreError(
                f"the {record.name} record store projects only into the {only} graph and vector stores; "
                f"set HRT_GRAPH_STORE and HRT_VECTOR_INDEX to {only}, or choose another HRT_RECORD_STORE"
            )
        graph = graph_backend.open_graph(opening)
        vectors = vector_backend.open_vectors(opening)
        if graph_backend.behind_server:
            graph = guard_graph(graph, side.fallback, opening, graph_backend.title)
        if vector_backend.behind_server:
            vectors = guard_vectors(vectors, side.fallback, opening, vector_backend.title)
        deployment = "+".join(dict.fromkeys(b.name for b in by_role.values()))
        return Stores(
            side.records, graph, vectors, side.writer, side.outbox, deployment, opening.in_process, side.rewriter
        )
    except BaseException:
        for close in reversed(opening.closers):
            close()
        raise


def _reconnecting(part: StoreLifecycle) -> Callable[[], Awaitable[None]]:
    async def probe() -> None:
        await part.open(keep_trying=True)
        await part.ping()

    return probe


def guard_graph(graph: GraphStore, fallback: FallbackReads | None, opening: Opening, title: str) -> GuardedGraphStore:
    """The graph store behind its circuit, its retrieval reads falling back to ``fallback``."""
    reads = RecordGraph(fallback) if fallback is not None and opening.settings.degrade_on_outage else None
    return GuardedGraphStore(graph, opening.circuit(title, _reconnecting(graph)), reads, opening.metrics)


def guard_vectors(
    vectors: VectorIndex, fallback: FallbackReads | None, opening: Opening, title: str
) -> GuardedVectorIndex:
    """The vector index behind its circuit, its retrieval reads falling back to ``fallback``."""
    reads = RecordVectors(fallback) if fallback is not None and opening.settings.degrade_on_outage else None
    return GuardedVectorIndex(vectors, opening.circuit(title, _reconnecting(vectors)), reads, opening.metrics)


@contextlib.asynccontextmanager
async def open_record_store(settings: Settings) -> AsyncIterator[RecordStore]:
    """The record store alone, opened (no embedder, graph or vectors): where the API keys live and
    what ``hrt export`` reads."""
    record = chosen(settings)["records"]
    assert record.key_store is not None
    async with record.key_store(settings) as store:
        yield store


def migrate_records(settings: Settings) -> dict[str, Any]:
    """Apply the pending schema steps of the chosen backends that keep a schema of their own (the
    embedded file's, which holds the embedded graph and vectors too, or PostgreSQL's migrations);
    what ``hrt migrate`` reports of them, by backend."""
    wanted = {b.name for b in chosen(settings).values()}
    return {b.name: b.migrate(settings) for b in registry.backends() if b.name in wanted and b.migrate is not None}


async def migrate_projections(settings: Settings) -> dict[str, str]:
    """Apply the schemas (constraints, indexes, collections) of the graph store and the vector
    index that run as servers; idempotent. The embedded ones live in the file (:func:`migrate_records`)."""
    by_role = chosen(settings)
    opening = Opening(settings, 0, "")
    parts: list[tuple[str, StoreLifecycle]] = []
    graph, vectors = by_role["graph"], by_role["vectors"]
    if graph.behind_server and graph.open_graph is not None:
        parts.append((graph.name, graph.open_graph(opening)))
    if vectors.behind_server and vectors.open_vectors is not None:
        parts.append((vectors.name, vectors.open_vectors(opening)))
    out: dict[str, str] = {}
    for name, part in parts:
        try:
            await part.open()
            await part.apply_schema()
        finally:
            await part.close()
        out[name] = "ok"
    return out
