"""The graph behaviours of the contract suite, run against Neo4jGraphStore on a real Neo4j 5.26, plus
congruence checks: random graphs give identical ``expand`` and ``neighbors`` output from the
embedded adapter and the Neo4j adapter.

Every test writes under its own fresh user ids and deletes them afterwards, so the suite can share
a server with other work.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from neo4j import Driver, GraphDatabase
from neo4j.exceptions import ConstraintError

from hrt.devstack import Stack
from hrt.errors import InvalidInput, StoreError, StoreUnavailable
from hrt.ingest import parse_jsonl
from hrt.records import EDGE_ENDPOINTS, Artifact, Concept, EdgeType, Kind, MemoryUnit, Relation
from hrt.stores.base import WARM_UP_USER, ExpansionCaps, GraphEdge, GraphNode, GraphStore, valid_at
from hrt.stores.embedded.store import EmbeddedStore
from hrt.stores.graph_walk import WalkView
from hrt.stores.neo4j.graph import Neo4jGraphStore
from hrt.stores.projection import graph_edge, graph_node
from tests.conftest import StackManager
from tests.helpers import jsonl, small_graph

pytestmark = pytest.mark.integration

CAPS = ExpansionCaps(depth=2, fanout_per_node=25, max_per_kind=100, hop_decay=0.5)
Connect = Callable[..., Neo4jGraphStore]


@pytest.fixture(scope="module")
def neo4j_stack(stack_manager: StackManager) -> Stack:
    return stack_manager.need("neo4j")  # started by the fixtures when not running: never a skip


@pytest.fixture(scope="module")
def neo4j_uri(neo4j_stack: Stack) -> str:
    return neo4j_stack.neo4j_uri


@pytest.fixture(scope="module")
def connect(neo4j_stack: Stack) -> Connect:
    """``Neo4jGraphStore`` on the dev stack's Neo4j, with its credentials (auth is on)."""
    return functools.partial(Neo4jGraphStore, neo4j_stack.neo4j_uri, auth=neo4j_stack.neo4j_auth)


@pytest.fixture(scope="module")
def raw(neo4j_stack: Stack) -> Iterator[Driver]:
    """A plain driver for checking what the adapter wrote, as an operator would."""
    with GraphDatabase.driver(neo4j_stack.neo4j_uri, auth=neo4j_stack.neo4j_auth) as driver:
        yield driver


@pytest.fixture(params=["procedure", "cypher"])
async def store(connect: Connect, request: pytest.FixtureRequest) -> AsyncIterator[Neo4jGraphStore]:
    """The adapter with expansion's neighbourhood from HRT's procedure (the dev stack installs
    neo4j-plugin/), and from the Cypher query."""
    graph = connect(expansion=request.param)
    await graph.apply_schema()
    yield graph
    await graph.close()


def projection(records: Sequence[Any]) -> dict[str, tuple[list[GraphNode], list[GraphEdge]]]:
    """Records -> per user graph nodes and edges, the way every deployment projects them."""
    out: dict[str, tuple[list[GraphNode], list[GraphEdge]]] = {}
    for record in records:
        nodes, edges = out.setdefault(record.user_id, ([], []))
        if isinstance(record, Relation):
            edges.append(graph_edge(record))
        elif isinstance(record, MemoryUnit | Concept | Artifact):
            nodes.append(graph_node(record))
    return out


async def load(graph: GraphStore, lines: list[str]) -> None:
    for user_id, (nodes, edges) in projection(parse_jsonl(lines)).items():
        await graph.upsert_nodes(user_id, nodes)
        await graph.upsert_edges(user_id, edges)


class Tenants:
    """Fresh user ids for one test, deleted from the server afterwards."""

    def __init__(self) -> None:
        self.run = uuid.uuid4().hex[:10]
        self.made: list[str] = []

    def __call__(self, name: str) -> str:
        user_id = f"t{self.run}-{name}"
        self.made.append(user_id)
        return user_id


@pytest.fixture
async def tenants(store: Neo4jGraphStore) -> AsyncIterator[Tenants]:
    made = Tenants()
    yield made
    for user_id in made.made:
        await store.delete_user(user_id)


@pytest.fixture
async def loaded(store: Neo4jGraphStore, tenants: Tenants) -> tuple[Neo4jGraphStore, str]:
    """The contract suite's small graph for user u1 and, under x-prefixed ids, for user u2."""
    u1, u2 = tenants("u1"), tenants("u2")
    await load(store, jsonl(small_graph(u1) + small_graph(u2, prefix="x")))
    return store, u1


# The behaviours every GraphStore shares run on Neo4j in tests/contract/test_store_contract.py
# (its "services" deployment); this module keeps what is specific to Neo4j.


# --- Neo4j specifics -----------------------------------------------------------------------------


async def test_projection_is_what_an_operator_sees(loaded, raw):
    store, u1 = loaded
    assert await store.ids(u1) == {
        "c-phx": "concept",
        "c-bw": "concept",
        "c-pg": "concept",
        "m1": "memory_unit",
        "m2": "memory_unit",
        "m3": "memory_unit",
        "m4": "memory_unit",
        "a1": "artifact",
    }
    rows = raw.execute_query(
        "MATCH (n:Entity {user_id: $u})-[r]->(m) RETURN n.id AS n, labels(n) AS labels, type(r) AS type, "
        "r.weight AS weight, r.relation_type AS rt, m.id AS m",
        {"u": u1},
        database_="neo4j",
    )
    by_edge = {(r["n"], r["type"], r["m"]): r for r in rows.records}
    assert sorted(by_edge[("c-phx", "RELATED_TO", "c-bw")]["labels"]) == ["Concept", "Entity"]
    assert by_edge[("c-phx", "RELATED_TO", "c-bw")]["weight"] == 0.8
    assert by_edge[("c-phx", "RELATED_TO", "c-bw")]["rt"] == "depends_on"
    assert sorted(by_edge[("a1", "DERIVED_FROM", "m1")]["labels"]) == ["DerivedArtifact", "Entity"]
    assert {t for _, t, _ in by_edge} == {"MENTIONS", "RELATED_TO", "DERIVED_FROM", "FOLLOWS"}


async def test_writes_are_idempotent_and_deletes_cascade(loaded):
    store, u1 = loaded
    before = await store.expand(u1, {"m1": 0.8}, CAPS)
    await load(store, jsonl([r for r in small_graph(u1) if r["kind"] != "preference"]))
    assert await store.expand(u1, {"m1": 0.8}, CAPS) == before
    # an id that changes kind changes label
    await store.upsert_nodes(u1, [GraphNode("a1", Kind.CONCEPT, "Now a concept", None, 0.5, "topic")])
    assert (await store.ids(u1))["a1"] == "concept"
    await store.delete_edges(u1, [GraphEdge("m2", "m1", EdgeType.FOLLOWS)])
    out = {c.node.id: c for c in await store.expand(u1, {"m1": 0.8}, ExpansionCaps(1, 25, 100, 0.5))}
    assert "m2" not in out
    await store.delete_nodes(u1, ["c-phx"])
    assert (await store.neighbors(u1, ["m1"], EdgeType.MENTIONS, True, 10)) == {"m1": []}
    await store.delete_user(u1)
    assert await store.ids(u1) == {}


async def test_edges_without_endpoints_are_skipped(store, tenants):
    u = tenants("orphans")
    await store.upsert_nodes(u, [GraphNode("c1", Kind.CONCEPT, "C1", None, 0.5, "topic")])
    await store.upsert_edges(u, [GraphEdge("m-missing", "c1", EdgeType.MENTIONS)])
    assert await store.neighbors(u, ["c1"], EdgeType.MENTIONS, False, 10) == {"c1": []}


async def test_schema_is_idempotent(store, raw):
    await store.apply_schema()
    await store.apply_schema()  # again: every statement is idempotent
    rows = raw.execute_query("SHOW CONSTRAINTS YIELD name, type, properties", database_="neo4j")
    found = {r["name"]: r for r in rows.records}
    assert found["entity_user_id"]["type"] == "UNIQUENESS"
    assert found["entity_user_id"]["properties"] == ["user_id", "id"]


async def test_warm_plans_retrieval_reads_and_touches_no_data(loaded, raw):
    store, u1 = loaded
    before = await store.expand(u1, {"m1": 0.8}, CAPS)
    count = "MATCH (n) OPTIONAL MATCH (n)-[r]->() RETURN count(DISTINCT n) AS n, count(r) AS r"
    nodes_before = raw.execute_query(count, database_="neo4j").records[0]
    raw.execute_query("CALL db.clearQueryCaches()", database_="neo4j")
    await store.warm()
    # then a user's requests: 29 seeds (the 11-100 bucket), 3 shown ids, user ids of every length,
    # with and without a valid-at time
    await store.expand(u1, {f"m{i}": 0.5 for i in range(1, 30)}, CAPS)
    await store.neighbors(u1, ["m1", "m2", "m3"], EdgeType.MENTIONS, True, 50)
    await store.neighbors(u1, ["m1", "m2", "m3"], EdgeType.SUPERSEDES, False, 50, valid_at=1.7e9)
    for user in ("u", "user-7", "9b2f4c1e-5d6a-4f3b-8c7d-2e1f0a9b8c7d", "x" * 128):
        await store.expand(user, {"m1": 0.5}, ExpansionCaps(3, 25, 100, 0.5))
        await store.expand(user, {"m1": 0.5}, ExpansionCaps(3, 25, 100, 0.5), valid_at=1.7e9)
        await store.neighbors(user, ["m1"], EdgeType.MENTIONS, False, 50)
        await store.neighbors(user, ["m1"], EdgeType.SUPERSEDES, True, 50)
    cleared = raw.execute_query("CALL db.clearQueryCaches()", database_="neo4j").records[0][0]
    # one plan per query and bucket, each made by the warm-up and found by every request after it:
    # assembly's two neighbour reads and the two supersession reads for lists of 1, 2-10 and
    # 11-100 ids, and expansion's hops
    # (the procedure's call, or the Cypher expansion's two queries: a hop's links, the result's
    # rows) for those and 101-1000 ids; user ids of 1, 2-10, 11-100 and 101-128 characters share them
    expansions = 1 * 4 if await store.uses_procedure() else 2 * 4
    assert cleared == f"Query caches successfully cleared of {4 * 3 + expansions} queries."
    assert raw.execute_query(count, database_="neo4j").records[0] == nodes_before
    assert await store.ids(WARM_UP_USER) == {}
    assert await store.expand(u1, {"m1": 0.8}, CAPS) == before


async def test_expansion_mode_follows_the_installed_procedure(connect, monkeypatch, caplog):
    """``auto`` uses hrt.expand when Neo4j has it in this adapter's version, else the Cypher query
    (with a warning); ``procedure`` refuses to run without it; ``cypher`` never asks."""
    from hrt.stores.neo4j import graph as neo4j_graph

    fresh = connect()
    assert fresh.expansion_path == "unknown"  # not asked yet
    assert await fresh.uses_procedure() is True  # the dev stack installs the plugin
    assert fresh.expansion_path == "procedure"
    never = connect(expansion="cypher")
    assert never.expansion_path == "cypher" and await never.uses_procedure() is False
    for adapter in (fresh, never):
        await adapter.close()
    for patch, problem in (
        (("PLUGIN_VERSION", "0"), f"version {neo4j_graph.PLUGIN_VERSION!r}, this HRT reads '0'"),
        (("_PLUGIN_VERSION_QUERY", "RETURN hrt.no_such_function() AS version"), "not installed"),
    ):
        with monkeypatch.context() as m:
            m.setattr(neo4j_graph, *patch)
            auto = connect()
            caplog.clear()
            assert await auto.uses_procedure() is False
            assert problem in caplog.text
            out = await auto.expand("nobody", {"a": 1.0}, CAPS)  # the Cypher query answers
            assert out == []
            strict = connect(expansion="procedure")
            with pytest.raises(StoreError, match="HRT_NEO4J_EXPANSION=procedure"):
                await strict.expand("nobody", {"a": 1.0}, CAPS)
            for adapter in (auto, strict):
                await adapter.close()
    # a Neo4j restarted without the plugin: the first call that finds it gone falls back for good
    auto = connect()
    assert await auto.uses_procedure() is True
    strict = connect(expansion="procedure")
    gone = neo4j_graph._PROCEDURE_QUERY.replace("hrt.expand(", "hrt.no_such_procedure(")
    with monkeypatch.context() as m:
        m.setattr(neo4j_graph, "_PROCEDURE_QUERY", gone)
        caplog.clear()
        assert await auto.expand("nobody", {"a": 1.0}, CAPS) == []
        assert "no longer has hrt.expand" in caplog.text
        assert await auto.uses_procedure() is False
        with pytest.raises(StoreError, match="no_such_procedure"):
            await strict.expand("nobody", {"a": 1.0}, CAPS)
    for adapter in (auto, strict):
        await adapter.close()
    with pytest.raises(ValueError, match="expansion must be one of"):
        connect(expansion="fast")


async def test_uniqueness_is_enforced(store, tenants, raw):
    u = tenants("dup")
    await store.upsert_nodes(u, [GraphNode("c1", Kind.CONCEPT, "C1", None, 0.5, "topic")])
    with pytest.raises(ConstraintError):
        raw.execute_query("CREATE (:Entity {user_id: $u, id: 'c1'})", {"u": u}, database_="neo4j")


async def test_errors_are_translated(neo4j_uri, connect):
    down = Neo4jGraphStore("bolt://127.0.0.1:1", connection_timeout=1.0, max_transaction_retry_time=0.0)
    with pytest.raises(StoreUnavailable) as exc_info:
        await down.ping()
    assert exc_info.value.__cause__ is not None
    await down.close()
    for auth in (None, ("neo4j", "not-the-password")):  # auth is on: a clear error, not an empty graph
        refused = connect(auth=auth, max_transaction_retry_time=0.0)
        with pytest.raises(StoreError, match="Unauthorized") as refusal:
            await refused.expand("u", {"a": 1.0}, CAPS)
        assert not isinstance(refusal.value, StoreUnavailable)
        await refused.close()
    wrong_db = connect(database="no-such-database")
    with pytest.raises(StoreError) as err:
        await wrong_db.expand("u", {"a": 1.0}, CAPS)
    assert not isinstance(err.value, StoreUnavailable) and err.value.__cause__ is not None
    await wrong_db.close()
    ok = connect()
    await ok.ping()
    with pytest.raises(InvalidInput):
        await ok.expand("u", {"a": 1.0}, ExpansionCaps(4, 25, 100, 0.5))
    await ok.close()


# --- congruence: embedded vs Neo4j ---------------------------------------------------------------

KINDS = list(Kind)
# 0.0 and a time before 1970 (with an as-of before 1970 below) probe the link order keys, where a
# node without ts and one at 0.0 share the key 0.0
STAMPS = [None, 100.0, 200.0, 200.0, 300.0, 0.0, -100.0]
# validity intervals of nodes and edges (mostly open), and the valid-at times probed: before, at
# and after their ends (valid_from included, valid_to excluded)
INTERVALS = [(None, None), (None, None), (None, 150.0), (150.0, None), (100.0, 250.0)]
VALID_ATS = [None, 120.0, 150.0, 260.0]


def plain(found: Any, *, walk_only: bool = False) -> Any:
    """Expansion or neighbour output without the nodes' own intervals: the congruence tests compare
    the walk and the neighbour reads with the embedded adapter's; the intervals Neo4j returns are
    checked against what was written (the embedded adapter's own suite checks its intervals).
    ``walk_only`` drops a candidate's mentions and newest mention too: they are not walks, so
    they do not depend on valid_at (and a reference graph without the edges that do not hold has
    other ones)."""
    if isinstance(found, dict):
        return {k: [replace(n, valid_from=None, valid_to=None) for n in v] for k, v in found.items()}
    out = [replace(c, node=replace(c.node, valid_from=None, valid_to=None)) for c in found]
    return [replace(c, mentions=(), last_mention_ts=None) for c in out] if walk_only else out


def mention_reads(
    nodes: list[GraphNode], edges: list[GraphEdge], not_after: float | None
) -> tuple[dict[str, tuple[str, ...]], dict[str, float | None]]:
    """What expansion's candidates carry besides the walk, read off the whole graph: a memory
    unit's mentioned concepts (strongest first, then id: concepts have no ts), a concept's newest
    mentioning memory unit's ts as of ``not_after``."""
    ts = {n.id: n.ts for n in nodes}
    mentions = [e for e in edges if e.type is EdgeType.MENTIONS]
    mentioned = {
        n.id: tuple(
            e.target for e in sorted((e for e in mentions if e.source == n.id), key=lambda e: (-e.weight, e.target))
        )
        for n in nodes
    }
    newest: dict[str, float | None] = {}
    for n in nodes:
        stamps = [ts[e.source] for e in mentions if e.target == n.id]
        shown = [t for t in stamps if t is not None and (not_after is None or t <= not_after)]
        newest[n.id] = max(shown) if shown else None
    return mentioned, newest


def holds(item: GraphNode | GraphEdge, at: float | None) -> bool:
    return valid_at(item.valid_from, item.valid_to, at)


@st.composite
def user_graphs(draw: st.DrawFn) -> tuple[list[GraphNode], list[GraphEdge]]:
    """A small graph with many ties (weights, timestamps, saliences), self-loops and opposite
    edges, using the ids n00.. that every user of an example shares."""
    count = draw(st.integers(1, 12))
    nodes = []
    for i in range(count):
        kind = draw(st.sampled_from(KINDS))
        ts = None if kind is Kind.CONCEPT else draw(st.sampled_from(STAMPS))
        valid_from, valid_to = draw(st.sampled_from(INTERVALS))
        nodes.append(
            GraphNode(
                id=f"n{i:02d}",
                kind=kind,
                label=f"node {i}",
                ts=ts,
                salience=draw(st.sampled_from([0.2, 0.5, 0.9])),
                category=draw(st.sampled_from(["meeting_note", "topic"])),
                tags=tuple(sorted(draw(st.sets(st.sampled_from(["a", "b", "c"]), max_size=2)))),
                source_agent_id=draw(st.sampled_from([None, "agent"])),
                valid_from=valid_from,
                valid_to=valid_to,
            )
        )
    edges: dict[tuple[str, str, EdgeType], GraphEdge] = {}
    for _ in range(draw(st.integers(0, 30))):
        etype = draw(st.sampled_from(list(EdgeType)))
        sources = [n.id for n in nodes if n.kind in EDGE_ENDPOINTS[etype][0]]
        targets = [n.id for n in nodes if n.kind in EDGE_ENDPOINTS[etype][1]]
        if not sources or not targets:
            continue
        source, target = draw(st.sampled_from(sources)), draw(st.sampled_from(targets))
        weight = draw(st.sampled_from([0.25, 0.5, 1.0]))
        valid_from, valid_to = draw(st.sampled_from(INTERVALS))
        relation_type = draw(st.sampled_from([None, "rt"]))
        edges[(source, target, etype)] = GraphEdge(source, target, etype, weight, relation_type, valid_from, valid_to)
    return nodes, list(edges.values())


Probe = tuple[dict[str, float], ExpansionCaps, float | None, list[str], EdgeType, bool, int, float | None]


@st.composite
def probes(draw: st.DrawFn) -> Probe:
    ids = [f"n{i:02d}" for i in range(12)] + ["ghost"]
    seeds = draw(st.dictionaries(st.sampled_from(ids), st.sampled_from([0.5, 0.8, 1.0]), min_size=1, max_size=4))
    caps = ExpansionCaps(
        depth=draw(st.integers(0, 3)),
        fanout_per_node=draw(st.integers(1, 3)),
        max_per_kind=draw(st.integers(1, 5)),
        hop_decay=draw(st.sampled_from([0.5, 0.6, 1.0])),
    )
    not_after = draw(st.sampled_from([None, 150.0, 250.0, 0.0, -50.0]))
    nb_ids = draw(st.lists(st.sampled_from(ids), min_size=1, max_size=4))
    return (
        seeds,
        caps,
        not_after,
        nb_ids,
        draw(st.sampled_from(list(EdgeType))),
        draw(st.booleans()),
        draw(st.integers(0, 4)),
        draw(st.sampled_from(VALID_ATS)),
    )


@pytest.fixture
def embedded_graph(tmp_path: Path) -> Iterator[EmbeddedStore]:
    store = EmbeddedStore(tmp_path / "congruence.db", None)
    yield store
    store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graphs=st.lists(user_graphs(), min_size=1, max_size=3), probe_list=st.lists(probes(), min_size=1, max_size=3))
async def test_expand_and_neighbors_agree_with_the_embedded_adapter(
    connect: Connect, embedded_graph: EmbeddedStore, graphs, probe_list
) -> None:
    """Neo4j holds every node and edge with its interval, SUPERSEDES included. The reference is the
    embedded adapter over what the port says Neo4j must read as of a valid-at time: expansion
    walks the edges but SUPERSEDES that hold then (an edge that does not hold is as if absent: it
    does not use up the fan-out either), a neighbour read sees the edges that hold to neighbours
    that hold. So the reference needs no validity support of its own."""
    neo4j = connect(expansion="cypher")
    by_index = connect(sparse_degree=0, expansion="cypher")  # every node read as a hub is
    procedure = connect(expansion="procedure")
    procedure_by_index = connect(sparse_degree=0, expansion="procedure")
    run = uuid.uuid4().hex[:10]
    users = [f"t{run}-g{i}" for i in range(len(graphs))]
    embedded = embedded_graph.graph
    references: list[str] = []

    def reference(user_id: str, at: float | None, view: str) -> str:
        return f"{user_id}-v{VALID_ATS.index(at)}-{view}"

    try:
        for user_id, (nodes, edges) in zip(users, graphs, strict=True):
            await neo4j.upsert_nodes(user_id, nodes)
            await neo4j.upsert_edges(user_id, edges)
            node_of = {n.id: n for n in nodes}
            for at in VALID_ATS:
                current = [e for e in edges if holds(e, at)]
                views = {
                    "walk": [e for e in current if e.type is not EdgeType.SUPERSEDES],
                    "out": [e for e in current if holds(node_of[e.target], at)],
                    "in": [e for e in current if holds(node_of[e.source], at)],
                }
                for view, kept in views.items():
                    references.append(reference(user_id, at, view))
                    await embedded.upsert_nodes(references[-1], nodes)
                    await embedded.upsert_edges(references[-1], kept)
        for user_id, (nodes, edges) in zip(users, graphs, strict=True):
            intervals = {n.id: (n.valid_from, n.valid_to) for n in nodes}
            for seeds, caps, not_after, nb_ids, edge, outgoing, limit, at in probe_list:
                expected = await embedded.expand(reference(user_id, at, "walk"), seeds, caps, not_after)
                mentioned, newest = mention_reads(nodes, edges, not_after)
                for adapter in (neo4j, by_index, procedure, procedure_by_index):
                    found = await adapter.expand(user_id, seeds, caps, not_after, valid_at=at)
                    if at is None:
                        assert plain(found) == plain(expected)
                    assert plain(found, walk_only=True) == plain(expected, walk_only=True)
                    for c in found:
                        assert (c.node.valid_from, c.node.valid_to) == intervals[c.node.id]
                        assert c.mentions == (mentioned[c.node.id] if c.node.kind is Kind.MEMORY_UNIT else ())
                        assert c.last_mention_ts == (newest[c.node.id] if c.node.kind is Kind.CONCEPT else None)
                nb_user = reference(user_id, at, "out" if outgoing else "in")
                expected_nb = await embedded.neighbors(nb_user, nb_ids, edge, outgoing, limit, not_after)
                found_nb = await neo4j.neighbors(user_id, nb_ids, edge, outgoing, limit, not_after, valid_at=at)
                assert plain(found_nb) == plain(expected_nb)
                assert all((n.valid_from, n.valid_to) == intervals[n.id] for ns in found_nb.values() for n in ns)
    finally:
        for user_id in users:
            await neo4j.delete_user(user_id)
        for user_id in references:
            await embedded.delete_user(user_id)
        for adapter in (neo4j, by_index, procedure, procedure_by_index):
            await adapter.close()


async def test_sample_graph_agrees_with_the_embedded_adapter(store, tenants, embedded_graph):
    """The bundled sample graph, from its busiest concepts, at every depth."""
    from importlib import resources

    lines = resources.files("hrt.sample_data").joinpath("sample_graph.jsonl").read_text(encoding="utf-8")
    records = parse_jsonl(lines.splitlines())
    renamed = {u: tenants(u) for u in {r.user_id for r in records}}
    for user_id, (nodes, edges) in projection(records).items():
        for graph in (embedded_graph.graph, store):
            await graph.upsert_nodes(renamed[user_id], nodes)
            await graph.upsert_edges(renamed[user_id], edges)
    for user_id, (nodes, edges) in projection(records).items():
        degree: dict[str, int] = {}
        for e in edges:
            degree[e.source] = degree.get(e.source, 0) + 1
            degree[e.target] = degree.get(e.target, 0) + 1
        seeds = {ident: 1.0 - 0.1 * i for i, ident in enumerate(sorted(degree, key=lambda k: (-degree[k], k))[:5])}
        mus = [n.id for n in nodes if n.kind is Kind.MEMORY_UNIT]
        for depth in range(4):
            caps = ExpansionCaps(depth, 4, 12, 0.6)
            for not_after in (None, 1.75e9):
                expected = await embedded_graph.graph.expand(renamed[user_id], seeds, caps, not_after)
                assert plain(await store.expand(renamed[user_id], seeds, caps, not_after)) == plain(expected)
        expected_nb = await embedded_graph.graph.neighbors(renamed[user_id], mus, EdgeType.MENTIONS, True, 3)
        found_nb = await store.neighbors(renamed[user_id], mus, EdgeType.MENTIONS, True, 3)
        assert plain(found_nb) == plain(expected_nb)


def with_intervals(edges: list[GraphEdge]) -> list[GraphEdge]:
    """The edges with validity intervals around 1.75e9 (mid-June 2025, inside the sample graph's
    time span): a third ended then, a third started then, a third open."""
    bounds = ((None, 1.75e9), (1.75e9, None), (None, None))
    return [replace(e, valid_from=bounds[i % 3][0], valid_to=bounds[i % 3][1]) for i, e in enumerate(edges)]


def fetched_view(
    fetched: Any, not_after: float | None
) -> tuple[WalkView[str], dict[str, list[tuple[str, EdgeType, float, bool]]], dict[str, Any]]:
    """The walk's view of what the expansion query fetched (its adjacency and node rows), as the
    Cypher expansion builds it; a link the walk asks for that was not fetched is a KeyError."""
    adjacency = {ident: [(o, EdgeType(t), w, f) for o, t, w, f in links] for ident, links in fetched["adjacency"]}
    rows = {row[0]: row for row in fetched["nodes"]}

    def visible(ident: str) -> bool:
        row = rows.get(ident)
        return row is not None and (not_after is None or row[3] is None or row[3] <= not_after)

    view = WalkView(links=adjacency.__getitem__, visible=visible, kind=lambda i: Kind(rows[i][1]), order=lambda i: i)
    return view, adjacency, rows


async def test_procedure_walks_what_the_query_fetches(connect, tenants):
    """hrt.expand is graph_walk.walk run inside Neo4j over the neighbourhood the expansion query
    fetches: the Python walk over the query's whole neighbourhood (every level's links in visit
    order, every node's row) gives the procedure's result exactly (scores, hops, seeds, paths and
    first hops), with the same rows for the nodes reached, having read no more links than the
    query; on the sample graph (its edges given validity intervals) from each user's busiest nodes,
    at every depth, fan-out, per-kind cap, as-of and valid-at, for sparse and hub reads."""
    from importlib import resources

    from hrt.stores.graph_walk import walk
    from hrt.stores.neo4j.graph import _PROCEDURE_QUERY, _min_key
    from tests.contract.neo4j_reference import expand_query

    lines = resources.files("hrt.sample_data").joinpath("sample_graph.jsonl").read_text(encoding="utf-8")
    graph = connect(expansion="cypher")
    await graph.apply_schema()
    compared = capped = 0
    for user_id, (nodes, edges) in projection(parse_jsonl(lines.splitlines())).items():
        u = tenants(user_id)
        await graph.upsert_nodes(u, nodes)
        await graph.upsert_edges(u, with_intervals(edges))
        degree: dict[str, int] = {}
        for e in edges:
            degree[e.source] = degree.get(e.source, 0) + 1
            degree[e.target] = degree.get(e.target, 0) + 1
        busiest = sorted(degree, key=lambda k: (-degree[k], k))
        # two seeds tie; the ghost is in no graph
        seeds = {busiest[0]: 0.9, busiest[1]: 0.7, busiest[2]: 0.7, "ghost": 1.0}
        for depth in range(4):
            for fanout, sparse in ((4, 64), (25, 64), (4, 0), (25, 0)):
                for not_after, at in ((None, None), (1.75e9, None), (0.0, None), (None, 1.745e9), (1.76e9, 1.76e9)):
                    params = {
                        "user": [u],
                        "seeds": sorted(seeds),
                        "fanout": fanout,
                        "sparse": sparse,
                        "not_after": not_after,
                        "min_key": _min_key(not_after),
                        "valid_at": at,
                    }
                    fetched = (await graph._run("q", expand_query(depth), params, read=True)).records[0]
                    view, adjacency, rows = fetched_view(fetched, not_after)
                    for max_per_kind in (2, 5, 100):
                        caps = ExpansionCaps(depth, fanout, max_per_kind, 0.6)
                        expected = walk(view, list(seeds.items()), caps)
                        call = {
                            **params,
                            "seeds": sorted(seeds),
                            "scores": [seeds[s] for s in sorted(seeds)],
                            "depth": depth,
                            "max_per_kind": max_per_kind,
                            "hop_decay": 0.6,
                        }
                        answer = (await graph._run("p", _PROCEDURE_QUERY, call, read=True)).records[0]
                        found = {
                            ident: (score, hops, seed, tuple(tuple(step) for step in path), first)
                            for ident, score, hops, seed, path, first in answer["walk"]
                        }
                        assert len(found) == len(answer["walk"])
                        assert found == expected, (u, depth, fanout, sparse, not_after, at, max_per_kind)
                        assert {row[0]: row for row in answer["nodes"]} == {i: rows[i] for i in expected}
                        assert len(answer["nodes"]) == len(expected)
                        assert answer["read"] <= sum(len(links) for links in adjacency.values())
                        compared += len(expected) > 3
                        capped += answer["read"] < sum(len(links) for links in adjacency.values())
    assert compared > 50 and capped > 20  # most probes reach something; the cap saves reads
    await graph.close()


async def test_link_keys_follow_timestamp_changes(store, tenants, embedded_graph):
    """A node's ts decides its place in its neighbours' visit order (and a concept's newest
    mention): re-timestamping nodes after their edges exist re-keys the edges."""
    u = tenants("retime")
    hub = GraphNode("c-hub", Kind.CONCEPT, "Hub", None, 0.5, "topic")
    mus = [GraphNode(f"m{i:02d}", Kind.MEMORY_UNIT, f"note {i}", 100.0 + i, 0.5, "meeting_note") for i in range(12)]
    edges = [GraphEdge(m.id, hub.id, EdgeType.MENTIONS) for m in mus]
    edges += [GraphEdge(mus[i + 1].id, mus[i].id, EdgeType.FOLLOWS) for i in range(11)]
    caps = ExpansionCaps(depth=2, fanout_per_node=3, max_per_kind=100, hop_decay=0.6)
    # the oldest become the newest, one loses its ts, one moves past the as-of
    retimed = [GraphNode(m.id, m.kind, m.label, 500.0 - i, m.salience, m.category) for i, m in enumerate(mus[:4])]
    retimed += [GraphNode("m04", Kind.MEMORY_UNIT, "note 4", None, 0.5, "meeting_note")]
    retimed += [GraphNode("m11", Kind.MEMORY_UNIT, "note 11", 900.0, 0.5, "meeting_note")]
    for graph in (embedded_graph.graph, store):
        await graph.upsert_nodes(u, [hub, *mus])
        await graph.upsert_edges(u, edges)
        await graph.upsert_nodes(u, retimed)
    for seeds in ({"c-hub": 1.0}, {"m05": 0.9}, {"m00": 0.8, "c-hub": 0.5}):
        for not_after in (None, 600.0, 300.0, 104.5):
            expected = await embedded_graph.graph.expand(u, seeds, caps, not_after)
            assert await store.expand(u, seeds, caps, not_after) == expected, (seeds, not_after)
    for not_after in (None, 600.0, 104.5):
        expected_nb = await embedded_graph.graph.neighbors(u, ["c-hub"], EdgeType.MENTIONS, False, 4, not_after)
        assert await store.neighbors(u, ["c-hub"], EdgeType.MENTIONS, False, 4, not_after) == expected_nb
    await embedded_graph.graph.delete_user(u)


async def test_apply_schema_backfills_link_keys_of_older_edges(store, tenants, embedded_graph, raw):
    """Edges written before the link order keys existed get them when the schema is applied (the
    one-off backfill runs again once its marker is gone; it touches only edges missing a key)."""
    u = tenants("legacy")
    hub = GraphNode("c-hub", Kind.CONCEPT, "Hub", None, 0.5, "topic")
    mus = [GraphNode(f"m{i:02d}", Kind.MEMORY_UNIT, f"note {i}", 100.0 + i, 0.5, "meeting_note") for i in range(8)]
    edges = [GraphEdge(m.id, hub.id, EdgeType.MENTIONS, 1.0 - 0.05 * i) for i, m in enumerate(mus)]
    for graph in (embedded_graph.graph, store):
        await graph.upsert_nodes(u, [hub, *mus])
        await graph.upsert_edges(u, edges)
    raw.execute_query(
        "MATCH (:Entity {user_id: $u})-[r]->() REMOVE r.sid, r.tid, r.nw, r.sts, r.tts", {"u": u}, database_="neo4j"
    )
    caps = ExpansionCaps(depth=2, fanout_per_node=3, max_per_kind=100, hop_decay=0.6)
    assert await store.expand(u, {"c-hub": 1.0}, caps) != await embedded_graph.graph.expand(u, {"c-hub": 1.0}, caps)
    raw.execute_query("MATCH (m:HRTSchemaMigration {name: 'link_keys_v1'}) DELETE m", database_="neo4j")
    await store.apply_schema()
    for seeds in ({"c-hub": 1.0}, {"m03": 0.9}):
        assert await store.expand(u, seeds, caps) == await embedded_graph.graph.expand(u, seeds, caps)
    expected_nb = await embedded_graph.graph.neighbors(u, ["c-hub"], EdgeType.MENTIONS, False, 3)
    assert await store.neighbors(u, ["c-hub"], EdgeType.MENTIONS, False, 3) == expected_nb
    marker = raw.execute_query(
        "MATCH (m:HRTSchemaMigration {name: 'link_keys_v1'}) RETURN count(m) AS n", database_="neo4j"
    )
    assert marker.records[0]["n"] == 1
    await embedded_graph.graph.delete_user(u)


async def test_hubs_are_cut_inside_neo4j(store, tenants, raw):
    """Expansion reads a hub's links from the link order indexes and stops at the fan-out cap
    instead of reading all of them (PROFILE counts the rows the index seeks produced)."""
    u = tenants("hub")
    hub = GraphNode("c-hub", Kind.CONCEPT, "Hub", None, 0.5, "topic")
    mus = [GraphNode(f"m{i:03d}", Kind.MEMORY_UNIT, f"note {i}", 1000.0 + i, 0.5, "meeting_note") for i in range(300)]
    await store.upsert_nodes(u, [hub, *mus])
    await store.upsert_edges(u, [GraphEdge(m.id, hub.id, EdgeType.MENTIONS) for m in mus])
    caps = ExpansionCaps(depth=1, fanout_per_node=5, max_per_kind=100, hop_decay=0.6)
    out = {c.node.id: c for c in await store.expand(u, {"c-hub": 1.0}, caps)}
    assert sorted(out) == ["c-hub", "m295", "m296", "m297", "m298", "m299"]
    assert out["c-hub"].last_mention_ts == 1299.0
    from hrt.stores.neo4j.graph import _HOP_QUERY, SPARSE_DEGREE, _hop_params

    assert len(mus) > SPARSE_DEGREE  # the hub is read from the indexes, not walked
    params = {**_hop_params(u, 5, SPARSE_DEGREE, None), "todo": ["c-hub"]}
    with raw.session(database="neo4j") as session:
        profile = session.run("PROFILE " + _HOP_QUERY, params).consume().profile

    def seeks(plan: dict[str, Any]) -> list[int]:
        own = [plan.get("rows", 0)] if "RelationshipIndexSeek" in plan["operatorType"] else []
        return own + [n for child in plan.get("children", []) for n in seeks(child)]

    rows = seeks(profile)
    # 8 (type, direction) reads of about 5 each, not the hub's 300 links
    # (the bound leaves room for a runtime that reads indexes in batches)
    assert rows and sum(rows) < 150, rows


# --- facts that change (#20): intervals and SUPERSEDES ------------------------------------------

AT = 2000.0  # the valid-at time of the tests below


def validity_hub() -> tuple[list[GraphNode], list[GraphEdge]]:
    """A concept mentioned by 100 memory units (m000..m099, newest last), more than SPARSE_DEGREE,
    so expansion reads its links from the link order indexes; at AT the mentions of the 10 newest
    have ended and those of the 5 before them have not begun, so its first 5 links that hold are
    m084..m080's. Its strongest link, to c-x, ended too. m084's own interval ended before AT (a
    node is walked whatever its own interval, but is no neighbour at AT)."""
    hub = GraphNode("c-hub", Kind.CONCEPT, "Hub", None, 0.5, "topic")
    cx = GraphNode("c-x", Kind.CONCEPT, "X", None, 0.5, "topic")
    mus = [
        GraphNode(f"m{i:03d}", Kind.MEMORY_UNIT, f"note {i}", 1000.0 + i, 0.5, "note", valid_from=1000.0 + i)
        for i in range(100)
    ]
    mus[84] = replace(mus[84], valid_to=1500.0)
    edges = [GraphEdge("c-hub", "c-x", EdgeType.RELATED_TO, 1.0, valid_to=500.0)]
    for i, m in enumerate(mus):
        interval = (None, 500.0) if i >= 90 else (5000.0, None) if i >= 85 else (None, None)
        edges.append(GraphEdge(m.id, hub.id, EdgeType.MENTIONS, 0.9, None, *interval))
    return [hub, cx, *mus], edges


async def test_edges_that_do_not_hold_are_skipped_before_the_fan_out(store, tenants, connect, raw):
    """On the hub path (the link order indexes, cut at the fan-out) and on the walk path of a
    node with few links, by the procedure and by the Cypher query (``store``'s two params): a link
    whose interval does not hold at valid_at is read past, and the fan-out goes to the first ones
    that hold; the hub's index reads still stop there (PROFILE, as in test_hubs_are_cut_inside_neo4j)."""
    from hrt.stores.neo4j.graph import _HOP_QUERY, SPARSE_DEGREE, _hop_params

    u = tenants("valid-hub")
    nodes, edges = validity_hub()
    assert sum(1 for e in edges if "c-hub" in (e.source, e.target)) > SPARSE_DEGREE
    await store.upsert_nodes(u, nodes)
    await store.upsert_edges(u, edges)
    walking = connect(sparse_degree=1000, expansion=store._expansion)  # the same links, walked
    caps = ExpansionCaps(depth=1, fanout_per_node=5, max_per_kind=100, hop_decay=0.6)
    try:
        for graph in (store, walking):
            everything = {c.node.id for c in await graph.expand(u, {"c-hub": 1.0}, caps)}
            assert everything == {"c-hub", "c-x", "m099", "m098", "m097", "m096"}
            at = {c.node.id: c for c in await graph.expand(u, {"c-hub": 1.0}, caps, valid_at=AT)}
            assert sorted(at) == ["c-hub", "m080", "m081", "m082", "m083", "m084"]
            assert (at["m084"].node.valid_from, at["m084"].node.valid_to) == (1084.0, 1500.0)
            assert at["c-hub"].last_mention_ts == 1099.0  # the newest mention is not a walk
            # from a memory unit: its one mention holds from 5000 on
            assert [c.node.id for c in await graph.expand(u, {"m087": 1.0}, caps, valid_at=AT)] == ["m087"]
            assert [c.node.id for c in await graph.expand(u, {"m087": 1.0}, caps, valid_at=5000.0)] == ["c-hub", "m087"]
    finally:
        await walking.close()
    params = {**_hop_params(u, 5, SPARSE_DEGREE, None, AT), "todo": ["c-hub"]}

    def seeks(plan: dict[str, Any]) -> list[int]:
        own = [plan.get("rows", 0)] if "RelationshipIndexSeek" in plan["operatorType"] else []
        return own + [n for child in plan.get("children", []) for n in seeks(child)]

    # Profiled three times: one run in a full suite (2026-11-26) reported a single seek row for the
    # query's first, freshly planned run, its answer right; a later run of the same plan reports
    # the seeks. No run may read the hub's 101 links through its indexes.
    with raw.session(database="neo4j") as session:
        query = "PROFILE " + _HOP_QUERY
        runs = [seeks(session.run(query, params).consume().profile) for _ in range(3)]
    assert all(sum(rows) < 60 for rows in runs), runs
    # the plan reads the hub through the link order indexes (its seek operators are there)...
    assert all(rows for rows in runs), runs
    # ...and, when the profile counts their rows, reads the 15 mentions that do not hold and the 5
    # after them, and c-x's link: not the hub's 101 links. A full suite run
    # (2026-11-26, CI) saw three runs of one plan count a single seek row each, the answers right:
    # the row counts of a profile are not always kept, so a run without them proves nothing.
    counted = [rows for rows in runs if sum(rows) > 1]
    assert all(20 <= sum(rows) < 60 for rows in counted), runs


async def test_neighbors_keep_what_holds_before_the_limit(store, tenants):
    """A neighbour is left out when its edge or its own interval does not hold at valid_at, before
    the limit: the incoming mentions of a hub (read from mentions_newest up to the limit) and the
    other reads."""
    u = tenants("valid-nb")
    nodes, edges = validity_hub()
    await store.upsert_nodes(u, nodes)
    await store.upsert_edges(u, edges)
    mentioned = await store.neighbors(u, ["c-hub"], EdgeType.MENTIONS, False, 3)
    assert [n.id for n in mentioned["c-hub"]] == ["m099", "m098", "m097"]
    mentioned = await store.neighbors(u, ["c-hub"], EdgeType.MENTIONS, False, 3, valid_at=AT)
    assert [n.id for n in mentioned["c-hub"]] == ["m083", "m082", "m081"]  # m084 itself ended
    assert [n.valid_from for n in mentioned["c-hub"]] == [1083.0, 1082.0, 1081.0]
    as_of = await store.neighbors(u, ["c-hub"], EdgeType.MENTIONS, False, 2, not_after=1082.5, valid_at=AT)
    assert [n.id for n in as_of["c-hub"]] == ["m082", "m081"]
    out = await store.neighbors(u, ["m090", "m080", "m084"], EdgeType.MENTIONS, True, 5, valid_at=AT)
    assert out == {"m090": [], "m080": [nodes[0]], "m084": [nodes[0]]}
    related = await store.neighbors(u, ["c-hub"], EdgeType.RELATED_TO, True, 5)
    assert [n.id for n in related["c-hub"]] == ["c-x"]
    assert await store.neighbors(u, ["c-hub"], EdgeType.RELATED_TO, True, 5, valid_at=AT) == {"c-hub": []}
    assert await store.neighbors(u, ["c-x"], EdgeType.RELATED_TO, False, 5, valid_at=400.0) == {"c-x": [nodes[0]]}


async def test_supersedes_is_stored_read_and_never_walked(store, tenants, raw):
    """SUPERSEDES (successor -> the fact it replaces) is written, listed and deleted like the other
    types and read by neighbors both ways, but expansion never walks it: not from a node with few
    links, nor from a hub (a successor of 70 facts has no link order index of that type), and it
    takes no fan-out."""
    u = tenants("supersedes")
    hub = GraphNode("c-hub", Kind.CONCEPT, "Hub", None, 0.5, "topic")
    new = GraphNode("m-new", Kind.MEMORY_UNIT, "new", 3000.0, 0.5, "note", valid_from=2500.0)
    old = [GraphNode(f"m-old{i:02d}", Kind.MEMORY_UNIT, f"old {i}", 1000.0 + i, 0.5, "note") for i in range(70)]
    doc = GraphNode("a-v2", Kind.ARTIFACT, "design v2", 3100.0, 0.5, "doc")
    await store.upsert_nodes(u, [hub, new, doc, *old])
    edges = [GraphEdge("m-new", "c-hub", EdgeType.MENTIONS, 0.5)]
    edges += [GraphEdge("m-new", m.id, EdgeType.SUPERSEDES, 1.0, valid_from=2500.0) for m in old]
    edges += [GraphEdge("a-v2", "m-old00", EdgeType.SUPERSEDES), GraphEdge("m-old00", "c-hub", EdgeType.MENTIONS)]
    await store.upsert_edges(u, edges)
    listed = {(e.source, e.target, e.type): e for e in await store.edges(u)}
    assert listed[("m-new", "m-old05", EdgeType.SUPERSEDES)] == edges[6]
    assert listed[("m-new", "m-old05", EdgeType.SUPERSEDES)].valid_from == 2500.0
    rows = raw.execute_query(
        "MATCH (s:Entity {user_id: $u, id: 'm-new'})-[r:SUPERSEDES]->(t) RETURN count(r) AS n, min(r.valid_from) AS vf",
        {"u": u},
        database_="neo4j",
    )
    assert (rows.records[0]["n"], rows.records[0]["vf"]) == (70, 2500.0)
    one = ExpansionCaps(depth=2, fanout_per_node=1, max_per_kind=100, hop_decay=0.5)
    for seeds in ({"m-new": 1.0}, {"m-old00": 1.0}, {"a-v2": 1.0}):
        for at in (None, 4000.0):
            found = {c.node.id for c in await store.expand(u, seeds, one, valid_at=at)}
            assert "m-new" not in found - set(seeds) and not {"m-old01", "a-v2"} & (found - set(seeds))
    assert {c.node.id for c in await store.expand(u, {"m-new": 1.0}, one)} == {"m-new", "c-hub", "m-old00"}
    assert [c.node.id for c in await store.expand(u, {"a-v2": 1.0}, one)] == ["a-v2"]
    successors = await store.neighbors(u, ["m-old00", "m-old01", "m-new"], EdgeType.SUPERSEDES, False, 5)
    assert {k: [n.id for n in v] for k, v in successors.items()} == {
        "m-old00": ["a-v2", "m-new"],
        "m-old01": ["m-new"],
        "m-new": [],
    }
    # as of before the successors were written; valid at before m-new's supersession holds
    early = await store.neighbors(u, ["m-old00"], EdgeType.SUPERSEDES, False, 5, not_after=3050.0)
    assert [n.id for n in early["m-old00"]] == ["m-new"]
    before = await store.neighbors(u, ["m-old00"], EdgeType.SUPERSEDES, False, 5, valid_at=2400.0)
    assert [n.id for n in before["m-old00"]] == ["a-v2"]  # m-new and its edge start at 2500; a-v2's are open
    older = await store.neighbors(u, ["m-new"], EdgeType.SUPERSEDES, True, 3)
    assert [n.id for n in older["m-new"]] == ["m-old69", "m-old68", "m-old67"]
    await store.delete_edges(u, [GraphEdge("a-v2", "m-old00", EdgeType.SUPERSEDES)])
    await store.delete_nodes(u, ["m-new"])
    assert not any(e.type is EdgeType.SUPERSEDES for e in await store.edges(u))


async def test_apply_schema_backfills_valid_from_of_older_nodes(store, tenants, raw):
    """Nodes written before HRT wrote valid_from get valid_from = ts when the schema is applied (a
    one-off, run again here once its marker is gone); a node with its own valid_from, or without a
    ts, keeps what it has. With the marker in place applying the schema changes nothing."""
    u = tenants("valid-backfill")
    await store.upsert_nodes(
        u,
        [
            GraphNode("m-legacy", Kind.MEMORY_UNIT, "written by an older HRT", 100.0, 0.5, "note"),
            GraphNode("a-legacy", Kind.ARTIFACT, "an older artifact", 150.0, 0.5, "doc", valid_to=900.0),
            GraphNode("m-own", Kind.MEMORY_UNIT, "with its own", 200.0, 0.5, "note", valid_from=50.0),
            GraphNode("c-open", Kind.CONCEPT, "no ts", None, 0.5, "topic"),
        ],
    )
    before = await store.nodes(u)
    assert before["m-legacy"].valid_from is None and before["a-legacy"].valid_to == 900.0
    raw.execute_query("MATCH (m:HRTSchemaMigration {name: 'valid_from_v1'}) DELETE m", database_="neo4j")
    await store.apply_schema()
    after = await store.nodes(u)
    assert {k: (n.valid_from, n.valid_to) for k, n in after.items()} == {
        "m-legacy": (100.0, None),
        "a-legacy": (150.0, 900.0),
        "m-own": (50.0, None),
        "c-open": (None, None),
    }
    # the valid-at reads see the backfilled start: a neighbour from 100 on
    await store.upsert_edges(u, [GraphEdge("m-legacy", "c-open", EdgeType.MENTIONS)])
    assert await store.neighbors(u, ["c-open"], EdgeType.MENTIONS, False, 5, valid_at=99.0) == {"c-open": []}
    assert await store.neighbors(u, ["c-open"], EdgeType.MENTIONS, False, 5, valid_at=100.0) == {
        "c-open": [after["m-legacy"]]
    }
    marker = raw.execute_query(
        "MATCH (m:HRTSchemaMigration {name: 'valid_from_v1'}) RETURN count(m) AS n", database_="neo4j"
    )
    assert marker.records[0]["n"] == 1
    # applied: the backfill is skipped (a node without valid_from stays so)
    await store.upsert_nodes(u, [replace(after["m-legacy"], valid_from=None)])
    await store.apply_schema()
    assert (await store.nodes(u))["m-legacy"].valid_from is None
