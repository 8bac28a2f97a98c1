"""Neo4j expansion caps per kind at the source: through the procedure (neo4j-plugin/, the walk
inside Neo4j, one call) or the Cypher reads (hop by hop, the walk in Python), it reads the links of
just the nodes the walk expands (within ``max_per_kind``), not of every node of every level, and
answers what the embedded adapter answers (issue #22, part 4; issue #36: one call again)."""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from hrt.devstack import Stack
from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphEdge, GraphNode
from hrt.stores.embedded.store import EmbeddedStore
from hrt.stores.neo4j.graph import _HOP_QUERY, _PROCEDURE_QUERY, Neo4jGraphStore, _min_key
from tests.conftest import StackManager
from tests.contract.neo4j_reference import expand_query

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def neo4j_stack(stack_manager: StackManager) -> Stack:
    return stack_manager.need("neo4j")


@pytest.fixture(params=["procedure", "cypher"])
async def neo4j(neo4j_stack: Stack, request: pytest.FixtureRequest) -> AsyncIterator[Neo4jGraphStore]:
    graph = Neo4jGraphStore(neo4j_stack.neo4j_uri, auth=neo4j_stack.neo4j_auth, expansion=request.param)
    await graph.apply_schema()
    yield graph
    await graph.close()


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedStore]:
    store = EmbeddedStore(tmp_path / "cap.db", None)
    yield store
    store.close()


def tree() -> tuple[list[GraphNode], list[GraphEdge]]:
    """A root concept mentioned by 40 memory units, each mentioning 5 concepts of its own, each of
    those mentioned by 10 more memory units: 2,281 nodes, 2,240 mentions."""
    nodes = [GraphNode("r", Kind.CONCEPT, "root", None, 0.5, "topic")]
    edges: list[GraphEdge] = []
    for i in range(40):
        m = f"m{i:02d}"
        nodes.append(GraphNode(m, Kind.MEMORY_UNIT, m, 1000.0 + i, 0.5, "note"))
        edges.append(GraphEdge(m, "r", EdgeType.MENTIONS))
        for j in range(5):
            c = f"c{i:02d}-{j}"
            nodes.append(GraphNode(c, Kind.CONCEPT, c, None, 0.5, "topic"))
            edges.append(GraphEdge(m, c, EdgeType.MENTIONS))
            for k in range(10):
                n = f"n{i:02d}-{j}-{k}"
                nodes.append(GraphNode(n, Kind.MEMORY_UNIT, n, 2000.0 + k, 0.5, "note"))
                edges.append(GraphEdge(n, c, EdgeType.MENTIONS))
    return nodes, edges


async def test_expansion_reads_only_what_the_per_kind_cap_lets_the_walk_expand(neo4j, embedded):
    user = f"cap-{uuid.uuid4().hex[:10]}"
    nodes, edges = tree()
    try:
        for graph in (neo4j, embedded.graph):
            await graph.upsert_nodes(user, nodes)
            await graph.upsert_edges(user, edges)
        caps = ExpansionCaps(depth=3, fanout_per_node=25, max_per_kind=10, hop_decay=0.6)

        read: list[int] = []
        run = neo4j._run

        async def counting(action: str, query: str, params: dict[str, Any], **kw: Any) -> Any:
            result = await run(action, query, params, **kw)
            if query == _HOP_QUERY:  # a hop's links
                read.extend(len(rec["links"]) for rec in result.records)
            elif query == _PROCEDURE_QUERY:  # the links the walk read inside Neo4j
                read.append(result.records[0]["read"])
            return result

        neo4j._run = counting  # type: ignore[method-assign]
        found = await neo4j.expand(user, {"r": 1.0}, caps)
        neo4j._run = run  # type: ignore[method-assign]
        assert found == await embedded.graph.expand(user, {"r": 1.0}, caps)
        assert sum(1 for c in found if c.node.kind is Kind.MEMORY_UNIT) == 10
        assert read, "no links were read through the expansion path under test"

        # every level's links, as the one-query expansion and the procedure fetch them
        params = {"user": [user], "seeds": ["r"], "fanout": 25, "sparse": 64, "not_after": None, "valid_at": None}
        whole = (await run("q", expand_query(3), {**params, "min_key": _min_key(None)}, read=True)).records[0]
        fetched_whole = sum(len(links) for _, links in whole["adjacency"])
        # root 25 links + 10 memory units x 6 + 10 concepts x 11, against 25 + 25 x 6 + 125 x 11
        assert sum(read) <= 200 < 1000 <= fetched_whole, (sum(read), fetched_whole)
    finally:
        await neo4j.delete_user(user)


def tied_graph(rng: random.Random) -> tuple[list[GraphNode], list[GraphEdge]]:
    """A random graph full of ties: weights of 0.5 or 1.0, memory units of three timestamps (and
    none), so that scores, visit keys and frontier orders tie and only ids break them; dense
    enough that a cap of a few nodes per kind binds within three hops."""
    concepts = [f"c{i:02d}" for i in range(14)]
    units = [f"m{i:02d}" for i in range(18)]
    artifacts = [f"a{i}" for i in range(4)]
    nodes = [GraphNode(c, Kind.CONCEPT, c, None, 0.5, "topic") for c in concepts]
    nodes += [GraphNode(m, Kind.MEMORY_UNIT, m, rng.choice([100.0, 200.0, 300.0, None]), 0.5, "note") for m in units]
    nodes += [GraphNode(a, Kind.ARTIFACT, a, rng.choice([150.0, 250.0]), 0.5, "summary") for a in artifacts]
    edges: dict[tuple[str, str, EdgeType], GraphEdge] = {}

    def add(source: str, target: str, edge: EdgeType) -> None:
        edges[(source, target, edge)] = GraphEdge(source, target, edge, rng.choice([0.5, 1.0, 1.0]))

    for m in units:
        for c in rng.sample(concepts, 3):
            add(m, c, EdgeType.MENTIONS)
    for _ in range(12):
        add(rng.choice(concepts), rng.choice(concepts), EdgeType.RELATED_TO)  # self-loops too
    for _ in range(10):
        add(rng.choice(units), rng.choice(units), EdgeType.FOLLOWS)
    for a in artifacts:
        add(a, rng.choice(units), EdgeType.DERIVED_FROM)
        add(a, rng.choice(concepts), EdgeType.DERIVED_FROM)
    return nodes, list(edges.values())


@pytest.fixture
async def both(neo4j_stack: Stack) -> AsyncIterator[tuple[Neo4jGraphStore, Neo4jGraphStore]]:
    procedure = Neo4jGraphStore(neo4j_stack.neo4j_uri, auth=neo4j_stack.neo4j_auth, expansion="procedure")
    cypher = Neo4jGraphStore(neo4j_stack.neo4j_uri, auth=neo4j_stack.neo4j_auth, expansion="cypher")
    await procedure.apply_schema()
    yield procedure, cypher
    await procedure.close()
    await cypher.close()


async def test_the_procedure_walks_exactly_as_the_python_walk(both, embedded):
    """hrt.expand's walk inside Neo4j is graph_walk.walk: on graphs where scores, timestamps and
    weights tie and the per-kind cap binds, at depth 3, the procedure's candidates equal (==, float
    scores and paths included) those of the Python walk over the Cypher reads, and the embedded
    adapter's."""
    procedure, cypher = both
    users = [f"tie-{uuid.uuid4().hex[:10]}-{k}" for k in range(4)]
    cap_bound = tied = 0
    try:
        for k, user in enumerate(users):
            rng = random.Random(k)
            nodes, edges = tied_graph(rng)
            for graph in (procedure, embedded.graph):
                await graph.upsert_nodes(user, nodes)
                await graph.upsert_edges(user, edges)
            ids = [n.id for n in nodes]
            for probe in range(6):
                seeds = {ident: rng.choice([0.5, 0.9, 0.9]) for ident in rng.sample(ids, rng.randint(1, 4))}
                caps = ExpansionCaps(
                    depth=rng.choice([3, 3, 2, 1]),
                    fanout_per_node=rng.choice([2, 3, 5, 25]),
                    max_per_kind=rng.choice([2, 3, 4, 100]),
                    hop_decay=rng.choice([0.5, 0.6, 0.7]),
                )
                not_after = rng.choice([None, None, 250.0, 150.0])
                by_procedure = await procedure.expand(user, seeds, caps, not_after)
                by_cypher = await cypher.expand(user, seeds, caps, not_after)
                assert by_procedure == by_cypher, (user, probe, seeds, caps, not_after)
                assert by_procedure == await embedded.graph.expand(user, seeds, caps, not_after)
                admitted: dict[Kind, int] = {}
                for c in by_procedure:
                    if c.node.id not in seeds:
                        admitted[c.node.kind] = admitted.get(c.node.kind, 0) + 1
                cap_bound += caps.depth == 3 and max(admitted.values(), default=0) == caps.max_per_kind
                scores = [c.path_score for c in by_procedure if c.hops > 0]
                tied += len(scores) > len(set(scores))
        assert cap_bound >= 3 and tied >= 10, (cap_bound, tied)  # the cases this test is about occurred
    finally:
        for user in users:
            await procedure.delete_user(user)
            await embedded.graph.delete_user(user)


async def test_expansion_by_the_procedure_is_one_query(both):
    """With hrt.expand, an expansion is one round trip to Neo4j at every depth (the Cypher reads
    take one per hop, then one for the rows)."""
    procedure, cypher = both
    user = f"one-{uuid.uuid4().hex[:10]}"
    nodes, edges = tree()
    try:
        await procedure.upsert_nodes(user, nodes)
        await procedure.upsert_edges(user, edges)
        assert await procedure.uses_procedure() is True  # asked once, before counting
        for graph in (procedure, cypher):
            queries: list[str] = []
            run = graph._run

            async def counting(
                action: str, query: str, params: dict[str, Any], run: Any = run, queries: list[str] = queries, **kw: Any
            ) -> Any:
                queries.append(query)
                return await run(action, query, params, **kw)

            graph._run = counting  # type: ignore[method-assign]
            for depth in range(4):
                caps = ExpansionCaps(depth=depth, fanout_per_node=25, max_per_kind=10, hop_decay=0.6)
                queries.clear()
                found = await graph.expand(user, {"r": 1.0, "m03": 0.8}, caps)
                assert len(found) > (depth > 0)
                if graph is procedure:
                    assert queries == [_PROCEDURE_QUERY], depth
                else:
                    assert len(queries) == max(depth, 1) + 1, depth
            graph._run = run  # type: ignore[method-assign]
    finally:
        await procedure.delete_user(user)
