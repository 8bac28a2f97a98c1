"""Neo4j expansion caps per kind at the source: through the procedure (neo4j-plugin/) or the
Cypher query, it reads the links of just the nodes the walk expands (within ``max_per_kind``),
hop by hop, not of every node of every level, and answers what the embedded adapter answers
(issue #22, part 4)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from hrt.devstack import Stack
from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphEdge, GraphNode
from hrt.stores.embedded import EmbeddedStore
from hrt.stores.neo4j_graph import _HOP_QUERY, _PROCEDURE_QUERY, Neo4jGraphStore, _min_key, expand_query
from tests.conftest import StackManager

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
            elif query == _PROCEDURE_QUERY:
                read.extend(len(links) for _, links in result.records[0]["adjacency"])
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
