"""Drift check and repair between the record store and its projections (``hrt doctor``).

The check compares, per user, what the record store says each projection should hold with what it
holds, record by record: every graph node and vector document is compared with the projection of
the record's current state (:mod:`hrt.stores.projection`: label, timestamps, salience, category, tags,
agent, the indexed text and the vector), every edge with its relation (type, weight, relation
type). It reports ids missing from a projection, orphans a projection holds that the record store
does not, stale entries (the id is there, its content is not the record's), the same for edges,
and the user's outbox events set aside as dead (failed for good, services deployment).

Repair rebuilds the projections of the affected users from the record store (PostgreSQL is the
source of truth): orphans are deleted and every entity and relation is re-projected (idempotent
upserts). With an outbox it holds both targets' delivery leases meanwhile, so no projector of any
replica writes between its read of the records and its writes; the user's dead events are cleared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hrt.stores.base import GraphEdge, GraphNode, GraphStore, RecordStore, VectorDoc, VectorIndex
from hrt.stores.projection import graph_edge, graph_node, passage_bytes, vector_doc

BATCH = 500
TARGETS = ("graph", "vector")


@dataclass
class UserDrift:
    user_id: str
    missing_in_graph: dict[str, list[str]] = field(default_factory=dict)  # kind -> ids
    missing_in_vectors: dict[str, list[str]] = field(default_factory=dict)
    orphans_in_graph: dict[str, list[str]] = field(default_factory=dict)
    orphans_in_vectors: dict[str, list[str]] = field(default_factory=dict)
    stale_in_graph: dict[str, list[str]] = field(default_factory=dict)  # the node differs from the record
    stale_in_vectors: dict[str, list[str]] = field(default_factory=dict)  # the document differs
    missing_edges: list[str] = field(default_factory=list)  # "source -[TYPE]-> target"
    orphan_edges: list[str] = field(default_factory=list)
    stale_edges: list[str] = field(default_factory=list)  # weight or relation type differ
    dead_events: list[dict[str, Any]] = field(default_factory=list)  # outbox events that failed for good

    @property
    def clean(self) -> bool:
        return not any(
            (
                self.missing_in_graph,
                self.missing_in_vectors,
                self.orphans_in_graph,
                self.orphans_in_vectors,
                self.stale_in_graph,
                self.stale_in_vectors,
                self.missing_edges,
                self.orphan_edges,
                self.stale_edges,
                self.dead_events,
            )
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "user_id": self.user_id,
            "missing_in_graph": self.missing_in_graph,
            "missing_in_vectors": self.missing_in_vectors,
            "orphans_in_graph": self.orphans_in_graph,
            "orphans_in_vectors": self.orphans_in_vectors,
            "stale_in_graph": self.stale_in_graph,
            "stale_in_vectors": self.stale_in_vectors,
            "missing_edges": self.missing_edges,
            "orphan_edges": self.orphan_edges,
            "stale_edges": self.stale_edges,
            "dead_events": self.dead_events,
        }


def _by_kind(kinds: dict[str, str], only: set[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for ident in sorted(only):
        out.setdefault(kinds[ident], []).append(ident)
    return out


def edge_name(key: tuple[str, str, str]) -> str:
    return f"{key[0]} -[{key[2]}]-> {key[1]}"


def same_doc(a: VectorDoc, b: VectorDoc) -> bool:
    """What an index holds of a document equals what the record projects: the text, the filter
    fields, the vector and the passages' vectors bit for bit (float32)."""
    return (
        (a.kind, a.text, a.ts, tuple(sorted(a.tags)), a.source_agent_id or None)
        == (b.kind, b.text, b.ts, tuple(sorted(b.tags)), b.source_agent_id or None)
        and np.asarray(a.vector, dtype=np.float32).tobytes() == np.asarray(b.vector, dtype=np.float32).tobytes()
        and passage_bytes(a.passages) == passage_bytes(b.passages)
    )


def same_node(a: GraphNode, b: GraphNode) -> bool:
    return a == b


async def expected(
    records: RecordStore, user_id: str
) -> tuple[dict[str, str], dict[str, GraphNode], dict[str, VectorDoc]]:
    """What the projections should hold of one user's entities: id -> kind, node, document."""
    kinds = await records.ids(user_id)
    nodes: dict[str, GraphNode] = {}
    docs: dict[str, VectorDoc] = {}
    ids = sorted(kinds)
    for i in range(0, len(ids), BATCH):
        rows = await records.entity_rows(user_id, ids[i : i + BATCH])
        for ident, (entity, vector, _version, passages) in rows.items():
            kinds[ident] = entity.kind
            nodes[ident] = graph_node(entity)
            docs[ident] = vector_doc(entity, vector, passages)
    return kinds, nodes, docs


async def check_ids(
    records: RecordStore, graph: GraphStore | None, vectors: VectorIndex | None, user_id: str
) -> UserDrift:
    """Ids only: the embedded store writes records and projections in one SQLite transaction. A
    projection given as None (down) is not compared."""
    truth = await records.ids(user_id)
    in_graph = await graph.ids(user_id) if graph is not None else truth
    in_vectors = await vectors.ids(user_id) if vectors is not None else truth
    return UserDrift(
        user_id=user_id,
        missing_in_graph=_by_kind(truth, set(truth) - set(in_graph)),
        missing_in_vectors=_by_kind(truth, set(truth) - set(in_vectors)),
        orphans_in_graph=_by_kind(in_graph, set(in_graph) - set(truth)),
        orphans_in_vectors=_by_kind(in_vectors, set(in_vectors) - set(truth)),
    )


async def check_user(
    records: RecordStore, graph: GraphStore | None, vectors: VectorIndex | None, user_id: str
) -> UserDrift:
    """Record by record where the projections are fed through an outbox; ids only where the
    record store writes them in its own transaction (:func:`check_ids`). A projection given as
    None (down: ``hrt doctor`` in a partial outage) is not compared: it is reported as such."""
    outbox = records.outbox
    if outbox is None:
        return await check_ids(records, graph, vectors, user_id)
    kinds, want_nodes, want_docs = await expected(records, user_id)
    have_nodes = await graph.nodes(user_id) if graph is not None else want_nodes
    have_docs = await vectors.docs(user_id) if vectors is not None else want_docs
    node_kinds = {i: n.kind.value for i, n in have_nodes.items()}
    doc_kinds = {i: d.kind.value for i, d in have_docs.items()}
    want_edges = {(r.source, r.target, r.type.value): graph_edge(r) for r in await records.all_relations(user_id)}
    have_edges = (
        {(e.source, e.target, e.type.value): e for e in await graph.edges(user_id)} if graph is not None else want_edges
    )

    def stale_edge(a: GraphEdge, b: GraphEdge) -> bool:
        return (a.weight, a.relation_type) != (b.weight, b.relation_type)

    dead = await outbox.dead_letters([user_id])
    return UserDrift(
        user_id=user_id,
        missing_in_graph=_by_kind(kinds, set(want_nodes) - set(have_nodes)),
        missing_in_vectors=_by_kind(kinds, set(want_docs) - set(have_docs)),
        orphans_in_graph=_by_kind(node_kinds, set(have_nodes) - set(want_nodes)),
        orphans_in_vectors=_by_kind(doc_kinds, set(have_docs) - set(want_docs)),
        stale_in_graph=_by_kind(
            kinds, {i for i in set(want_nodes) & set(have_nodes) if not same_node(want_nodes[i], have_nodes[i])}
        ),
        stale_in_vectors=_by_kind(
            kinds, {i for i in set(want_docs) & set(have_docs) if not same_doc(want_docs[i], have_docs[i])}
        ),
        missing_edges=[edge_name(k) for k in sorted(set(want_edges) - set(have_edges))],
        orphan_edges=[edge_name(k) for k in sorted(set(have_edges) - set(want_edges))],
        stale_edges=[
            edge_name(k) for k in sorted(set(want_edges) & set(have_edges)) if stale_edge(want_edges[k], have_edges[k])
        ],
        dead_events=[{k: v for k, v in d.items() if k != "user_id"} for d in dead],
    )


async def users_to_check(records: RecordStore, users: Sequence[str] | None) -> list[str]:
    """``users``, or every user the record store holds or has dead outbox events of."""
    if users:
        return list(users)
    found = set(await records.users())
    if records.outbox is not None:
        found |= {d["user_id"] for d in await records.outbox.dead_letters()}
    return sorted(found)


async def check(
    records: RecordStore, graph: GraphStore | None, vectors: VectorIndex | None, users: Sequence[str] | None = None
) -> list[UserDrift]:
    return [await check_user(records, graph, vectors, u) for u in await users_to_check(records, users)]


async def repair_user(records: RecordStore, graph: GraphStore, vectors: VectorIndex, drift: UserDrift) -> None:
    """Rebuild one user's projections from the record store."""
    user_id = drift.user_id
    outbox = records.outbox
    async with contextlib.AsyncExitStack() as leases:
        head: int | None = None
        if outbox is not None:
            # both targets' leases, one after the other (a projector holds at most one at a time):
            # no delivery interleaves with the rebuild; events written meanwhile follow it
            for target in TARGETS:
                await leases.enter_async_context(outbox.outbox_lease(target, wait=True))
            # no projector sets an event aside while the leases are held: the user's dead events now
            # are all older than the records the rebuild reads
            head = max((d["seq"] for d in await outbox.dead_letters([user_id])), default=None)
        kinds, want_nodes, want_docs = await expected(records, user_id)
        have_nodes = await graph.ids(user_id)
        have_docs = await vectors.ids(user_id)
        orphans_g = sorted(set(have_nodes) - set(want_nodes))
        orphans_v = sorted(set(have_docs) - set(want_docs))
        if orphans_g:
            await graph.delete_nodes(user_id, orphans_g)
        if orphans_v:
            await vectors.delete(user_id, orphans_v)
        ids = sorted(kinds)
        for i in range(0, len(ids), BATCH):
            chunk = [j for j in ids[i : i + BATCH] if j in want_nodes]
            await graph.upsert_nodes(user_id, [want_nodes[j] for j in chunk])
            await vectors.upsert(user_id, [want_docs[j] for j in chunk])
        relations = await records.all_relations(user_id)
        want_edges = {(r.source, r.target, r.type.value) for r in relations}
        orphan_edges = [e for e in await graph.edges(user_id) if (e.source, e.target, e.type.value) not in want_edges]
        if orphan_edges:
            await graph.delete_edges(user_id, orphan_edges)
        for i in range(0, len(relations), BATCH):
            await graph.upsert_edges(user_id, [graph_edge(r) for r in relations[i : i + BATCH]])
        if outbox is not None and head is not None:
            await outbox.clear_dead_letters(user_id, head)
