"""The composition root of the stores: the one module that knows which backend is which.

``HRT_RECORD_STORE``, ``HRT_GRAPH_STORE`` and ``HRT_VECTOR_INDEX`` choose the backends; everything
else (the service, the CLI, ``hrt doctor``, the bench, the dev stack's users) asks this module for
the ports of :mod:`hrt.stores.base` and never imports an adapter. With the embedded record store, a
write commits records and projections in one SQLite transaction; with PostgreSQL, it commits records
plus outbox rows that the projector (:mod:`hrt.projector`) delivers to the graph store and the
vector index.

Adding a backend: a package under ``hrt/stores/`` implementing the ports, a value in the settings'
``Literal``, and one branch here (docs/development.md, "Adding a backend").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hrt.config import Settings
from hrt.errors import StoreError
from hrt.stores.ann import AnnConfig
from hrt.stores.base import (
    GraphStore,
    Outbox,
    RecordStore,
    StoreLifecycle,
    VectorIndex,
    VectorRewriter,
    WriteBatch,
    Writer,
    WriteResult,
)
from hrt.stores.circuit import StoreCircuit
from hrt.stores.embedded.store import EmbeddedStore
from hrt.stores.fallback import RecordGraph, RecordVectors
from hrt.stores.guarded import GuardedGraphStore, GuardedVectorIndex

if TYPE_CHECKING:
    from hrt.metrics import Metrics
    from hrt.stores.postgres.records import PostgresRecordStore

# what a backend is called in a deployment's name and in `hrt migrate`'s report
EMBEDDED = "embedded"


class EmbeddedWriter:
    """The embedded store writes records and projections in one SQLite transaction, in a worker
    thread: a large batch's transaction (and its cache updates) can take seconds, and reads (on
    their own connections) go on meanwhile."""

    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store

    async def apply(self, batch: WriteBatch) -> WriteResult:
        return await asyncio.to_thread(self._store.apply, batch)

    async def delete_user(self, user_id: str) -> int:
        return await asyncio.to_thread(self._store.delete_user, user_id)


@dataclass
class Stores:
    """The configured stores as ports: records, graph, vectors, the writer of records, and the
    outbox when projections are delivered by the projector (None: they commit with the records)."""

    records: RecordStore
    graph: GraphStore
    vectors: VectorIndex
    writer: Writer
    outbox: Outbox | None
    deployment: str  # e.g. "embedded", "postgres+neo4j+weaviate"
    file: EmbeddedStore | None = None  # the embedded SQLite file, when a store lives in it

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

    @property
    def caches_in_process(self) -> bool:
        """Whether a store keeps per-user caches in this process (the embedded ones), which a
        server preloads (:meth:`preload`)."""
        return self.file is not None

    @property
    def reads_from_any_thread(self) -> bool:
        """Whether the record store may be read from a worker thread's own event loop (SQLite
        connections per thread); a pool of PostgreSQL connections belongs to one loop."""
        return self.file is not None and self.records is self.file.records

    def claim(self, purpose: str) -> None:
        """Hold the embedded file for this process (a second writer is refused, naming it); stores
        behind servers need no claim."""
        if self.file is not None:
            self.file.claim(purpose)

    def largest_users(self, limit: int) -> list[str]:
        """The users with the most entities, most first: those whose in-process caches a server
        preloads (none for stores behind servers)."""
        return self.file.largest_users(limit) if self.file is not None else []

    def preload(self, user_ids: Sequence[str]) -> None:
        """Load the users' in-process caches now (graph, vectors, lexical index, HNSW graph, built
        or brought up to date and saved) instead of on a first request."""
        if self.file is None:
            return
        for user_id in user_ids:
            if self.graph is self.file.graph:
                self.file.graph.preload(user_id)
            if self.vectors is self.file.vectors:
                self.file.vectors.preload(user_id)

    def vector_rewriter(self, drain: Callable[[], Awaitable[None]]) -> VectorRewriter:
        """The record store's vectors for ``hrt reembed``; ``drain`` waits until the projector
        delivered the new vectors (unused when they commit with the records). The embedded file is
        claimed, so a server cannot hold it meanwhile."""
        if self.file is not None and self.records is self.file.records:
            from hrt.stores.embedded.reembed import EmbeddedVectorRewriter

            self.file.claim("hrt reembed")
            return EmbeddedVectorRewriter(self.file)
        from hrt.stores.postgres.records import PostgresRecordStore
        from hrt.stores.postgres.reembed import PostgresVectorRewriter

        assert isinstance(self.records, PostgresRecordStore)
        return PostgresVectorRewriter(self.records, drain)

    def close(self) -> None:
        """Close the embedded file (the other stores close through their lifecycle)."""
        if self.file is not None:
            self.file.close()


def open_stores(settings: Settings, *, dim: int, model_id: str, metrics: Metrics | None = None) -> Stores:
    """The stores the settings configure, made but not connected (``StoreLifecycle.open`` connects).
    ``dim`` and ``model_id`` are the embedder's: a store written by another model is refused
    (:mod:`hrt.stores.vector_meta`); an empty ``model_id`` checks the dimension alone. Neo4j and
    Weaviate come behind their circuits (:mod:`hrt.stores.guarded`), with retrieval's reads
    falling back to PostgreSQL while one is down."""
    embedded = EMBEDDED in (settings.record_store, settings.graph_store, settings.vector_index)
    if settings.record_store == EMBEDDED and (settings.graph_store, settings.vector_index) != (EMBEDDED, EMBEDDED):
        raise StoreError(
            "the embedded record store projects only into the embedded graph and vector stores; "
            "use HRT_RECORD_STORE=postgres with Neo4j or Weaviate"
        )
    file = _embedded_file(settings, dim, model_id) if embedded else None
    try:
        deployment = "+".join(dict.fromkeys([settings.record_store, settings.graph_store, settings.vector_index]))
        if file is not None and settings.record_store == EMBEDDED:
            return Stores(file.records, file.graph, file.vectors, EmbeddedWriter(file), None, deployment, file)
        postgres = _postgres(settings, max_size=settings.postgres_pool_size, embedder=(dim, model_id))
        postgres.attach(_circuit("PostgreSQL", postgres.probe, settings, metrics))
        quiet_pool_reconnects()
        graph: GraphStore = file.graph if file is not None and settings.graph_store == EMBEDDED else _neo4j(settings)
        vectors: VectorIndex = (
            file.vectors if file is not None and settings.vector_index == EMBEDDED else _weaviate(settings)
        )
        if settings.graph_store != EMBEDDED:
            graph = guard_graph(graph, postgres, settings, metrics)
        if settings.vector_index != EMBEDDED:
            vectors = guard_vectors(vectors, postgres, settings, metrics)
        return Stores(postgres, graph, vectors, postgres, postgres, deployment, file)
    except BaseException:
        if file is not None:
            file.close()
        raise


def _reconnecting(part: StoreLifecycle) -> Callable[[], Awaitable[None]]:
    async def probe() -> None:
        await part.open(keep_trying=True)
        await part.ping()

    return probe


def _circuit(
    name: str, probe: Callable[[], Awaitable[None]], settings: Settings, metrics: Metrics | None
) -> StoreCircuit:
    """A store's circuit; ``probe`` raises unless the store answers (never waiting on a pool)."""
    return StoreCircuit(
        name,
        probe,
        probe_every_s=settings.store_probe_interval_s,
        probe_timeout_s=settings.store_probe_timeout_s,
        suspect_after_s=settings.store_suspect_after_s,
        metrics=metrics,
    )


def guard_graph(
    graph: GraphStore, records: PostgresRecordStore, settings: Settings, metrics: Metrics | None
) -> GuardedGraphStore:
    """The graph store behind its circuit, its retrieval reads falling back to ``records``."""
    fallback = RecordGraph(records) if settings.degrade_on_outage else None
    return GuardedGraphStore(graph, _circuit("Neo4j", _reconnecting(graph), settings, metrics), fallback, metrics)


def guard_vectors(
    vectors: VectorIndex, records: PostgresRecordStore, settings: Settings, metrics: Metrics | None
) -> GuardedVectorIndex:
    """The vector index behind its circuit, its retrieval reads falling back to ``records``."""
    fallback = RecordVectors(records) if settings.degrade_on_outage else None
    return GuardedVectorIndex(
        vectors, _circuit("Weaviate", _reconnecting(vectors), settings, metrics), fallback, metrics
    )


@contextlib.asynccontextmanager
async def open_record_store(settings: Settings) -> AsyncIterator[RecordStore]:
    """The record store alone, opened (no embedder, graph or vectors): where the API keys live and
    what ``hrt export`` reads."""
    if settings.record_store == EMBEDDED:
        store = EmbeddedStore(settings.db_path, dim=None)
        try:
            yield store.records
        finally:
            store.close()
        return
    postgres = _postgres(settings, max_size=1)
    await postgres.open()
    try:
        yield postgres
    finally:
        await postgres.close()


def migrate_records(settings: Settings) -> dict[str, Any]:
    """Apply the record store's pending schema steps (the embedded file's, which holds the embedded
    graph and vectors too, or PostgreSQL's migrations); what ``hrt migrate`` reports of them."""
    report: dict[str, Any] = {}
    if EMBEDDED in (settings.record_store, settings.graph_store, settings.vector_index):
        store = EmbeddedStore(settings.db_path, dim=None)
        try:
            versions = store.schema_versions()
        finally:
            store.close()
        report[EMBEDDED] = {
            "db_path": str(settings.db_path),
            "applied_now": store.applied_on_open,
            "schema_versions": versions,
        }
    if settings.record_store == "postgres":
        from hrt.stores.postgres.migrate import applied_versions, migrate

        dsn = _postgres_dsn(settings)
        applied = migrate(dsn)
        report["postgres"] = {"applied_now": applied, "schema_versions": applied_versions(dsn)}
    return report


async def migrate_projections(settings: Settings) -> dict[str, str]:
    """Apply the schemas (constraints, indexes, collections) of the graph store and the vector
    index that run as servers; idempotent. The embedded ones live in the file (:func:`migrate_records`)."""
    parts: list[tuple[str, StoreLifecycle]] = []
    if settings.graph_store != EMBEDDED:
        parts.append((settings.graph_store, _neo4j(settings)))
    if settings.vector_index != EMBEDDED:
        parts.append((settings.vector_index, _weaviate(settings)))
    out: dict[str, str] = {}
    for name, part in parts:
        try:
            await part.open()
            await part.apply_schema()
        finally:
            await part.close()
        out[name] = "ok"
    return out


def _embedded_file(settings: Settings, dim: int, model_id: str) -> EmbeddedStore:
    ann = AnnConfig(
        min_vectors=settings.ann_min_vectors,
        m=settings.ann_m,
        ef_construction=settings.ann_ef_construction,
        ef_search=settings.ann_ef_search,
    )
    return EmbeddedStore(settings.db_path, dim, ann=ann, model_id=model_id)


def _postgres_dsn(settings: Settings) -> str:
    if not settings.postgres_dsn:
        raise StoreError("HRT_RECORD_STORE=postgres needs HRT_POSTGRES_DSN")
    return settings.postgres_dsn


def quiet_pool_reconnects() -> None:
    from hrt.stores.postgres.records import quiet_pool_reconnects as quiet

    quiet()


def _postgres(settings: Settings, *, max_size: int, embedder: tuple[int, str] | None = None) -> PostgresRecordStore:
    from hrt.stores.postgres.records import PostgresRecordStore

    return PostgresRecordStore(_postgres_dsn(settings), max_size=max_size, embedder=embedder)


def _neo4j(settings: Settings) -> GraphStore:
    from hrt.stores.neo4j.graph import Neo4jGraphStore

    if not settings.neo4j_uri:
        raise StoreError("HRT_GRAPH_STORE=neo4j needs HRT_NEO4J_URI")
    s = settings
    auth = (s.neo4j_user, s.neo4j_password.get_secret_value()) if s.neo4j_password is not None else None
    return Neo4jGraphStore(s.neo4j_uri, database=s.neo4j_database, auth=auth, expansion=s.neo4j_expansion)


def _weaviate(settings: Settings) -> VectorIndex:
    from hrt.stores.weaviate.vectors import WeaviateVectorIndex

    s = settings
    return WeaviateVectorIndex(
        host=s.weaviate_host,
        http_port=s.weaviate_http_port,
        grpc_port=s.weaviate_grpc_port,
        collection=s.weaviate_collection,
        api_key=s.weaviate_api_key.get_secret_value() if s.weaviate_api_key is not None else None,
        replication_factor=s.weaviate_replication_factor,
    )
