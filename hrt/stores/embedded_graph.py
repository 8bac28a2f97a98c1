"""GraphStore over the embedded SQLite file, with a per-user in-memory adjacency cache.

A user's adjacency is loaded in two queries on first use and dropped when a write touches that
user, so expansion itself runs without any query.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphEdge, GraphNode, PathStep

if TYPE_CHECKING:
    from hrt.stores.embedded import EmbeddedStore


@dataclass(frozen=True, slots=True)
class _Link:
    other: str
    edge: EdgeType
    weight: float
    forward: bool


class _UserGraph:
    __slots__ = ("adjacency", "nodes")

    def __init__(self, nodes: dict[str, GraphNode], adjacency: dict[str, list[_Link]]) -> None:
        self.nodes = nodes
        self.adjacency = adjacency


def _newest_first(node: GraphNode | None) -> float:
    return -(node.ts or 0.0) if node is not None else 0.0


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
        adjacency: dict[str, list[_Link]] = {}
        for source, target, etype, weight in edge_rows:
            if source not in nodes or target not in nodes:
                continue
            edge = EdgeType(etype)
            adjacency.setdefault(source, []).append(_Link(target, edge, weight, True))
            adjacency.setdefault(target, []).append(_Link(source, edge, weight, False))
        # Visit order for fan-out caps: strongest edge, then newest neighbour, then id.
        for links in adjacency.values():
            links.sort(key=lambda lk: (-lk.weight, _newest_first(nodes.get(lk.other)), lk.other, lk.edge.value))
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

    # --- reads ---

    async def expand(
        self,
        user_id: str,
        seeds: Mapping[str, float],
        caps: ExpansionCaps,
        not_after: float | None = None,
    ) -> list[GraphCandidate]:
        graph = self._graph(user_id)

        def visible(node: GraphNode | None) -> bool:
            return node is not None and (not_after is None or node.ts is None or node.ts <= not_after)

        # best[id] = (score, hops, seed, path)
        best: dict[str, tuple[float, int, str, tuple[PathStep, ...]]] = {}
        per_kind: dict[Kind, int] = {}
        for seed_id, score in sorted(seeds.items(), key=lambda kv: (-kv[1], kv[0])):
            node = graph.nodes.get(seed_id)
            if not visible(node) or seed_id in best:
                continue
            assert node is not None
            best[seed_id] = (score, 0, seed_id, ())
            per_kind[node.kind] = per_kind.get(node.kind, 0) + 1

        frontier = sorted(best, key=lambda i: (-best[i][0], i))
        for hop in range(1, caps.depth + 1):
            reached: set[str] = set()
            for current in frontier:
                score, _, seed_id, path = best[current]
                taken = 0
                for link in graph.adjacency.get(current, ()):
                    if taken >= caps.fanout_per_node:
                        break
                    node = graph.nodes.get(link.other)
                    if not visible(node):
                        continue
                    assert node is not None
                    taken += 1
                    candidate_score = score * caps.hop_decay * link.weight
                    previous = best.get(link.other)
                    if previous is not None:
                        if previous[0] >= candidate_score:
                            continue
                    elif per_kind.get(node.kind, 0) >= caps.max_per_kind:
                        continue
                    else:
                        per_kind[node.kind] = per_kind.get(node.kind, 0) + 1
                    step = PathStep(edge=link.edge, node_id=link.other, forward=link.forward)
                    best[link.other] = (candidate_score, hop, seed_id, (*path, step))
                    reached.add(link.other)
            frontier = sorted(reached, key=lambda i: (-best[i][0], i))
            if not frontier:
                break

        out: list[GraphCandidate] = []
        for ident in sorted(best):
            score, hops, seed_id, path = best[ident]
            node = graph.nodes[ident]
            mentions: tuple[str, ...] = ()
            last_mention: float | None = None
            links = graph.adjacency.get(ident, ())
            if node.kind is Kind.MEMORY_UNIT:
                mentions = tuple(lk.other for lk in links if lk.edge is EdgeType.MENTIONS and lk.forward)
            elif node.kind is Kind.CONCEPT:
                stamps = [
                    ts
                    for lk in links
                    if lk.edge is EdgeType.MENTIONS
                    and not lk.forward
                    and (ts := graph.nodes[lk.other].ts) is not None
                    and (not_after is None or ts <= not_after)
                ]
                last_mention = max(stamps) if stamps else None
            out.append(
                GraphCandidate(
                    node=node,
                    hops=hops,
                    seed_id=seed_id,
                    path=path,
                    path_score=score,
                    mentions=mentions,
                    last_mention_ts=last_mention,
                )
            )
        return out

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
            found = [n for n in found if not_after is None or n.ts is None or n.ts <= not_after]
            found.sort(key=lambda n: (_newest_first(n), -n.salience, n.id))
            out[ident] = found[:limit]
        return out
