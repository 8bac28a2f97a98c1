"""GraphStore over the embedded SQLite file, with a per-user in-memory adjacency cache.

A user's adjacency is loaded in two queries on first use and dropped when a write touches that
user, so expansion itself runs without any query. The walk is :func:`hrt.stores.graph_walk.expand_graph`,
shared with the Neo4j adapter.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING

from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphEdge, GraphNode
from hrt.stores.graph_walk import Link, expand_graph, link_order, neighbour_order, visible

if TYPE_CHECKING:
    from hrt.stores.embedded import EmbeddedStore


class _UserGraph:
    __slots__ = ("adjacency", "nodes")

    def __init__(self, nodes: dict[str, GraphNode], adjacency: dict[str, list[Link]]) -> None:
        self.nodes = nodes
        self.adjacency = adjacency


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
        nodes = {
            r[0]: GraphNode(
                id=r[0],
                kind=Kind(r[1]),
                label=r[2],
                ts=r[3],
                salience=r[4],
                category=r[5],
                tags=tuple(json.loads(r[6])),
                source_agent_id=r[7],
            )
            for r in node_rows
        }
        adjacency: dict[str, list[Link]] = {}
        for source, target, etype, weight in edge_rows:
            if source not in nodes or target not in nodes:
                continue
            edge = EdgeType(etype)
            adjacency.setdefault(source, []).append(Link(target, edge, weight, True))
            adjacency.setdefault(target, []).append(Link(source, edge, weight, False))
        for ident, links in adjacency.items():
            links.sort(key=partial(link_order, ident, nodes=nodes))
        graph = _UserGraph(nodes, adjacency)
        with self._cache_lock:
            self._cache[user_id] = graph
        return graph

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
        graph = self._graph(user_id)
        return expand_graph(graph.nodes, graph.adjacency, seeds, caps, not_after)

    async def neighbors(
        self,
        user_id: str,
        ids: Sequence[str],
        edge: EdgeType,
        outgoing: bool,
        limit: int,
        not_after: float | None = None,
    ) -> dict[str, list[GraphNode]]:
        graph = self._graph(user_id)
        edge = EdgeType(edge)
        out: dict[str, list[GraphNode]] = {}
        for ident in ids:
            found = [
                graph.nodes[lk.other]
                for lk in graph.adjacency.get(ident, ())
                if lk.edge is edge and lk.forward == outgoing
            ]
            found = [n for n in found if visible(n, not_after)]
            found.sort(key=neighbour_order)
            out[ident] = found[:limit]
        return out
