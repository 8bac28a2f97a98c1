"""The whole neighbourhood of a Neo4j expansion in one Cypher query: the reference the contract
tests walk in Python to hold ``hrt.expand`` and the hop-by-hop Cypher expansion to.

Expansion reads less (only the nodes the walk expands, :data:`hrt.stores.neo4j.queries._HOP`); this
query reads every node of every level, each with its first ``$fanout`` visible links in the visit
order, with the same link reads (``_FIRST_LINKS``) and node rows (``_node_rows``)."""

from __future__ import annotations

from hrt.stores.neo4j.graph import MAX_DEPTH
from hrt.stores.neo4j.queries import _FIRST_LINKS, _node_rows, _user_as_list, _visible

_SEEDS = f"""
UNWIND $seeds AS seed_id
MATCH (s:Entity {{user_id: $user_id, id: seed_id}})
WHERE {_visible("s")}
WITH collect(DISTINCT s) AS level0
WITH level0, [] AS expanded0
"""


def _level(prev: int, this: int) -> str:
    """One level: every node of the previous level not expanded yet (a node reached again at a
    deeper level has the same links) gets its first $fanout visible links; then the distinct nodes
    they reach."""
    return f"""
WITH *, [x IN level{prev} WHERE NOT x IN expanded{prev}] AS todo{prev}
CALL (todo{prev}) {{
  UNWIND todo{prev} AS n
  CALL (n) {{{_FIRST_LINKS}
    RETURN collect([m.id, type(r), r.weight, forward]) AS links, collect(m) AS reached
  }}
  RETURN collect([n.id, links]) AS adjacency{this}, collect(reached) AS nested{this}
}}
CALL (nested{this}) {{
  UNWIND nested{this} AS reached
  UNWIND reached AS m
  RETURN collect(DISTINCT m) AS level{this}
}}
WITH *, expanded{prev} + todo{prev} AS expanded{this}
"""


def expand_query(depth: int) -> str:
    """The whole neighbourhood of ``depth`` levels (0 to 3) in one query: every node of every level
    with its first ``$fanout`` visible links, and every node's row; all values are parameters."""
    if not 0 <= depth <= MAX_DEPTH:
        raise ValueError(f"depth must be 0 to {MAX_DEPTH}, got {depth}")
    parts = [_SEEDS]
    parts += [_level(level - 1, level) for level in range(1, depth + 1)]
    adjacency = " + ".join(f"adjacency{level}" for level in range(1, depth + 1)) or "[]"
    levels = " + ".join(f"level{level}" for level in range(depth + 1))
    parts.append(_node_rows(adjacency, levels))
    return _user_as_list("".join(parts))
