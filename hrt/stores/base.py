"""The three store ports, and the values that cross them.

Every method takes ``user_id`` and every adapter enforces it inside its own queries: no caller can
reach another user's data through a port. Methods are async so that network adapters (PostgreSQL,
Neo4j, Weaviate) and the in-process embedded adapters share one signature.

Each port declares its adapters' whole surface: the lifecycle (:class:`StoreLifecycle`: open,
close, ping, apply_schema, warm), the hot path, and the maintenance reads ``hrt doctor`` compares
(ids, nodes, edges, docs, entity rows, relations). An adapter with nothing to do for an operation
implements it as a no-op; nobody probes an adapter for a method. The outbox, which only a record
store that projects asynchronously has (PostgreSQL), is a port of its own (:class:`Outbox`),
reached through :attr:`RecordStore.outbox` (None for the embedded store, which writes records and
projections in one transaction).

Timestamps cross the ports as epoch seconds (float, UTC) so adapters need no datetime handling.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

from hrt.auth import KeyStore
from hrt.metadata_filter import Tree as MetadataTree
from hrt.records import EdgeType, Entity, Kind, Preference, Relation
from hrt.stores.values import (
    WARM_UP_USER,
    BrowseFilter,
    EntityDetail,
    EntityLink,
    EntityRow,
    ExpansionCaps,
    GraphCandidate,
    GraphEdge,
    GraphNode,
    PathStep,
    PhraseVectors,
    SearchFilter,
    StoredEntity,
    Vector,
    VectorDoc,
    VectorHit,
    WriteBatch,
    WriteResult,
    make_candidate,
    positional_maker,
    resolve_vectors,
    valid_at,
)

# the ports, and the values crossing them (hrt.stores.values), importable from here
__all__ = [
    "WARM_UP_USER",
    "BrowseFilter",
    "EntityDetail",
    "EntityLink",
    "EntityRow",
    "ExpansionCaps",
    "ExportReader",
    "GraphCandidate",
    "GraphEdge",
    "GraphNode",
    "GraphStore",
    "Outbox",
    "OutboxEvent",
    "OutboxLease",
    "PathStep",
    "PhraseVectors",
    "RecordStore",
    "SearchFilter",
    "StateStore",
    "StoreLifecycle",
    "StoredEntity",
    "Vector",
    "VectorDoc",
    "VectorHit",
    "VectorIndex",
    "VectorRewriter",
    "WriteBatch",
    "WriteResult",
    "Writer",
    "make_candidate",
    "positional_maker",
    "resolve_vectors",
    "valid_at",
]


@runtime_checkable
class StoreLifecycle(Protocol):
    """Setup, health and shutdown, shared by the three ports. ``hrt serve`` (and every command
    opening a service) calls ``open`` then ``apply_schema`` on each store, ``warm`` before
    ``/readyz`` says ready (``HRT_PRELOAD_USERS`` > 0), ``ping`` on every ``/readyz``, and
    ``close`` once at the end."""

    async def open(self, *, keep_trying: bool = False) -> None:
        """Connect (pools, clients); StoreUnavailable when the store does not answer. No-op for
        a store opened by its constructor (the embedded adapters, over one SQLite file).

        ``keep_trying`` (a server starting while the store is down): a store that can connect in
        the background (a pool) goes on connecting after that error; the caller closes it either
        way and calls ``open`` again until it succeeds, which is then cheap."""
        ...

    async def close(self) -> None:
        """Release what ``open`` took. No-op for an adapter that does not own its connection."""
        ...

    async def ping(self) -> None:
        """Raise StoreUnavailable (or StoreError) unless the store answers a read now."""
        ...

    async def apply_schema(self) -> None:
        """Make the store's schema what this version reads: idempotent and cheap when it already
        is, so every start may call it. No-op where the schema comes otherwise (the embedded file
        migrates on open, PostgreSQL through ``hrt migrate``)."""
        ...

    async def warm(self) -> None:
        """Prepare retrieval's reads before the first request (Neo4j plans its queries), touching
        no data; no-op where there is nothing to prepare."""
        ...


@runtime_checkable
class VectorIndex(StoreLifecycle, Protocol):
    async def upsert(self, user_id: str, docs: Sequence[VectorDoc]) -> None: ...

    async def delete(self, user_id: str, ids: Sequence[str]) -> None: ...

    async def delete_user(self, user_id: str) -> None:
        """Remove every document of one user."""
        ...

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
        """Per phrase, the union of the top ``k`` vector hits and top ``k`` lexical hits, each with
        its cosine similarity and both ranks, in one call for all phrases, among the documents
        ``where`` lets through (all when None). ``vectors`` may be an awaitable still computing
        them: the lexical leg needs none and may run meanwhile."""
        ...

    async def similarities(self, user_id: str, ids: Sequence[str], vectors: Vector) -> dict[str, float]:
        """Each of the user's ``ids`` with its best cosine similarity to the phrase ``vectors``
        (one row per phrase), in one call; ids the user has no vector for are left out."""
        ...

    async def passage_similarities(
        self, user_id: str, ids: Sequence[str], vectors: Vector
    ) -> dict[str, tuple[float, float]]:
        """Each of the user's ``ids`` with two cosines to the phrase ``vectors``, in one call: its
        own vector's best (as :meth:`similarities`) and its passages' best, which is the own one
        for a document without passages; ids the user has no vector for are left out."""
        ...

    # --- maintenance (``hrt doctor``) ---------------------------------------------------------

    async def ids(self, user_id: str) -> dict[str, str]:
        """Every document of one user, id -> kind."""
        ...

    async def docs(self, user_id: str) -> dict[str, VectorDoc]:
        """Every document of one user as indexed (text, filter fields, vector)."""
        ...


@runtime_checkable
class GraphStore(StoreLifecycle, Protocol):
    @property
    def expansion_path(self) -> str:
        """Where :meth:`expand` reads from, as ``/readyz`` reports it: ``in_process`` (the
        embedded walk), or Neo4j's ``procedure``, ``cypher`` (``unknown`` before it was asked)."""
        ...

    async def upsert_nodes(self, user_id: str, nodes: Sequence[GraphNode]) -> None: ...

    async def delete_nodes(self, user_id: str, ids: Sequence[str]) -> None: ...

    async def upsert_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None: ...

    async def delete_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None: ...

    async def delete_user(self, user_id: str) -> None:
        """Remove every node and edge of one user."""
        ...

    async def expand(
        self,
        user_id: str,
        seeds: Mapping[str, float],
        caps: ExpansionCaps,
        not_after: float | None = None,
        valid_at: float | None = None,
    ) -> list[GraphCandidate]:
        """All nodes within ``caps.depth`` hops of the seeds (seeds included), one call for all
        seeds, each with its best path. Nodes with ``ts > not_after`` are neither returned nor
        traversed. Neighbours are visited by edge weight, then id, at most ``fanout_per_node``
        per node and ``max_per_kind`` per kind in all. ``SUPERSEDES`` edges are never walked;
        with ``valid_at``, neither is an edge whose interval does not hold at it (nor does it use
        up the fan-out). Nodes are walked and returned whatever their own interval: the pipeline
        sets aside those not valid (a superseded memory unit still mentions its concepts)."""
        ...

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
        """For each id, its neighbours along ``edge`` (newest first, then id), at most ``limit``.
        With ``valid_at``, a neighbour whose own interval or whose edge's does not hold at it is
        left out (before the limit)."""
        ...

    # --- maintenance (``hrt doctor``) ---------------------------------------------------------

    async def ids(self, user_id: str) -> dict[str, str]:
        """Every node of one user, id -> kind."""
        ...

    async def nodes(self, user_id: str) -> dict[str, GraphNode]:
        """Every node of one user as projected."""
        ...

    async def edges(self, user_id: str) -> list[GraphEdge]:
        """Every edge of one user as projected, in (source, target, type) order."""
        ...


# An outbox event as the projector reads it: seq, user_id, op, key, version (and attempts, from a
# lease); a dead one also names its target, attempts and last error.
OutboxEvent = dict[str, Any]


class OutboxLease(Protocol):
    """One projection target's outbox, read and marked while holding the target's delivery lease
    (:meth:`Outbox.outbox_lease`); the records delivered are read through it too."""

    async def pending(self, limit: int, upto: int | None = None) -> list[OutboxEvent]:
        """The target's next events in outbox order (none after ``upto`` when given)."""
        ...

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]: ...

    async def relation_rows(
        self, user_id: str, keys: Sequence[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Relation]: ...

    async def mark_done(self, seqs: Sequence[int]) -> None: ...

    async def failed(self, seq: int, error: str, *, count: bool) -> int:
        """Note a failed delivery; returns the target's counted attempts of the event so far."""
        ...

    async def dead_letter(self, seq: int, error: str) -> None:
        """Set the event aside as dead for this target, and mark it done."""
        ...


@runtime_checkable
class Outbox(Protocol):
    """The changes a record store commits for its projections to receive (PostgreSQL's
    ``hrt_outbox``): what the projector (:mod:`hrt.projector`) and ``hrt doctor`` need of it."""

    def outbox_lease(self, target: str, *, wait: bool = False) -> AbstractAsyncContextManager[OutboxLease | None]:
        """A transaction holding ``target``'s delivery lease, or None when another holds it
        (``wait``: wait for it instead)."""
        ...

    async def outbox_head(self) -> int | None:
        """The newest event's seq; None with an empty outbox."""
        ...

    async def outbox_passed(self, upto: int) -> dict[str, bool]:
        """Per target: does it have every event up to ``upto``?"""
        ...

    async def outbox_stats(self) -> dict[str, dict[str, float]]:
        """Per target: ``lag``, ``oldest_s`` and ``dead`` events."""
        ...

    async def dead_letters(self, users: Sequence[str] | None = None) -> list[OutboxEvent]:
        """Events set aside as dead, oldest first (of ``users`` when given)."""
        ...

    async def clear_dead_letters(self, user_id: str, upto: int) -> int:
        """Forget a user's dead events up to ``upto``; returns how many."""
        ...


class VectorRewriter(Protocol):
    """What ``hrt reembed`` (:mod:`hrt.reembed`) needs of a record store: its vectors' model
    (:mod:`hrt.stores.vector_meta`) and every entity, to write each one's vectors again."""

    async def vector_meta(self) -> dict[str, str]:
        """The store's vector keys (model, dimension, an unfinished re-embedding's target and cursor)."""
        ...

    async def set_vector_meta(self, values: Mapping[str, str | None]) -> None:
        """Set vector keys (None removes one)."""
        ...

    async def count_entities(self, after: tuple[str, str] | None = None) -> int:
        """How many entities the store holds (after ``(user_id, id)`` in key order, when given)."""
        ...

    async def entity_page(self, after: tuple[str, str] | None, limit: int) -> list[Entity]:
        """At most ``limit`` entities after ``(user_id, id)`` (from the first when None), in
        (user_id, id) order, byte-wise."""
        ...

    async def rewrite_vectors(
        self,
        vectors: Mapping[tuple[str, str], Vector],
        passages: Mapping[tuple[str, str], Vector],
        meta: Mapping[str, str | None],
    ) -> None:
        """Replace these entities' vectors and passage vectors (none in ``passages``: none) and set
        ``meta`` in one transaction; the vector index gets them (at once, or through the outbox)."""
        ...

    async def finish(self) -> None:
        """After the last page: what the store does once every vector is rewritten."""
        ...


class ExportReader(Protocol):
    """One user's records as of one moment, read in chunks for an export (:mod:`hrt.export`):
    every read sees the same committed state, and ids compare byte-wise (SQLite's ``BINARY``,
    PostgreSQL's ``COLLATE "C"``), so both deployments give the same order."""

    def entities(self, kind: Kind, chunk: int) -> AsyncIterator[list[Entity]]:
        """The user's entities of one kind in id order, ``chunk`` at a time."""
        ...

    def relations(self, chunk: int, type: EdgeType | None = None) -> AsyncIterator[list[Relation]]:
        """The user's relations (of one type when given) in (source, target, type) order."""
        ...

    async def get_many(self, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]: ...

    async def preferences(self) -> list[Preference]:
        """The user's preferences in (target_kind, target) order."""
        ...


@runtime_checkable
class Writer(Protocol):
    """Where writes go: the embedded store commits records and projections in one transaction; the
    PostgreSQL record store commits records and outbox rows for the projector."""

    async def apply(self, batch: WriteBatch) -> WriteResult:
        """Commit one batch (upserts, deletions, extraction state) in one transaction; StateChanged
        when ``batch.state_expect`` no longer holds (another writer of the user came first)."""
        ...

    async def delete_user(self, user_id: str) -> int:
        """Delete every record of one user; returns how many entities went."""
        ...


class StateStore(Protocol):
    """A user's conversation state: the extraction's statistics and what the rules remember between
    calls (:attr:`WriteBatch.state`), written with the records, read by namespace."""

    async def state_get(self, user_id: str, ns: str, keys: Sequence[str]) -> dict[str, str]:
        """Rows of a user's extraction statistics (:attr:`WriteBatch.state`) by key, as committed."""
        ...

    async def state_scan(self, user_id: str, ns: str, prefix: str) -> dict[str, str]:
        """Every row of a namespace whose key starts with ``prefix``."""
        ...

    async def state_read(
        self, user_id: str, keys: Mapping[str, Sequence[str]], prefixes: Mapping[str, Sequence[str]]
    ) -> dict[str, dict[str, str]]:
        """Several namespaces' rows in one read, by namespace: each of ``keys[ns]`` that is
        stored, and every row whose key starts with one of ``prefixes[ns]``."""
        ...


@runtime_checkable
class RecordStore(StoreLifecycle, KeyStore, StateStore, Protocol):
    """Records, with the deployment's API keys (:class:`hrt.auth.KeyStore`) and the users'
    conversation state (:class:`StateStore`), each a port of its own that the record store serves;
    the outbox, when it has one, is reached through :attr:`outbox`."""

    @property
    def outbox(self) -> Outbox | None:
        """The outbox the projections are fed from; None when the store writes its projections in
        the same transaction as the records (the embedded store)."""
        ...

    async def get_many(self, user_id: str, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]: ...

    async def preferences(self, user_id: str) -> list[Preference]: ...

    async def user_exists(self, user_id: str) -> bool: ...

    async def counts(self, user_id: str) -> dict[str, int]: ...

    async def entity_detail(self, user_id: str, kind: Kind, ident: str, relation_limit: int) -> EntityDetail | None:
        """One entity of the user, of that kind, with its relations (at most ``relation_limit``),
        its supersession links and, for a concept, how many memory units mention it; None when the
        user has no such entity (another user's id reads exactly as an absent one)."""
        ...

    async def browse(self, user_id: str, where: BrowseFilter) -> list[StoredEntity]:
        """The user's entities that ``where`` lets through, in id order, at most ``where.limit``,
        in one read."""
        ...

    async def metadata_matches(self, user_id: str, ids: Sequence[str], where: MetadataTree) -> set[str]:
        """Those of ``ids`` that are the user's memory units whose metadata ``where`` matches
        (:mod:`hrt.metadata_filter`), decided inside the store's query, in one read."""
        ...

    # --- maintenance (``hrt doctor``) ---------------------------------------------------------

    async def users(self) -> list[str]:
        """Every user holding an entity, by id."""
        ...

    async def ids(self, user_id: str) -> dict[str, str]:
        """Every entity of one user, id -> kind."""
        ...

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]:
        """The current entity, its vector and its version, for each of ``ids`` the user has."""
        ...

    async def all_relations(self, user_id: str) -> list[Relation]:
        """Every relation of one user, in (source, target, type) order."""
        ...

    async def relations_of(self, user_id: str, ids: Sequence[str]) -> list[Relation]:
        """Every relation of one user with ``ids`` at either end, in (source, target, type)
        order, in one read (what merging concepts moves, :mod:`hrt.merge`)."""

    # --- export (``GET /v1/users/{user_id}/export``, ``hrt export``) ------------------------------

    def export_reader(self, user_id: str) -> AbstractAsyncContextManager[ExportReader]:
        """A consistent view of one user's records for an export, on a connection of its own (a
        long export holds neither a pooled connection nor the loop's reader)."""
        ...
