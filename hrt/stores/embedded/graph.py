"""GraphStore over the embedded SQLite file, with a per-user in-memory adjacency cache.

A user's graph is loaded in two queries on first use and kept up to date by the writes that touch
that user (:mod:`hrt.stores.embedded.graph_changes`), so expansion runs without any query. It is
held as arrays, not objects: node ``i`` is the ``i``-th id in sorted order (so comparing indices
compares ids), and the links of every node sit in one CSR layout already in the walk's visit
order (see :mod:`hrt.stores.graph_walk`), computed with one ``numpy.lexsort`` at load; a second
permutation holds them in the order of :meth:`GraphStore.neighbors` (newest first, no timestamp
counting as 0, then most salient, then id) per (node, edge type, direction). The walk,
:func:`hrt.stores.graph_walk.walk` (the same one the Neo4j adapter runs over its fetched rows),
moves over node indices; the :class:`~hrt.stores.base.GraphNode` objects are built once at load,
in place of the rows they come from, and the walk stops reading a hub's links after its fan-out
cap, so a concept with 40,000 mentions costs what one with 4 does.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphEdge, GraphNode
from hrt.stores.base import valid_at as current
from hrt.stores.embedded.graph_changes import EDGE_CODE, EDGE_TYPES, MENTIONS, SUPERSEDES, EdgeRow, GraphView
from hrt.stores.embedded.schema import EDGE_COLUMNS, NODE_COLUMNS, Changes, EmbeddedPart, chunks, edge_row, node_row
from hrt.stores.graph_walk import WalkView, candidates, every_node, visible, walk
from hrt.stores.user_cache import UserCache

if TYPE_CHECKING:
    from hrt.stores.embedded.store import EmbeddedStore

# A user's graph is built afresh in the background once this many nodes were written since its
# base (reads of written nodes take a slower path), or, for a small user, once as many as the base
# holds (at least COMPACT_SMALL): a small user's build is cheap.
COMPACT_NODES = 2_000
COMPACT_SMALL = 64

_NODE_SELECT = "SELECT id, kind, label, ts, salience, category, tags, source_agent_id, valid_from, valid_to FROM nodes"


def _opt(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _real(value: np.floating | float) -> float | None:
    return None if value != value else float(value)  # NaN: open


def _nan1(value: object) -> float:
    return np.nan if value is None else float(value)  # type: ignore[arg-type]


def _due(g: GraphView) -> bool:
    return g.changes >= COMPACT_NODES or g.changes >= max(COMPACT_SMALL, g.base.size)


def _nan(values: list[object]) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _node(r: Sequence[object], kind_by_value: Mapping[str, Kind]) -> GraphNode:
    """A ``nodes`` row (in :data:`_NODE_SELECT` order) as a node."""
    return GraphNode(
        id=str(r[0]),
        kind=kind_by_value[str(r[1])],
        label=str(r[2]),
        ts=None if r[3] is None else float(r[3]),  # type: ignore[arg-type]
        salience=float(r[4]),  # type: ignore[arg-type]
        category=str(r[5]),
        tags=() if r[6] == "[]" else tuple(json.loads(str(r[6]))),
        source_agent_id=None if r[7] is None else str(r[7]),
        valid_from=_opt(r[8]),
        valid_to=_opt(r[9]),
    )


KIND_BY_VALUE: dict[str, Kind] = {k.value: k for k in Kind}


class _UserGraph:
    """One user's graph as arrays (see the module docstring)."""

    def __init__(self, node_rows: list[tuple[object, ...]], edge_rows: list[tuple[object, ...]]) -> None:
        self._load_nodes(node_rows)
        self._load_links(edge_rows)
        self._index_mentions()
        self._mask: tuple[float, list[bool]] | None = None

    def _load_nodes(self, node_rows: list[tuple[object, ...]]) -> None:
        """The nodes in id order, with their timestamps, saliences and kinds as arrays."""
        node_rows.sort(key=lambda r: str(r[0]))
        # every node built once here: built on first use instead, each request's new nodes cost
        # more than its whole walk (json tags, enum lookups), and a built node takes the memory
        # its row took
        self.nodes: list[GraphNode] = [_node(r, KIND_BY_VALUE) for r in node_rows]
        self.ids: list[str] = [n.id for n in self.nodes]
        self.index: dict[str, int] = {ident: i for i, ident in enumerate(self.ids)}
        self.ts = np.array([np.nan if r[3] is None else r[3] for r in node_rows], dtype=np.float64)
        self.kinds: list[Kind] = list(Kind)
        code_of = {k.value: c for c, k in enumerate(self.kinds)}
        self.kind_codes: list[int] = [code_of[str(r[1])] for r in node_rows]
        self.node = self.nodes.__getitem__  # node index -> GraphNode
        self.name = self.ids.__getitem__  # node index -> id
        self.salience = np.array([r[4] for r in node_rows], dtype=np.float64)
        self.size = len(self.ids)  # node handles of the base: 0 .. size - 1, in id order

    def _load_links(self, edge_rows: list[tuple[object, ...]]) -> None:
        """Every edge seen from both ends, in the walk's visit order and in neighbour order."""
        n, salience, index = self.size, self.salience, self.index
        ends = [
            (index.get(str(r[0])), index.get(str(r[1])), EDGE_CODE[EdgeType(str(r[2]))], r[3], r[4], r[5])
            for r in edge_rows
        ]
        ends = [x for x in ends if x[0] is not None and x[1] is not None]  # an edge needs both ends
        m = len(ends)
        src = np.fromiter((x[0] for x in ends), dtype=np.int64, count=m)
        dst = np.fromiter((x[1] for x in ends), dtype=np.int64, count=m)
        code = np.fromiter((x[2] for x in ends), dtype=np.int8, count=m)
        weight = np.fromiter((x[3] for x in ends), dtype=np.float64, count=m)
        # edges' own intervals (NaN: open); a graph none of whose edges has one skips the check
        v_from, v_to = _nan([x[4] for x in ends]), _nan([x[5] for x in ends])
        self.bounded_edges = bool(m) and not (np.all(np.isnan(v_from)) and np.all(np.isnan(v_to)))
        # Every edge seen from both ends: first as forward links of sources, then as backward ones.
        node = np.concatenate([src, dst])
        other = np.concatenate([dst, src])
        code2 = np.concatenate([code, code])
        weight2 = np.concatenate([weight, weight])
        forward = np.concatenate([np.ones(m, dtype=bool), np.zeros(m, dtype=bool)])
        source = np.concatenate([src, src])
        target = np.concatenate([dst, dst])
        from2, to2 = np.concatenate([v_from, v_from]), np.concatenate([v_to, v_to])
        ts0 = np.nan_to_num(self.ts, nan=0.0)
        # the walk's links: every edge but SUPERSEDES, which links two versions of one fact
        walked = np.flatnonzero(code2 != SUPERSEDES)
        w_node, w_other, w_code, w_weight, w_forward = (
            node[walked],
            other[walked],
            code2[walked],
            weight2[walked],
            forward[walked],
        )
        # visit order: -weight, -(other's ts or 0), other id, edge type, source, target, forward first
        visit = np.lexsort(
            (~w_forward, target[walked], source[walked], w_code, w_other, -ts0[w_other], -w_weight, w_node)
        )
        self.offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(w_node, minlength=n), out=self.offsets[1:])
        self.other = w_other[visit]
        self.code = w_code[visit]
        self.weight = w_weight[visit]
        self.forward = w_forward[visit]
        self.valid_from = from2[walked][visit]
        self.valid_to = to2[walked][visit]
        # the neighbours' order within (node, edge type, direction): newest, most salient, id
        by_kind = np.lexsort((other, -salience[other], -ts0[other], ~forward, code2, node))
        self.n_other = other[by_kind]
        self.n_key = node[by_kind] * 16 + code2[by_kind].astype(np.int64) * 2 + (~forward[by_kind])
        self.n_from, self.n_to = from2[by_kind], to2[by_kind]
        self.n_weight = weight2[by_kind]
        self.edge_codes = frozenset(np.unique(code).tolist())  # the edge types the user has

    def _index_mentions(self) -> None:
        """Each concept's newest mention and each memory unit's mentioned concepts, made once."""
        n = self.size
        # each concept's newest mentioning memory unit (NaN: none with a timestamp); requests whose
        # as_of is after it, nearly all, need no per-request scan of a hub's mentions
        at = np.repeat(np.arange(n), np.diff(self.offsets))
        back = (self.code == MENTIONS) & ~self.forward
        self.newest_mention = np.full(n, np.nan)
        np.fmax.at(self.newest_mention, at[back], self.ts[self.other[back]])
        self.max_ts = float(np.nanmax(self.ts)) if n and not np.all(np.isnan(self.ts)) else -np.inf
        # every memory unit's mentioned concepts in visit order, made once here: made on first use
        # instead, a request's ~400 memory units each cost a slice of their links (~4 us)
        said = (self.code == MENTIONS) & self.forward
        named = [self.ids[j] for j in self.other[said].tolist()]
        counts = np.bincount(at[said], minlength=n)
        self.mentions_of: list[tuple[str, ...]] = [()] * n
        start = 0
        for i, count in zip(np.flatnonzero(counts).tolist(), counts[counts > 0].tolist(), strict=True):
            self.mentions_of[i] = tuple(named[start : start + count])
            start += count
        self.mentions = self.mentions_of.__getitem__  # node index -> its mentioned concepts' ids

    def visible(self, not_after: float | None) -> Callable[[int], bool]:
        """Per node index: does the node exist as of ``not_after`` (no timestamp: always)."""
        if not_after is None or not_after >= self.max_ts:
            return every_node
        mask = self._mask
        if mask is None or mask[0] != not_after:
            mask = (not_after, (~(self.ts > not_after)).tolist())  # NaN compares False: shown
            self._mask = mask
        return mask[1].__getitem__

    def kind_of(self, i: int) -> Kind:
        return self.kinds[self.kind_codes[i]]

    def links(self, i: int) -> Iterator[tuple[int, EdgeType, float, bool]]:
        """Node ``i``'s links in visit order, read in chunks: the walk usually stops after the
        fan-out cap, even on a hub's 40,000 links."""
        offsets = self.offsets
        start, stop = offsets.item(i), offsets.item(i + 1)  # .item: no numpy scalar made
        other, code, weight, forward, types = self.other, self.code, self.weight, self.forward, EDGE_TYPES
        for s in range(start, stop, 32):
            e = min(s + 32, stop)
            chunk = zip(
                other[s:e].tolist(), code[s:e].tolist(), weight[s:e].tolist(), forward[s:e].tolist(), strict=True
            )
            for o, c, w, f in chunk:
                yield o, types[c], w, f

    def links_at(self, at: float) -> Callable[[int], Iterator[tuple[int, EdgeType, float, bool]]]:
        """:meth:`links` without the edges whose interval does not hold at ``at``."""
        if not self.bounded_edges:
            return self.links
        v_from, v_to = self.valid_from, self.valid_to

        def links(i: int) -> Iterator[tuple[int, EdgeType, float, bool]]:
            start, stop = int(self.offsets[i]), int(self.offsets[i + 1])
            # NaN compares False: an open end holds
            shut = ((v_from[start:stop] > at) | (v_to[start:stop] <= at)).tolist()
            for k, link in enumerate(self.links(i)):
                if not shut[k]:
                    yield link

        return links

    def last_mention(self, i: int, not_after: float | None) -> float | None:
        """A concept's newest mentioning memory unit's timestamp as of ``not_after``."""
        newest: float = self.newest_mention.item(i)  # a Python float, no numpy scalar made
        if newest != newest:  # NaN: no timestamped mention at all
            return None
        if not_after is None or newest <= not_after:
            return newest
        s, e = int(self.offsets[i]), int(self.offsets[i + 1])
        stamps = self.ts[self.other[s:e][(self.code[s:e] == MENTIONS) & ~self.forward[s:e]]]
        stamps = stamps[stamps <= not_after]  # NaN compares False: dropped
        return float(stamps.max()) if stamps.size else None


def _kept(
    links: Sequence[tuple[GraphNode, float, float]], limit: int, not_after: float | None, valid_at: float | None
) -> list[GraphNode]:
    """The first ``limit`` neighbours that exist as of ``not_after`` and hold, with their link,
    at ``valid_at``."""
    found: list[GraphNode] = []
    for node, v_from, v_to in links:
        if len(found) >= limit:
            break
        if not visible(node, not_after):
            continue
        if valid_at is not None and not (
            current(node.valid_from, node.valid_to, valid_at) and current(_real(v_from), _real(v_to), valid_at)
        ):
            continue
        found.append(node)
    return found


class EmbeddedGraphStore(EmbeddedPart):
    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store
        self._cache: UserCache[GraphView, Changes] = UserCache(self._load, self._changed, _due, store.lock)

    def invalidate(self, user_id: str) -> None:
        self._cache.invalidate(user_id)

    def update(self, user_id: str, change: Changes) -> None:
        """A write of the user committed (under the store's write lock): the loaded graph takes
        it now (:meth:`GraphView.changed`)."""
        self._cache.update(user_id, change)

    def wait_compacted(self, timeout: float = 60.0) -> bool:
        return self._cache.wait_compacted(timeout)

    def _graph(self, user_id: str) -> GraphView:
        return self._cache.get(user_id)

    async def _graph_async(self, user_id: str) -> GraphView:
        """The user's graph; its first load (seconds for a large user) off the event loop."""
        g = self._cache.peek(user_id)
        return g if g is not None else await asyncio.to_thread(self._cache.get, user_id)

    def _load(self, user_id: str) -> GraphView:
        with self._store.snapshot() as db:  # the nodes and edges of one committed state
            node_rows = db.execute(_NODE_SELECT + " WHERE user_id = ?", (user_id,)).fetchall()
            edge_rows = db.execute(
                "SELECT source, target, type, weight, valid_from, valid_to FROM edges WHERE user_id = ?", (user_id,)
            ).fetchall()
        return GraphView(_UserGraph(node_rows, edge_rows))

    def _changed(self, user_id: str, g: GraphView, change: Changes) -> GraphView:
        """``g`` with the nodes and edges ``change`` names as the file holds them now."""
        nodes: dict[str, GraphNode | None] = dict.fromkeys(change.nodes)
        edges: dict[tuple[str, str, int], EdgeRow | None] = {
            (s, t, EDGE_CODE[EdgeType(ty)]): None for s, t, ty in change.edges
        }  # None until read: deleted
        with self._store.reading() as db:
            for part in chunks(sorted(change.nodes), 500):
                for r in db.execute(
                    _NODE_SELECT + f" WHERE user_id = ? AND id IN ({', '.join('?' * len(part))})", (user_id, *part)
                ):
                    nodes[str(r[0])] = _node(r, KIND_BY_VALUE)
            # one read per 500 sources, not one per edge: a batch may write thousands of relations
            for part in chunks(sorted({s for s, _, _ in change.edges}), 500):
                for source, target, type_, weight, v_from, v_to in db.execute(
                    "SELECT source, target, type, weight, valid_from, valid_to FROM edges WHERE user_id = ? "
                    f"AND source IN ({', '.join('?' * len(part))})",
                    (user_id, *part),
                ):
                    key = (source, target, EDGE_CODE[EdgeType(type_)])
                    if key in edges:
                        edges[key] = EdgeRow(source, target, key[2], float(weight), _nan1(v_from), _nan1(v_to))
        return g.changed(nodes, edges)

    def preload(self, user_id: str) -> None:
        """Load the user's graph now rather than on the first request."""
        self._graph(user_id)

    @property
    def expansion_path(self) -> str:
        """The walk runs in process, over the cached graph."""
        return "in_process"

    # --- writes (used by the projector; the embedded store writes these tables in apply()) ---

    async def upsert_nodes(self, user_id: str, nodes: Sequence[GraphNode]) -> None:
        with self._store.transaction() as db:
            db.executemany(
                f"INSERT OR REPLACE INTO nodes ({NODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [node_row(user_id, n) for n in nodes],
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
                f"INSERT OR REPLACE INTO edges ({EDGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [edge_row(user_id, e) for e in edges],
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
        with self._store.reading() as db:
            rows = db.execute("SELECT id, kind FROM nodes WHERE user_id = ?", (user_id,)).fetchall()
        return {i: k for i, k in rows}

    async def nodes(self, user_id: str) -> dict[str, GraphNode]:
        """Every node of one user as projected (``hrt doctor`` compares them with the records)."""
        with self._store.lock:
            rows = self._store.db.execute(_NODE_SELECT + " WHERE user_id = ?", (user_id,)).fetchall()
        return {
            r[0]: GraphNode(
                r[0], Kind(r[1]), r[2], r[3], r[4], r[5], tuple(json.loads(r[6]) if r[6] else ()), r[7], r[8], r[9]
            )
            for r in rows
        }

    async def edges(self, user_id: str) -> list[GraphEdge]:
        """Every edge of one user as projected, in (source, target, type) order."""
        with self._store.lock:
            rows = self._store.db.execute(
                "SELECT source, target, type, weight, relation_type, valid_from, valid_to FROM edges WHERE user_id = ? "
                "ORDER BY source, target, type",
                (user_id,),
            ).fetchall()
        return [GraphEdge(s, t, EdgeType(ty), w, rt, vf, vt) for s, t, ty, w, rt, vf, vt in rows]

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
        valid_at: float | None = None,
    ) -> list[GraphCandidate]:
        g = await self._graph_async(user_id)
        links = g.links if valid_at is None else g.links_at(valid_at)
        view: WalkView[int] = WalkView(links=links, visible=g.visible(not_after), kind=g.kind_of, order=g.order)
        start = [(i, score) for ident, score in seeds.items() if (i := g.handle(ident)) is not None]
        best = walk(view, start, caps)
        order = None if g.next_handle == g.base.size else g.order  # new nodes: handles are not in id order
        return candidates(best, g.node, g.name, g.mentions, lambda i: g.last_mention(i, not_after), order)

    async def neighbors(
        self,
        user_id: str,
        ids: Sequence[str],
        edge: EdgeType,
        outgoing: bool,
        limit: int,
        not_after: float | None = None,
        valid_at: float | None = None,
    ) -> dict[str, list[GraphNode]]:
        g = await self._graph_async(user_id)
        code = EDGE_CODE[EdgeType(edge)]
        out: dict[str, list[GraphNode]] = {ident: [] for ident in ids}
        if code not in g.edge_codes:  # no edge of the type at all (SUPERSEDES, for most users)
            return out
        known = [(ident, i) for ident in out if (i := g.handle(ident)) is not None]
        if not known:
            return out
        for ident, i in [(ident, i) for ident, i in known if i in g.dirty]:
            out[ident] = _kept(
                [(g.node(o), f, t) for o, f, t in g.neighbour_links(i, code, outgoing)], limit, not_after, valid_at
            )
        known = [(ident, i) for ident, i in known if i not in g.dirty]
        if not known:
            return out
        base = g.base
        # every id's range of (node, edge type, direction) at once: retrieval asks for the
        # SUPERSEDES edges of ~700 candidates, most of which have none
        keys = np.array([i for _, i in known], dtype=np.int64) * 16 + (code * 2 + (0 if outgoing else 1))
        starts = np.searchsorted(base.n_key, keys)
        stops = np.searchsorted(base.n_key, keys + 1)
        having = np.flatnonzero(stops > starts)  # most have no link of the type: only those that do are visited
        for at, start, stop in zip(having.tolist(), starts[having].tolist(), stops[having].tolist(), strict=True):
            found = out[known[at][0]]
            for j in range(start, stop):
                if len(found) >= limit:
                    break
                other = int(base.n_other[j])
                if other in g.dead:
                    continue
                node = g.node(other)
                if not visible(node, not_after):
                    continue
                if valid_at is not None and not (
                    current(node.valid_from, node.valid_to, valid_at)
                    and current(_real(base.n_from[j]), _real(base.n_to[j]), valid_at)
                ):
                    continue
                found.append(node)
        return out
