"""The Neo4j backend as the registry lists it: the graph store of the services deployment, run as
a server (behind a circuit, with the record store's reads while it is down)."""

from __future__ import annotations

from hrt.errors import StoreError
from hrt.stores.backend import Backend, Opening
from hrt.stores.base import GraphStore


def _graph(opening: Opening) -> GraphStore:
    from hrt.stores.neo4j.graph import Neo4jGraphStore  # the driver is imported when it is chosen

    s = opening.settings
    if not s.neo4j_uri:
        raise StoreError("HRT_GRAPH_STORE=neo4j needs HRT_NEO4J_URI")
    auth = (s.neo4j_user, s.neo4j_password.get_secret_value()) if s.neo4j_password is not None else None
    return Neo4jGraphStore(s.neo4j_uri, database=s.neo4j_database, auth=auth, expansion=s.neo4j_expansion)


BACKEND = Backend(
    name="neo4j",
    title="Neo4j",
    summary="Neo4j: the graph, walked by HRT's procedure `hrt.expand` or over Cypher",
    roles=frozenset({"graph"}),
    variables=("HRT_NEO4J_URI", "HRT_NEO4J_DATABASE", "HRT_NEO4J_USER", "HRT_NEO4J_PASSWORD", "HRT_NEO4J_EXPANSION"),
    open_graph=_graph,
    behind_server=True,
    dev_service="neo4j",
)
