"""``hrt doctor``'s comparison and repair over in-memory stand-ins of the record store and the two
projections (the real stores: tests/integration/test_replicas.py). What the doctor compares is the
projection of each record (:mod:`hrt.stores.projection`) with what a projection holds for its id."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from hrt.doctor import check_user, repair_user, same_doc
from hrt.ingest import build_batch, parse_jsonl
from hrt.records import EdgeType, Kind, Relation
from hrt.stores.base import EntityRow, GraphEdge, GraphNode, VectorDoc
from hrt.stores.projection import graph_edge, graph_node, vector_doc
from tests.helpers import HashingEmbedder, concept, jsonl, mu, rel

USER = "u1"


class Records:
    def __init__(self) -> None:
        batch = build_batch(
            parse_jsonl(
                jsonl(
                    [
                        concept(USER, "c1", "Alpha"),
                        mu(USER, "m1", "a memory", tags=["b", "a"]),
                        mu(USER, "m2", "another memory"),
                        mu(USER, "m3", "A memory of two sentences. The second one says more."),
                        rel(USER, "MENTIONS", "m1", "c1", weight=0.5),
                    ]
                )
            ),
            HashingEmbedder(),
        )
        self.rows: dict[str, EntityRow] = {
            e.id: (e, batch.vectors[(USER, e.id)], 1, batch.passages.get((USER, e.id))) for e in batch.entities
        }
        self.relations: list[Relation] = list(batch.relations)
        self.dead: list[dict[str, Any]] = []
        self.leases: list[str] = []  # targets leased, in order
        self.held = 0  # leases held now

    @property
    def outbox(self) -> Records:  # the outbox too, as PostgreSQL is
        return self

    async def ids(self, user_id: str) -> dict[str, str]:
        return {i: r[0].kind for i, r in self.rows.items()}

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]:
        return {i: self.rows[i] for i in ids if i in self.rows}

    async def all_relations(self, user_id: str) -> list[Relation]:
        return list(self.relations)

    async def dead_letters(self, users: Sequence[str] | None = None) -> list[dict[str, Any]]:
        return [d for d in self.dead if not users or d["user_id"] in users]

    async def clear_dead_letters(self, user_id: str, upto: int) -> int:
        before = len(self.dead)
        self.dead = [d for d in self.dead if not (d["user_id"] == user_id and d["seq"] <= upto)]
        return before - len(self.dead)

    @contextlib.asynccontextmanager
    async def outbox_lease(self, target: str, *, wait: bool = False) -> AsyncIterator[object]:
        assert wait  # a repair waits for the lease, it never skips it
        self.leases.append(target)
        self.held += 1
        try:
            yield object()
        finally:
            self.held -= 1


class Projections:
    """A graph store and a vector index in one, holding what the records project; every write
    checks that the repair holds both leases."""

    def __init__(self, records: Records) -> None:
        self.records = records
        self.nodes_: dict[str, GraphNode] = {i: graph_node(e) for i, (e, *_) in records.rows.items()}
        self.docs_: dict[str, VectorDoc] = {i: vector_doc(e, v, ps) for i, (e, v, _, ps) in records.rows.items()}
        self.edges_: dict[tuple[str, str, str], GraphEdge] = {
            (r.source, r.target, r.type.value): graph_edge(r) for r in records.relations
        }

    def _leased(self) -> None:
        assert self.records.held == 2, "a repair writes only while holding both leases"

    async def nodes(self, user_id: str) -> dict[str, GraphNode]:
        return dict(self.nodes_)

    async def docs(self, user_id: str) -> dict[str, VectorDoc]:
        return dict(self.docs_)

    async def edges(self, user_id: str) -> list[GraphEdge]:
        return [self.edges_[k] for k in sorted(self.edges_)]

    async def ids(self, user_id: str) -> dict[str, str]:
        return {i: n.kind.value for i, n in self.nodes_.items()}

    async def upsert_nodes(self, user_id: str, nodes: Sequence[GraphNode]) -> None:
        self._leased()
        self.nodes_.update({n.id: n for n in nodes})

    async def delete_nodes(self, user_id: str, ids: Sequence[str]) -> None:
        self._leased()
        for i in ids:
            self.nodes_.pop(i, None)

    async def upsert_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None:
        self._leased()
        self.edges_.update({(e.source, e.target, e.type.value): e for e in edges})

    async def delete_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None:
        self._leased()
        for e in edges:
            self.edges_.pop((e.source, e.target, e.type.value), None)

    async def upsert(self, user_id: str, docs: Sequence[VectorDoc]) -> None:
        self._leased()
        self.docs_.update({d.id: d for d in docs})

    async def delete(self, user_id: str, ids: Sequence[str]) -> None:
        self._leased()
        for i in ids:
            self.docs_.pop(i, None)


class VectorsOnly:
    """The vector side of :class:`Projections` (``ids`` there are the graph's)."""

    def __init__(self, p: Projections) -> None:
        self.p = p

    def __getattr__(self, name: str) -> Any:
        return getattr(self.p, name)

    async def ids(self, user_id: str) -> dict[str, str]:
        return {i: d.kind.value for i, d in self.p.docs_.items()}


async def test_a_faithful_projection_is_clean():
    records = Records()
    p = Projections(records)
    assert (await check_user(records, p, VectorsOnly(p), USER)).clean


async def test_content_drift_is_found_field_by_field_with_every_id_in_place():
    records = Records()
    p = Projections(records)
    p.nodes_["c1"] = replace(p.nodes_["c1"], salience=0.1)
    p.nodes_["m1"] = replace(p.nodes_["m1"], tags=("a",))
    p.docs_["m1"] = replace(p.docs_["m1"], vector=p.docs_["m1"].vector * np.float32(0.5))
    p.docs_["m2"] = replace(p.docs_["m2"], source_agent_id="someone-else")
    p.edges_[("m1", "c1", "MENTIONS")] = replace(p.edges_[("m1", "c1", "MENTIONS")], relation_type="x")
    p.edges_[("m2", "c1", "MENTIONS")] = GraphEdge("m2", "c1", EdgeType.MENTIONS)
    drift = await check_user(records, p, VectorsOnly(p), USER)
    assert drift.stale_in_graph == {"concept": ["c1"], "memory_unit": ["m1"]}
    assert drift.stale_in_vectors == {"memory_unit": ["m1", "m2"]}
    assert drift.stale_edges == ["m1 -[MENTIONS]-> c1"] and drift.orphan_edges == ["m2 -[MENTIONS]-> c1"]
    assert not (drift.missing_in_graph or drift.orphans_in_graph or drift.missing_edges)


def test_a_document_read_back_in_another_order_or_array_type_is_the_same_document():
    doc = VectorDoc("m1", Kind.MEMORY_UNIT, "text", np.arange(4, dtype=np.float32), 1.5, ("a", "b"), None)
    assert same_doc(doc, replace(doc, tags=("b", "a"), vector=np.arange(4, dtype="<f4").astype(np.float64)))
    assert same_doc(doc, replace(doc, source_agent_id=""))  # Weaviate stores no agent as ""
    assert not same_doc(doc, replace(doc, ts=None))
    assert not same_doc(doc, replace(doc, vector=np.arange(4, dtype=np.float32) + np.float32(1e-6)))
    # passages: none and an empty array are the same; any other difference is not
    rows = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert same_doc(doc, replace(doc, passages=np.zeros((0, 4), dtype=np.float32)))
    assert same_doc(replace(doc, passages=rows), replace(doc, passages=rows.astype(np.float64)))
    assert not same_doc(doc, replace(doc, passages=rows))
    assert not same_doc(replace(doc, passages=rows), replace(doc, passages=rows[:1]))


async def test_passages_that_drift_or_are_missing_make_a_document_stale():
    records = Records()
    p = Projections(records)
    assert records.rows["m3"][3] is not None and records.rows["m3"][3].shape == (2, 64)
    assert records.rows["m2"][3] is None  # one sentence: no passages
    p.docs_["m3"] = replace(p.docs_["m3"], passages=None)  # an object written before passages existed
    drift = await check_user(records, p, VectorsOnly(p), USER)
    assert drift.stale_in_vectors == {"memory_unit": ["m3"]}


async def test_repair_mends_everything_under_both_leases_and_forgets_the_dead_events():
    records = Records()
    p = Projections(records)
    p.nodes_["c1"] = replace(p.nodes_["c1"], label="old")
    del p.docs_["m2"]
    p.nodes_["ghost"] = replace(p.nodes_["m2"], id="ghost")
    p.edges_[("m2", "c1", "MENTIONS")] = GraphEdge("m2", "c1", EdgeType.MENTIONS)
    del p.edges_[("m1", "c1", "MENTIONS")]
    records.dead = [{"seq": 7, "target": "graph", "user_id": USER, "op": "upsert_entity", "key": {"id": "c1"}}]
    drift = await check_user(records, p, VectorsOnly(p), USER)
    assert not drift.clean and drift.dead_events[0]["seq"] == 7
    await repair_user(records, p, VectorsOnly(p), drift)
    assert records.leases == ["graph", "vector"] and records.held == 0
    assert (await check_user(records, p, VectorsOnly(p), USER)).clean and records.dead == []
