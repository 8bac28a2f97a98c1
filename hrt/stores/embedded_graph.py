"""GraphStore over the embedded SQLite file, with a per-user in-memory adjacency cache.

A user's graph is loaded in two queries on first use and dropped when a write touches that user,
so expansion runs without any query. It is held as arrays, not objects: node ``i`` is the ``i``-th
id in sorted order (so comparing indices compares ids), and the links of every node sit in one
CSR layout already in the walk's visit order (:func:`hrt.stores.graph_walk.link_order`), computed
with one ``numpy.lexsort`` at load; a second permutation holds them in
:func:`~hrt.stores.graph_walk.neighbour_order` per (node, edge type, direction) for
:meth:`neighbors`. :class:`~hrt.stores.base.GraphNode` and
:class:`~hrt.stores.graph_walk.Link` objects are made only for what a request touches, and the
walk stops reading a hub's links after its fan-out cap, so a concept with 40,000 mentions costs
what one with 4 does. The walk itself is :func:`hrt.stores.graph_walk.expand_graph`, shared with
the Neo4j adapter.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np

from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphEdge, GraphNode
from hrt.stores.graph_walk import Link, expand_graph, visible

if TYPE_CHECKING:
    from hrt.stores.embedded import EmbeddedStore

# Edge types coded in the order of their values, so comparing codes compares values (link_order).
EDGE_TYPES: list[EdgeType] = sorted(EdgeType, key=lambda e: e.value)
EDGE_CODE: dict[EdgeType, int] = {e: i for i, e in enumerate(EDGE_TYPES)}
MENTIONS = EDGE_CODE[EdgeType.MENTIONS]


class _UserGraph:
    """One user's graph as arrays (see the module docstring)."""

    def __init__(self, node_rows: list[tuple[object, ...]], edge_rows: list[tuple[object, ...]]) -> None:
        node_rows.sort(key=lambda r: str(r[0]))
        self.rows = node_rows
        self.ids: list[str] = [str(r[0]) for r in node_rows]
        self.index: dict[str, int] = {ident: i for i, ident in enumerate(self.ids)}
        n = len(self.ids)
        self.ts = np.array([np.nan if r[3] is None else r[3] for r in node_rows], dtype=np.float64)
        salience = np.array([r[4] for r in node_rows], dtype=np.float64)
        self._nodes: dict[int, GraphNode] = {}

        index = self.index
        ends = [(index.get(str(s)), index.get(str(t)), EDGE_CODE[EdgeType(str(e))], w) for s, t, e, w in edge_rows]
        ends = [x for x in ends if x[0] is not None and x[1] is not None]  # an edge needs both ends
        m = len(ends)
        src = np.fromiter((x[0] for x in ends), dtype=np.int64, count=m)
        dst = np.fromiter((x[1] for x in ends), dtype=np.int64, count=m)
        code = np.fromiter((x[2] for x in ends), dtype=np.int8, count=m)
        weight = np.fromiter((x[3] for x in ends), dtype=np.float64, count=m)
        # Every edge seen from both ends: first as forward links of sources, then as backward ones.
        node = np.concatenate([src, dst])
        other = np.concatenate([dst, src])
        code2 = np.concatenate([code, code])
        weight2 = np.concatenate([weight, weight])
        forward = np.concatenate([np.ones(m, dtype=bool), np.zeros(m, dtype=bool)])
        source = np.concatenate([src, src])
        target = np.concatenate([dst, dst])
        ts0 = np.nan_to_num(self.ts, nan=0.0)
        # link_order: -weight, -(other's ts or 0), other id, edge type, source, target, forward first
        visit = np.lexsort((~forward, target, source, code2, other, -ts0[other], -weight2, node))
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(node, minlength=n), out=self.offsets[1:])
        self.other = other[visit]
        self.code = code2[visit]
        self.weight = weight2[visit]
        self.forward = forward[visit]
        # neighbour_order within (node, edge type, direction): newest, most salient, id
        by_kind = np.lexsort((other, -salience[other], -ts0[other], ~forward, code2, node))
        self.n_other = other[by_kind]
        self.n_key = node[by_kind] * 16 + code2[by_kind].astype(np.int64) * 2 + (~forward[by_kind])
        self.nodes = _Nodes(self)
        self.adjacency = _Adjacency(self)
        self.mentions = _Mentions(self)

    def node(self, i: int) -> GraphNode:
        found = self._nodes.get(i)
        if found is None:
            r = self.rows[i]
            found = GraphNode(
                id=str(r[0]),
                kind=Kind(str(r[1])),
                label=str(r[2]),
                ts=None if r[3] is None else float(r[3]),  # type: ignore[arg-type]
                salience=float(r[4]),  # type: ignore[arg-type]
                category=str(r[5]),
                tags=tuple(json.loads(str(r[6]))),
                source_agent_id=None if r[7] is None else str(r[7]),
            )
            self._nodes[i] = found  # benign race: two threads build equal objects
        return found

    def last_mentions(self, not_after: float | None) -> _LastMentions:
        return _LastMentions(self, not_after)


class _Nodes(Mapping[str, GraphNode]):
    def __init__(self, graph: _UserGraph) -> None:
        self._g = graph

    def __getitem__(self, key: str) -> GraphNode:
        return self._g.node(self._g.index[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._g.ids)

    def __len__(self) -> int:
        return len(self._g.ids)


class _Links(Sequence[Link]):
    """A node's links in visit order, made into :class:`Link` objects only as they are read."""

    def __init__(self, graph: _UserGraph, start: int, stop: int) -> None:
        self._g, self._start, self._stop = graph, start, stop

    def _link(self, j: int) -> Link:
        g = self._g
        return Link(g.ids[int(g.other[j])], EDGE_TYPES[int(g.code[j])], float(g.weight[j]), bool(g.forward[j]))

    def __len__(self) -> int:
        return self._stop - self._start

    @overload
    def __getitem__(self, i: int) -> Link: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[Link]: ...
    def __getitem__(self, i: int | slice) -> Link | Sequence[Link]:
        if isinstance(i, slice):
            return [self._link(self._start + j) for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self._link(self._start + (i % len(self)))

    def __iter__(self) -> Iterator[Link]:
        for j in range(self._start, self._stop):
            yield self._link(j)


class _Adjacency(Mapping[str, Sequence[Link]]):
    def __init__(self, graph: _UserGraph) -> None:
        self._g = graph

    def __getitem__(self, key: str) -> Sequence[Link]:
        i = self._g.index[key]
        start, stop = int(self._g.offsets[i]), int(self._g.offsets[i + 1])
        if start == stop:
            raise KeyError(key)
        return _Links(self._g, start, stop)

    def __iter__(self) -> Iterator[str]:
        return (ident for i, ident in enumerate(self._g.ids) if self._g.offsets[i + 1] > self._g.offsets[i])

    def __len__(self) -> int:
        return int(np.count_nonzero(np.diff(self._g.offsets)))


class _Mentions(Mapping[str, tuple[str, ...]]):
    """A memory unit's mentioned concepts, in visit order."""

    def __init__(self, graph: _UserGraph) -> None:
        self._g = graph

    def __getitem__(self, key: str) -> tuple[str, ...]:
        g = self._g
        i = g.index[key]
        s, e = int(g.offsets[i]), int(g.offsets[i + 1])
        picked = g.other[s:e][(g.code[s:e] == MENTIONS) & g.forward[s:e]]
        return tuple(g.ids[int(j)] for j in picked)

    def __iter__(self) -> Iterator[str]:
        return iter(self._g.ids)

    def __len__(self) -> int:
        return len(self._g.ids)


class _LastMentions(Mapping[str, float | None]):
    """A concept's newest mentioning memory unit's timestamp as of ``not_after``."""

    def __init__(self, graph: _UserGraph, not_after: float | None) -> None:
        self._g, self._not_after = graph, not_after

    def __getitem__(self, key: str) -> float | None:
        g = self._g
        i = g.index[key]
        s, e = int(g.offsets[i]), int(g.offsets[i + 1])
        stamps = g.ts[g.other[s:e][(g.code[s:e] == MENTIONS) & ~g.forward[s:e]]]
        stamps = stamps[~np.isnan(stamps)]
        if self._not_after is not None:
            stamps = stamps[stamps <= self._not_after]
        return float(stamps.max()) if stamps.size else None

    def __iter__(self) -> Iterator[str]:
        return iter(self._g.ids)

    def __len__(self) -> int:
        return len(self._g.ids)


class EmbeddedGraphStore:
    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store
        self._cache: dict[str, _UserGraph] = {}
        self._cache_lock = threading.Lock()

    def invalidate(self, user_id: str) -> None:
        with self._cache_lock:
            self._cache.pop(user_id, None)

    def _graph(self, user_id: str) -> _UserGraph:
        with self._cache_lock:
            cached = self._cache.get(user_id)
        if cached is not None:
            return cached
        with self._store.lock:
            node_rows = self._store.db.execute(
                "SELECT id, kind, label, ts, salience, category, tags, source_agent_id FROM nodes WHERE user_id = ?",
                (user_id,),
            ).fetchall()
            edge_rows = self._store.db.execute(
                "SELECT source, target, type, weight FROM edges WHERE user_id = ?", (user_id,)
            ).fetchall()
        graph = _UserGraph(node_rows, edge_rows)
        with self._cache_lock:
            self._cache[user_id] = graph
        return graph

    def warm(self, user_id: str) -> None:
        """Load the user's graph now rather than on the first request."""
        self._graph(user_id)

    # --- writes (used by the projector; the embedded store writes these tables in apply()) ---

    async def upsert_nodes(self, user_id: str, nodes: Sequence[GraphNode]) -> None:
        with self._store.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        user_id,
                        n.id,
                        n.kind.value,
                        n.label,
                        n.ts,
                        n.salience,
                        n.category,
                        json.dumps(sorted(n.tags)),
                        n.source_agent_id,
                    )
                    for n in nodes
                ],
            )
        self.invalidate(user_id)

    async def delete_nodes(self, user_id: str, ids: Sequence[str]) -> None:
        with self._store.transaction() as db:
            for ident in ids:
                db.execute("DELETE FROM nodes WHERE user_id = ? AND id = ?", (user_id, ident))
                db.execute(
                    "DELETE FROM edges WHERE user_id = ? AND (source = ? OR target = ?)", (user_id, ident, ident)
                )
        self.invalidate(user_id)

    async def upsert_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None:
        with self._store.transaction() as db:
            db.executemany(
                "INSERT OR REPLACE INTO edges VALUES (?, ?, ?, ?, ?, ?)",
                [(user_id, e.source, e.target, e.type.value, e.weight, e.relation_type) for e in edges],
            )
        self.invalidate(user_id)

    async def delete_edges(self, user_id: str, edges: Sequence[GraphEdge]) -> None:
        with self._store.transaction() as db:
            db.executemany(
                "DELETE FROM edges WHERE user_id = ? AND source = ? AND target = ? AND type = ?",
                [(user_id, e.source, e.target, e.type.value) for e in edges],
            )
        self.invalidate(user_id)

    async def ids(self, user_id: str) -> dict[str, str]:
        with self._store.lock:
            rows = self._store.db.execute("SELECT id, kind FROM nodes WHERE user_id = ?", (user_id,)).fetchall()
        return {i: k for i, k in rows}

    async def delete_user(self, user_id: str) -> None:
        with self._store.transaction() as db:
            db.execute("DELETE FROM nodes WHERE user_id = ?", (user_id,))
            db.execute("DELETE FROM edges WHERE user_id = ?", (user_id,))
        self.invalidate(user_id)

    # --- reads ---

    async def expand(
        self,
        user_id: str,
        seeds: Mapping[str, float],
        caps: ExpansionCaps,
        not_after: float | None = None,
    ) -> list[GraphCandidate]:
        g = self._graph(user_id)
        return expand_graph(
            g.nodes, g.adjacency, seeds, caps, not_after, mentions=g.mentions, last_mentions=g.last_mentions(not_after)
        )

    async def neighbors(
        self,
        user_id: str,
        ids: Sequence[str],
        edge: EdgeType,
        outgoing: bool,
        limit: int,
        not_after: float | None = None,
    ) -> dict[str, list[GraphNode]]:
        g = self._graph(user_id)
        code = EDGE_CODE[EdgeType(edge)]
        out: dict[str, list[GraphNode]] = {}
        for ident in ids:
            found: list[GraphNode] = []
            i = g.index.get(ident)
            if i is not None:
                key = i * 16 + code * 2 + (0 if outgoing else 1)
                start, stop = np.searchsorted(g.n_key, [key, key + 1])
                for j in range(int(start), int(stop)):
                    if len(found) >= limit:
                        break
                    node = g.node(int(g.n_other[j]))
                    if visible(node, not_after):
                        found.append(node)
            out[ident] = found
        return out
