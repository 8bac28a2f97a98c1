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
from hrt.projection import graph_edge, graph_node
from hrt.records import EDGE_ENDPOINTS, Artifact, Concept, EdgeType, Kind, MemoryUnit, Relation
from hrt.stores.base import WARM_UP_USER, ExpansionCaps, GraphEdge, GraphNode, GraphStore
from hrt.stores.embedded import EmbeddedStore
from hrt.stores.neo4j_graph import Neo4jGraphStore
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
    # then a user's requests: 29 seeds (the 11-100 bucket), 3 shown ids, user ids of every length
    await store.expand(u1, {f"m{i}": 0.5 for i in range(1, 30)}, CAPS)
    await store.neighbors(u1, ["m1", "m2", "m3"], EdgeType.MENTIONS, True, 50)
    for user in ("u", "user-7", "9b2f4c1e-5d6a-4f3b-8c7d-2e1f0a9b8c7d", "x" * 128):
        await store.expand(user, {"m1": 0.5}, ExpansionCaps(3, 25, 100, 0.5))
        await store.neighbors(user, ["m1"], EdgeType.MENTIONS, False, 50)
    cleared = raw.execute_query("CALL db.clearQueryCaches()", database_="neo4j").records[0][0]
    # one plan per query and bucket, each made by the warm-up and found by every request after it:
    # assembly's two neighbour reads for lists of 1, 2-10 and 11-100 ids, and expansion's hops
    # (the procedure's call, or the Cypher expansion's two queries: a hop's links, the result's
    # rows) for those and 101-1000 ids; user ids of 1, 2-10, 11-100 and 101-128 characters share them
    expansions = 1 * 4 if await store.uses_procedure() else 2 * 4
    assert cleared == f"Query caches successfully cleared of {2 * 3 + expansions} queries."
    assert raw.execute_query(count, database_="neo4j").records[0] == nodes_before
    assert await store.ids(WARM_UP_USER) == {}
    assert await store.expand(u1, {"m1": 0.8}, CAPS) == before


async def test_expansion_mode_follows_the_installed_procedure(connect, monkeypatch, caplog):
    """``auto`` uses hrt.expand when Neo4j has it in this adapter's version, else the Cypher query
    (with a warning); ``procedure`` refuses to run without it; ``cypher`` never asks."""
    from hrt.stores import neo4j_graph

    fresh = connect()
    assert fresh.expansion_path == "unknown"  # not asked yet
    assert await fresh.uses_procedure() is True  # the dev stack installs the plugin
    assert fresh.expansion_path == "procedure"
    never = connect(expansion="cypher")
    assert never.expansion_path == "cypher" and await never.uses_procedure() is False
    for adapter in (fresh, never):
        await adapter.close()
    for patch, problem in (
        (("PLUGIN_VERSION", "0"), "version '1', this HRT reads '0'"),
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


@st.composite
def user_graphs(draw: st.DrawFn) -> tuple[list[GraphNode], list[GraphEdge]]:
    """A small graph with many ties (weights, timestamps, saliences), self-loops and opposite
    edges, using the ids n00.. that every user of an example shares."""
    count = draw(st.integers(1, 12))
    nodes = []
    for i in range(count):
        kind = draw(st.sampled_from(KINDS))
        ts = None if kind is Kind.CONCEPT else draw(st.sampled_from(STAMPS))
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
        edges[(source, target, etype)] = GraphEdge(source, target, etype, weight, draw(st.sampled_from([None, "rt"])))
    return nodes, list(edges.values())


@st.composite
def probes(draw: st.DrawFn) -> tuple[dict[str, float], ExpansionCaps, float | None, list[str], EdgeType, bool, int]:
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
    neo4j = connect(expansion="cypher")
    by_index = connect(sparse_degree=0, expansion="cypher")  # every node read as a hub is
    procedure = connect(expansion="procedure")
    procedure_by_index = connect(sparse_degree=0, expansion="procedure")
    run = uuid.uuid4().hex[:10]
    users = [f"t{run}-g{i}" for i in range(len(graphs))]
    try:
        for user_id, (nodes, edges) in zip(users, graphs, strict=True):
            for graph in (embedded_graph.graph, neo4j):
                await graph.upsert_nodes(user_id, nodes)
                await graph.upsert_edges(user_id, edges)
        for user_id in users:
            for seeds, caps, not_after, nb_ids, edge, outgoing, limit in probe_list:
                expected = await embedded_graph.graph.expand(user_id, seeds, caps, not_after)
                assert await neo4j.expand(user_id, seeds, caps, not_after) == expected
                assert await by_index.expand(user_id, seeds, caps, not_after) == expected
                assert await procedure.expand(user_id, seeds, caps, not_after) == expected
                assert await procedure_by_index.expand(user_id, seeds, caps, not_after) == expected
                expected_nb = await embedded_graph.graph.neighbors(user_id, nb_ids, edge, outgoing, limit, not_after)
                assert await neo4j.neighbors(user_id, nb_ids, edge, outgoing, limit, not_after) == expected_nb
    finally:
        for user_id in users:
            await neo4j.delete_user(user_id)
            await embedded_graph.graph.delete_user(user_id)
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
                assert await store.expand(renamed[user_id], seeds, caps, not_after) == expected
        expected_nb = await embedded_graph.graph.neighbors(renamed[user_id], mus, EdgeType.MENTIONS, True, 3)
        assert await store.neighbors(renamed[user_id], mus, EdgeType.MENTIONS, True, 3) == expected_nb


async def test_procedure_returns_what_the_query_returns(connect, tenants):
    """hrt.expand is the expansion query's neighbourhood fetched through Neo4j's Java API: the same
    adjacency (each node's links in visit order) and the same node rows, on the sample graph from
    each user's busiest nodes, at every depth, fan-out and as-of, for sparse and hub reads."""
    from importlib import resources

    from hrt.stores.neo4j_graph import _PROCEDURE_QUERY, _min_key, expand_query

    lines = resources.files("hrt.sample_data").joinpath("sample_graph.jsonl").read_text(encoding="utf-8")
    graph = connect(expansion="cypher")
    await graph.apply_schema()
    compared = 0
    for user_id, (nodes, edges) in projection(parse_jsonl(lines.splitlines())).items():
        u = tenants(user_id)
        await graph.upsert_nodes(u, nodes)
        await graph.upsert_edges(u, edges)
        degree: dict[str, int] = {}
        for e in edges:
            degree[e.source] = degree.get(e.source, 0) + 1
            degree[e.target] = degree.get(e.target, 0) + 1
        busiest = sorted(degree, key=lambda k: (-degree[k], k))
        for depth in range(4):
            for fanout, sparse in ((4, 64), (25, 64), (4, 0), (25, 0)):
                for not_after in (None, 1.75e9, 0.0):
                    params = {
                        "user": [u],
                        "seeds": sorted([*busiest[:3], "ghost"]),
                        "fanout": fanout,
                        "sparse": sparse,
                        "not_after": not_after,
                        "min_key": _min_key(not_after),
                    }
                    by_query = (await graph._run("q", expand_query(depth), params, read=True)).records[0]
                    params["depth"] = depth
                    by_procedure = (await graph._run("p", _PROCEDURE_QUERY, params, read=True)).records[0]
                    assert dict(by_procedure["adjacency"]) == dict(by_query["adjacency"])
                    assert len(by_procedure["adjacency"]) == len(by_query["adjacency"])
                    rows = {row[0]: row for row in by_query["nodes"]}
                    assert {row[0]: row for row in by_procedure["nodes"]} == rows
                    assert len(by_procedure["nodes"]) == len(rows)
                    compared += bool(rows)
    assert compared > 50  # most probes reach something
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
    marker = raw.execute_query("MATCH (m:HRTSchemaMigration) RETURN count(m) AS n", database_="neo4j")
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
    from hrt.stores.neo4j_graph import SPARSE_DEGREE, _min_key, expand_query

    assert len(mus) > SPARSE_DEGREE  # the hub is read from the indexes, not walked
    params = {
        "user": [u],
        "seeds": ["c-hub"],
        "fanout": 5,
        "sparse": SPARSE_DEGREE,
        "not_after": None,
        "min_key": _min_key(None),
    }
    with raw.session(database="neo4j") as session:
        profile = session.run("PROFILE " + expand_query(1), params).consume().profile

    def seeks(plan: dict[str, Any]) -> list[int]:
        own = [plan.get("rows", 0)] if "RelationshipIndexSeek" in plan["operatorType"] else []
        return own + [n for child in plan.get("children", []) for n in seeks(child)]

    rows = seeks(profile)
    # 8 (type, direction) reads of about 5 each and one newest mention, not the hub's 300 links
    # (the bound leaves room for a runtime that reads indexes in batches)
    assert rows and sum(rows) < 150, rows
