"""The Cypher of the Neo4j graph store: the write statements, the expansion queries (by hops, and the
call of the ``hrt.expand`` procedure), the neighbour reads, and the functions that build them. The
projection they read and write is described in :mod:`hrt.stores.neo4j.graph`."""

from __future__ import annotations

import math
from typing import Any

from hrt.records import WALKED_EDGES, EdgeType, Kind

# Built one way: f-strings, with the fragments that recur made by the functions below from the
# variable they apply to; every value is a parameter ($...), only schema tokens vary.


def _visible(v: str) -> str:
    """Node ``v`` is visible as of $not_after (one without a ts always is)."""
    return f"($not_after IS NULL OR {v}.ts IS NULL OR {v}.ts <= $not_after)"


def _holds(v: str) -> str:
    """The node's or relationship's own interval holds at $valid_at (valid_from included, valid_to
    excluded, an absent end open; every interval holds without $valid_at: each comparison with null
    is null). No OR, so it stays a filter on top of an ordered index seek."""
    return f"coalesce({v}.valid_from <= $valid_at, true) AND coalesce($valid_at < {v}.valid_to, true)"


def _node_fields(v: str) -> str:
    """A node's row (:func:`_node`'s columns)."""
    return (
        f"[{v}.id, {v}.kind, {v}.label, {v}.ts, {v}.salience, {v}.category, {v}.tags, {v}.source_agent_id, "
        f"{v}.valid_from, {v}.valid_to]"
    )


def _key_visible(k: str, end: str) -> str:
    """A link key ``k`` (``sts``/``tts``: -ts of the other end ``end``, 0.0 without one) is visible
    as of $not_after when k >= $min_key (= -$not_after, or -inf without one), or when the other end
    has no ts at all (k = 0.0 then, which the first test misses only for a $not_after before 1970).
    A CASE, not an OR: the planner would split an OR into two index seeks and lose the index order."""
    return f"CASE WHEN r.{k} >= $min_key THEN true ELSE r.{k} = 0.0 AND {end}.ts IS NULL END"


# A node whose ts changes re-keys its relationships (sts where it is the source, tts where it is
# the target); a new node has none, an unchanged one (every concept: no ts) is skipped.
_UPSERT_NODES = """
UNWIND $rows AS row
MERGE (n:Entity {user_id: $user_id, id: row.id})
WITH n, row, n.ts AS old_ts
REMOVE n:MemoryUnit:Concept:DerivedArtifact
SET n:$(row.node_label)
SET n.kind = row.kind, n.label = row.label, n.name = row.name, n.title = row.title, n.ts = row.ts,
    n.salience = row.salience, n.category = row.category, n.tags = row.tags,
    n.source_agent_id = row.source_agent_id, n.valid_from = row.valid_from, n.valid_to = row.valid_to
WITH n, old_ts, row.ts AS new_ts
WHERE (old_ts IS NULL) <> (new_ts IS NULL) OR old_ts <> new_ts
CALL (n) {
  MATCH (n)-[r]->()
  SET r.sts = 0.0 - coalesce(n.ts, 0.0)
}
CALL (n) {
  MATCH (n)<-[r]-()
  SET r.tts = 0.0 - coalesce(n.ts, 0.0)
}
"""

_DELETE_NODES = """
UNWIND $ids AS ident
MATCH (n:Entity {user_id: $user_id, id: ident})
DETACH DELETE n
"""

# Edges need both ends: an edge whose endpoint is not projected yet is skipped (and logged); the
# projector writes entities before the relations of the same batch. The link order keys
# (graph_schema/003_link_order.cypher) are written with the edge, reading the ends' ts only once
# the edge is locked (by its first SET, or by MERGE when it is created), so a concurrent ts change
# of an end (_UPSERT_NODES, which re-keys under the same locks) cannot leave a stale key behind.
_UPSERT_EDGES = """
UNWIND $rows AS row
MATCH (s:Entity {user_id: $user_id, id: row.source})
MATCH (t:Entity {user_id: $user_id, id: row.target})
MERGE (s)-[r:$(row.type)]->(t)
SET r.user_id = $user_id, r.weight = row.weight, r.relation_type = row.relation_type,
    r.valid_from = row.valid_from, r.valid_to = row.valid_to
WITH r, row
SET r.sid = startNode(r).id, r.tid = endNode(r).id, r.nw = 0.0 - row.weight,
    r.sts = 0.0 - coalesce(startNode(r).ts, 0.0), r.tts = 0.0 - coalesce(endNode(r).ts, 0.0)
RETURN count(r) AS written
"""

_DELETE_EDGES = """
UNWIND $rows AS row
MATCH (:Entity {user_id: $user_id, id: row.source})-[r]->(:Entity {user_id: $user_id, id: row.target})
WHERE type(r) = row.type
DELETE r
"""

_DELETE_USER = """
MATCH (n:Entity {user_id: $user_id})
CALL (n) { DETACH DELETE n } IN TRANSACTIONS OF 1000 ROWS
"""

_IDS = "MATCH (n:Entity {user_id: $user_id}) RETURN n.id AS id, n.kind AS kind"
_EDGES = (
    "MATCH (s:Entity {user_id: $user_id})-[r]->(t:Entity {user_id: $user_id}) RETURN s.id AS source, "
    "t.id AS target, type(r) AS type, r.weight AS weight, r.relation_type AS relation_type, "
    "r.valid_from AS valid_from, r.valid_to AS valid_to "
    "ORDER BY source, target, type"
)

_ALL_NODES = f"MATCH (n:Entity {{user_id: $user_id}}) RETURN {_node_fields('n')} AS row"


def _seek(edge: EdgeType, outgoing: bool) -> str:
    """The first $fanout visible links of node ``nid`` along one edge type and direction, in visit
    order, read from that pair's link order index (a link whose interval does not hold at
    $valid_at is skipped before the cut: the seek reads on until it has $fanout that hold)."""
    me, other, key = ("sid", "tid", "tts") if outgoing else ("tid", "sid", "sts")
    end = "endNode(r)" if outgoing else "startNode(r)"
    visible = _key_visible(key, end)
    return f"""
      MATCH ()-[r:{edge.value}]->()
      USING INDEX r:{edge.value}(user_id, {me}, nw, {key}, {other})
      WHERE r.user_id = $user_id AND r.{me} = nid AND r.nw IS NOT NULL AND r.{key} IS NOT NULL
        AND r.{other} IS NOT NULL AND {visible} AND {_holds("r")}
      WITH r ORDER BY r.user_id, r.{me}, r.nw, r.{key}, r.{other} LIMIT $fanout
      RETURN r, {end} AS m, {"true" if outgoing else "false"} AS forward"""


# SUPERSEDES links two versions of one fact: never walked (WALKED_EDGES)
_LINKS = "\n      UNION ALL".join(_seek(edge, outgoing) for edge in WALKED_EDGES for outgoing in (True, False))

_TYPES = "|".join(edge.value for edge in WALKED_EDGES)


def _walk_links(outgoing: bool) -> str:
    """Every visible link of node ``n`` in one direction, read by walking its relationships."""
    pattern, key, other = (
        (f"(n)-[r:{_TYPES}]->(m)", "tts", "tid") if outgoing else (f"(n)<-[r:{_TYPES}]-(m)", "sts", "sid")
    )
    visible = _key_visible(key, "m")
    return f"""
      WITH n, degree WHERE degree <= $sparse
      MATCH {pattern}
      WHERE r.user_id = $user_id AND r.nw IS NOT NULL AND r.{key} IS NOT NULL AND r.{other} IS NOT NULL AND {visible}
        AND {_holds("r")}
      RETURN r, m, {"true" if outgoing else "false"} AS forward"""


def _node_rows(adjacency: str, levels: str) -> str:
    """Every node of ``levels`` (a list of nodes) with its attributes; a memory unit's mentioned
    concepts (in visit order), a concept's newest visible mentioning memory unit (the first of
    mentions_newest, newest first); returned with ``adjacency``."""
    return f"""
WITH {adjacency} AS adjacency, {levels} AS fetched
CALL (fetched) {{
  UNWIND fetched AS x
  WITH DISTINCT x
  WITH x, x.id AS xid, x.kind AS kind
  RETURN collect([xid, kind, x.label, x.ts, x.salience, x.category, x.tags, x.source_agent_id,
    x.valid_from, x.valid_to,
    CASE WHEN kind = '{Kind.MEMORY_UNIT.value}' THEN COLLECT {{
      MATCH (x)-[r:MENTIONS]->(:Entity)
      WHERE r.user_id = $user_id
      WITH r ORDER BY r.nw, r.tts, r.tid
      RETURN r.tid
    }} ELSE [] END,
    CASE WHEN kind = '{Kind.CONCEPT.value}' THEN COLLECT {{
      MATCH ()-[r:MENTIONS]->()
      USING INDEX r:MENTIONS(user_id, tid, sts)
      WHERE r.user_id = $user_id AND r.tid = xid AND r.sts >= $min_key
      WITH r ORDER BY r.user_id, r.tid, r.sts
      WITH startNode(r) AS u
      WHERE u.ts IS NOT NULL AND ($not_after IS NULL OR u.ts <= $not_after)
      RETURN u.ts LIMIT 1
    }}[0] END]) AS nodes
}}
RETURN adjacency, nodes
"""


# The Cypher expansion, hop by hop: the links of just the nodes the walk expands next (its
# frontier, which the per-kind cap bounds at seeds + 3 x max_per_kind nodes), each node's first
# $fanout visible links in the visit order of graph_walk (a node with at most $sparse relationships,
# most of them, has them walked; a hub's come merged from its 8 (type, direction) index reads, each
# cut at $fanout: both give the same first links), with the reached nodes' attributes; then
# (_ROWS), for the walk's result only, what candidates carry (a memory unit's mentions, a concept's
# newest mention). Both directions are read separately so a self-loop yields its two ends, as in
# the embedded adjacency.
_FIRST_LINKS = f"""
  WITH n, n.id AS nid, COUNT {{ (n)--() }} AS degree
  CALL (n, nid, degree) {{{_walk_links(True)}
    UNION ALL{_walk_links(False)}
    UNION ALL
    WITH nid, degree WHERE degree > $sparse
    CALL (nid) {{{_LINKS}
    }}
    RETURN r, m, forward
  }}
  WITH r, m, forward
  ORDER BY r.nw, CASE WHEN forward THEN r.tts ELSE r.sts END, CASE WHEN forward THEN r.tid ELSE r.sid END,
           type(r), r.sid, r.tid, forward DESC
  LIMIT $fanout"""

_HOP = f"""
UNWIND $todo AS ident
MATCH (n:Entity {{user_id: $user_id, id: ident}})
CALL (n) {{{_FIRST_LINKS}
  RETURN collect([m.id, type(r), r.weight, forward]) AS links, collect({_node_fields("m")}) AS reached
}}
RETURN {_node_fields("n")} AS node, links, reached
"""

_ROWS = """
UNWIND $ids AS ident
MATCH (s:Entity {user_id: $user_id, id: ident})
WITH collect(s) AS level0
""" + _node_rows("[]", "level0")


def _hop_params(
    user_id: str, fanout: int, sparse: int, not_after: float | None, valid_at: float | None = None
) -> dict[str, Any]:
    """The parameters of _HOP but its ``todo`` ids."""
    return {
        "user": [user_id],
        "fanout": max(fanout, 0),
        "sparse": sparse,
        "not_after": not_after,
        "min_key": _min_key(not_after),
        "valid_at": _float_or_none(valid_at),
    }


# The whole expansion in one call: graph_walk.walk run inside Neo4j, the walk's result (per node
# reached: id, score, hops, seed, path as [type, id, forward] steps, first hop) and those nodes'
# rows (_node_rows's columns); ``read``, the number of links it read, is for tests
_PROCEDURE = """
CALL hrt.expand($user_id, $seeds, $scores, $depth, $fanout, $max_per_kind, $hop_decay, $sparse, $not_after, $valid_at)
YIELD walk, nodes, read
RETURN walk, nodes, read
"""
_PLUGIN_VERSION_QUERY = "RETURN hrt.version() AS version"


# a neighbour and the relationship to it both hold at $valid_at (always without one)
_NEIGHBOR_HOLDS = f"{_holds('m')} AND {_holds('r')}"


def _neighbors(pattern: str) -> str:
    """The neighbours of each of $ids along ``pattern`` (a relationship pattern), newest first."""
    return f"""
UNWIND $ids AS ident
CALL (ident) {{
  MATCH (:Entity {{user_id: $user_id, id: ident}}){pattern}(m:Entity {{user_id: $user_id}})
  WHERE {_visible("m")} AND {_NEIGHBOR_HOLDS}
  WITH m ORDER BY coalesce(m.ts, 0.0) DESC, m.salience DESC, m.id LIMIT $limit
  RETURN collect({_node_fields("m")}) AS found
}}
RETURN ident, found
"""


# A concept's mentioning memory units (the hub case), newest first: mentions_newest gives them in
# -ts order, so the first $limit visible ones (that hold at $valid_at, with their mention) fix the
# oldest key that can make the cut (``bound``); only the entries up to it (the ties at it
# included) are read and ordered in full.
_MENTIONED_BY = f"""
UNWIND $ids AS ident
CALL (ident) {{
  CALL (ident) {{
    MATCH ()-[r:MENTIONS]->()
    USING INDEX r:MENTIONS(user_id, tid, sts)
    WHERE r.user_id = $user_id AND r.tid = ident AND r.sts IS NOT NULL
      AND {_key_visible("sts", "startNode(r)")}
      AND {_holds("r")} AND {_holds("startNode(r)")}
    WITH r ORDER BY r.user_id, r.tid, r.sts LIMIT $limit
    RETURN max(r.sts) AS bound
  }}
  MATCH ()-[r:MENTIONS]->()
  USING INDEX r:MENTIONS(user_id, tid, sts)
  WHERE r.user_id = $user_id AND r.tid = ident AND r.sts <= bound
    AND {_key_visible("sts", "startNode(r)")}
    AND {_holds("r")} AND {_holds("startNode(r)")}
  WITH startNode(r) AS m
  ORDER BY coalesce(m.ts, 0.0) DESC, m.salience DESC, m.id LIMIT $limit
  RETURN collect({_node_fields("m")}) AS found
}}
RETURN ident, found
"""


# The successors of many facts at once (retrieval asks for every candidate's): one seek of the
# supersedes_in index (006_supersedes_in.cypher) with the whole list of ids, rows only for the facts
# that have a successor, instead of a node match per id.
_SUPERSEDED_BY = f"""
MATCH ()-[r:SUPERSEDES]->()
USING INDEX r:SUPERSEDES(user_id, tid)
WHERE r.user_id = $user_id AND r.tid IN $ids
WITH r, startNode(r) AS m
WHERE m.user_id = $user_id AND {_visible("m")} AND {_NEIGHBOR_HOLDS}
WITH r.tid AS ident, m ORDER BY ident, coalesce(m.ts, 0.0) DESC, m.salience DESC, m.id
WITH ident, collect({_node_fields("m")}) AS found
RETURN ident, found[0..$limit] AS found
"""


def _user_as_list(text: str) -> str:
    """A retrieval read with its user id taken from ``$user``, a list of that one id.

    Neo4j keys its plan cache on the size bucket of each string and list parameter (1, 2-10,
    11-100, 101-1000 characters or elements). A user id passed as a string would give each query
    one plan per length bucket of user ids, each planned on the first request that falls in it
    (1 to 4 s of planning) or by the warm-up (4 times the plans, most of ``/readyz``'s wait on a
    fresh Neo4j). A list of one string is always in the bucket of size 1, whatever the id's length,
    and ``$user[0]`` is a constant to the planner, so the index seeks stay (tested)."""
    return text.replace("$user_id", "$user[0]")


_PROCEDURE_QUERY = _user_as_list(_PROCEDURE)
_HOP_QUERY = _user_as_list(_HOP)
_ROWS_QUERY = _user_as_list(_ROWS)

_NEIGHBOR_QUERIES: dict[tuple[EdgeType, bool], str] = {
    (edge, outgoing): _user_as_list(_neighbors(f"-[r:{edge.value}]->" if outgoing else f"<-[r:{edge.value}]-"))
    for edge in EdgeType  # SUPERSEDES too: incoming, the successors of an old fact
    for outgoing in (True, False)
}
_NEIGHBOR_QUERIES[(EdgeType.MENTIONS, False)] = _user_as_list(_MENTIONED_BY)
_NEIGHBOR_QUERIES[(EdgeType.SUPERSEDES, False)] = _user_as_list(_SUPERSEDED_BY)


def _min_key(not_after: float | None) -> float:
    """The smallest visible link key as of ``not_after`` (see :func:`_key_visible`)."""
    return -math.inf if not_after is None else 0.0 - float(not_after)


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)
