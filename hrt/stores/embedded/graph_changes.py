"""A user's cached graph with the writes since it was built, so a write is walked at once.

The embedded graph store holds each user's graph as arrays built in one pass
(:class:`hrt.stores.embedded.graph._UserGraph`, the *base*): seconds at 100k entities. A write
does not rebuild it. :meth:`GraphView.changed` makes the next snapshot from the previous one and
what the write changed, in time proportional to the nodes it touched:

- a node written or deleted, and both ends of a relation written or deleted, are *dirty*, and so
  are the neighbours of a node that appeared, went, or changed its timestamp or salience (their
  links are ordered by it);
- each dirty node gets its whole link list again, from its previous list (the base's arrays or
  the view's) less what changed, plus the changed relations as the file holds them now, in the
  base's visit order and neighbour order, computed with the same keys;
- a new node gets the next free handle past the base's; handles order as their ids through
  :meth:`GraphView.order` (a base handle is its rank in id order, a new one sits between the two
  base ids around it), so the walk, which breaks ties by id, walks a view exactly as it walks a
  base built afresh over the same rows.

Reads of a view with no changes go straight to the base's bound methods. The background
compaction (:meth:`hrt.stores.user_cache.UserCache.update`) builds a new base.
"""

from __future__ import annotations

import bisect
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from hrt.records import EdgeType, Kind
from hrt.stores.base import GraphNode
from hrt.stores.graph_walk import visible as shown

if TYPE_CHECKING:
    from hrt.stores.embedded.graph import _UserGraph

# Edge types coded in the order of their values, so comparing codes compares values (visit order).
EDGE_TYPES: list[EdgeType] = sorted(EdgeType, key=lambda e: e.value)
EDGE_CODE: dict[EdgeType, int] = {e: i for i, e in enumerate(EDGE_TYPES)}
MENTIONS = EDGE_CODE[EdgeType.MENTIONS]
SUPERSEDES = EDGE_CODE[EdgeType.SUPERSEDES]

# order keys: base handle h -> h * STEP; a new node between base ranks p - 1 and p -> in the gap
STEP = 1 << 24

Link = tuple[int, EdgeType, float, bool]


@dataclass(frozen=True, slots=True)
class EdgeRow:
    """A relation as the file holds it now (None fields of a deleted one are never read)."""

    source: str
    target: str
    code: int
    weight: float
    valid_from: float
    valid_to: float


@dataclass(slots=True)
class _Links:
    """Every link of one dirty node (SUPERSEDES included), with its orders."""

    other: np.ndarray  # int64 handles
    code: np.ndarray  # int8
    weight: np.ndarray
    forward: np.ndarray  # bool
    valid_from: np.ndarray  # NaN: open
    valid_to: np.ndarray
    walk: list[Link] = field(default_factory=list)  # visit order, SUPERSEDES left out
    walk_from: np.ndarray = field(default_factory=lambda: np.zeros(0))
    walk_to: np.ndarray = field(default_factory=lambda: np.zeros(0))
    by_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # neighbour order
    mentions: tuple[str, ...] = ()
    mention_ts: np.ndarray = field(default_factory=lambda: np.zeros(0))  # mentioning units' stamps


class GraphView:
    """A base graph and the writes since (module docstring). Immutable once made."""

    def __init__(self, base: _UserGraph) -> None:
        self.base = base
        self.over: dict[int, GraphNode] = {}  # nodes written since, by handle (base or new)
        self.dead: frozenset[int] = frozenset()  # handles of nodes deleted since
        self.new_index: dict[str, int] = {}  # id -> handle, for nodes new since the base
        self.new_keys: dict[int, int] = {}  # new handle -> its order key
        self.dirty: dict[int, _Links] = {}
        self.max_ts = base.max_ts
        self.bounded_edges = base.bounded_edges
        self.edge_codes = base.edge_codes
        self.next_handle = base.size
        self.changes = 0  # nodes written since the base (compaction)
        self._bind()

    def _bind(self) -> None:
        """Reads of a view without changes are the base's own bound methods."""
        base = self.base
        if not self.over and not self.dead and not self.dirty:
            self.links: Callable[[int], Iterator[Link]] = base.links
            self.node: Callable[[int], GraphNode] = base.node
            self.name: Callable[[int], str] = base.name
            self.kind_of: Callable[[int], Kind] = base.kind_of
            self.mentions: Callable[[int], tuple[str, ...]] = base.mentions
            self.order: Callable[[int], Any] = lambda h: h
        else:
            self.links = self._links
            self.node = self._node
            self.name = lambda h: self._node(h).id
            self.kind_of = lambda h: self._node(h).kind
            self.mentions = self._mentions
            self.order = self._order

    # --- reads --------------------------------------------------------------------------------

    def handle(self, ident: str) -> int | None:
        h = self.new_index.get(ident)
        if h is None:
            h = self.base.index.get(ident)
        return None if h is None or h in self.dead else h

    def _node(self, h: int) -> GraphNode:
        node = self.over.get(h)
        return node if node is not None else self.base.nodes[h]

    def _order(self, h: int) -> int:
        key = self.new_keys.get(h)
        return h * STEP if key is None else key

    def _links(self, h: int) -> Iterator[Link]:
        d = self.dirty.get(h)
        if d is None:
            return self.base.links(h)
        return iter(d.walk)

    def _mentions(self, h: int) -> tuple[str, ...]:
        d = self.dirty.get(h)
        return self.base.mentions(h) if d is None else d.mentions

    def visible(self, not_after: float | None) -> Callable[[int], bool]:
        base_visible = self.base.visible(not_after)
        if not self.over and not self.dead:
            return base_visible
        over, dead = self.over, self.dead

        def visible(h: int) -> bool:
            node = over.get(h)
            if node is not None:
                return shown(node, not_after)
            return h not in dead and base_visible(h)

        return visible

    def links_at(self, at: float) -> Callable[[int], Iterator[Link]]:
        """:meth:`links` without the edges whose interval does not hold at ``at``."""
        if not self.bounded_edges:
            return self.links
        if not self.dirty:
            return self.base.links_at(at)
        base_links = self.base.links_at(at)
        dirty = self.dirty

        def links(h: int) -> Iterator[Link]:
            d = dirty.get(h)
            if d is None:
                return base_links(h)
            shut = ((d.walk_from > at) | (d.walk_to <= at)).tolist()  # NaN compares False: open
            return iter([link for link, s in zip(d.walk, shut, strict=True) if not s])

        return links

    def last_mention(self, h: int, not_after: float | None) -> float | None:
        d = self.dirty.get(h)
        if d is None:
            return self.base.last_mention(h, not_after)
        stamps = d.mention_ts[~np.isnan(d.mention_ts)]
        if not_after is not None:
            stamps = stamps[stamps <= not_after]
        return float(stamps.max()) if stamps.size else None

    def neighbour_links(self, h: int, code: int, outgoing: bool) -> list[tuple[int, float, float]]:
        """A dirty node's links of one type and direction in neighbour order: (other, from, to)."""
        d = self.dirty[h]
        rows = [int(j) for j in d.by_kind if d.code[j] == code and bool(d.forward[j]) == outgoing]
        return [(int(d.other[j]), float(d.valid_from[j]), float(d.valid_to[j])) for j in rows]

    # --- the next snapshot --------------------------------------------------------------------

    def changed(
        self, nodes: Mapping[str, GraphNode | None], edges: Mapping[tuple[str, str, int], EdgeRow | None]
    ) -> GraphView:
        """This view with ``nodes`` as they are now (None: deleted, with their edges) and
        ``edges`` (source, target, type code) as they are now (None: deleted)."""
        nxt = copy.copy(self)  # the maps it changes are copied below; _bind() rebinds the reads
        nxt.over, nxt.new_index, nxt.dirty = dict(self.over), dict(self.new_index), dict(self.dirty)
        dead = set(self.dead)
        dirty: set[int] = set()
        gone: set[int] = set()
        revived: set[int] = set()  # deleted before and written again: none of its old links
        for ident, node in sorted(nodes.items()):
            h = self.handle(ident)
            before = None if h is None else self._node(h)
            if node is None:
                if h is not None:
                    dead.add(h)
                    gone.add(h)
                    nxt.over.pop(h, None)
                    dirty.update(int(o) for o in self._all_links(h).other.tolist())
                continue
            if h is None:
                h = self.new_index.get(ident)  # a new node deleted and written again
                if h is None:
                    h = self.base.index.get(ident)
                if h is None:
                    h = nxt.next_handle
                    nxt.next_handle += 1
                    nxt.new_index[ident] = h
                if h in dead:
                    revived.add(h)
                dead.discard(h)
            nxt.over[h] = node
            nxt.changes += 1
            dirty.add(h)
            if node.ts is not None:
                nxt.max_ts = max(nxt.max_ts, node.ts)
            if before is not None and (before.ts, before.salience) != (node.ts, node.salience):
                dirty.update(int(o) for o in self._all_links(h).other.tolist())
        nxt.dead = frozenset(dead)
        if len(nxt.new_index) != len(self.new_index):
            nxt.new_keys = _keys(self.base.ids, nxt.new_index)
        changed_edges: dict[int, list[tuple[int, int, bool, EdgeRow | None]]] = {}
        for (source, target, code), row in sorted(edges.items()):
            s, t = nxt.handle(source), nxt.handle(target)
            if s is None or t is None:
                continue
            changed_edges.setdefault(s, []).append((t, code, True, row))
            changed_edges.setdefault(t, []).append((s, code, False, row))
            dirty.update((s, t))
            if row is not None:
                nxt.edge_codes = nxt.edge_codes | {code}
                nxt.bounded_edges |= row.valid_from == row.valid_from or row.valid_to == row.valid_to
        for h in sorted(dirty - set(dead)):
            links = _no_links() if h in revived else self._all_links(h)
            nxt.dirty[h] = nxt._relinked(h, links, gone, changed_edges.get(h, []))
        for h in gone:
            nxt.dirty.pop(h, None)
        nxt._bind()
        return nxt

    def _all_links(self, h: int) -> _Links:
        """Every link of ``h`` now: the view's list for a dirty node, else the base's arrays."""
        d = self.dirty.get(h)
        if d is not None:
            return d
        base = self.base
        if h >= base.size:
            return _no_links()
        lo, hi = np.searchsorted(base.n_key, [h * 16, h * 16 + 16]).tolist()
        key = base.n_key[lo:hi]
        return _Links(
            other=base.n_other[lo:hi].astype(np.int64),
            code=((key % 16) // 2).astype(np.int8),
            weight=base.n_weight[lo:hi],
            forward=(key % 2) == 0,
            valid_from=base.n_from[lo:hi],
            valid_to=base.n_to[lo:hi],
        )

    def _relinked(
        self, h: int, links: _Links, gone: set[int], changed: list[tuple[int, int, bool, EdgeRow | None]]
    ) -> _Links:
        """A node's links less those to ``gone`` nodes and the ``changed`` relations' old
        versions, plus their new ones, in visit and neighbour order."""
        replaced = {(o, c, f) for o, c, f, _ in changed}
        keep = [
            j
            for j, (o, c, f) in enumerate(
                zip(links.other.tolist(), links.code.tolist(), links.forward.tolist(), strict=True)
            )
            if o not in gone and (o, c, bool(f)) not in replaced
        ]
        added = [(o, c, f, row) for o, c, f, row in changed if row is not None]
        idx = np.array(keep, dtype=np.int64)
        other = np.concatenate([links.other[idx], np.array([a[0] for a in added], dtype=np.int64)])
        code = np.concatenate([links.code[idx], np.array([a[1] for a in added], dtype=np.int8)])
        weight = np.concatenate([links.weight[idx], np.array([a[3].weight for a in added], dtype=np.float64)])
        forward = np.concatenate([links.forward[idx], np.array([a[2] for a in added], dtype=bool)])
        v_from = np.concatenate([links.valid_from[idx], np.array([a[3].valid_from for a in added], dtype=np.float64)])
        v_to = np.concatenate([links.valid_to[idx], np.array([a[3].valid_to for a in added], dtype=np.float64)])
        return self._ordered(h, _Links(other, code, weight, forward, v_from, v_to))

    def _ordered(self, h: int, links: _Links) -> _Links:
        """``links`` with the base's orders, by the same keys (module docstring)."""
        others = links.other.tolist()
        nodes = [self._node(o) for o in others]
        ts0 = np.array([n.ts or 0.0 for n in nodes], dtype=np.float64)
        salience = np.array([n.salience for n in nodes], dtype=np.float64)
        key = np.array([self._order(o) for o in others], dtype=np.int64)
        me = self._order(h)
        source = np.where(links.forward, me, key)
        target = np.where(links.forward, key, me)
        walked = np.flatnonzero(links.code != SUPERSEDES)
        visit = walked[
            np.lexsort(
                (
                    ~links.forward[walked],
                    target[walked],
                    source[walked],
                    links.code[walked],
                    key[walked],
                    -ts0[walked],
                    -links.weight[walked],
                )
            )
        ]
        links.walk = [
            (others[j], EDGE_TYPES[c], w, f)
            for j, c, w, f in zip(
                visit.tolist(),
                links.code[visit].tolist(),
                links.weight[visit].tolist(),
                links.forward[visit].tolist(),
                strict=True,
            )
        ]
        links.walk_from, links.walk_to = links.valid_from[visit], links.valid_to[visit]
        links.by_kind = np.lexsort((key, -salience, -ts0, ~links.forward, links.code))
        said = [j for j in visit.tolist() if links.code[j] == MENTIONS and links.forward[j]]
        links.mentions = tuple(nodes[j].id for j in said)
        heard = (links.code == MENTIONS) & ~links.forward
        links.mention_ts = np.array(
            [np.nan if nodes[j].ts is None else nodes[j].ts for j in np.flatnonzero(heard).tolist()],
            dtype=np.float64,
        )
        return links


def _no_links() -> _Links:
    empty = np.zeros(0)
    return _Links(np.zeros(0, np.int64), np.zeros(0, np.int8), empty, np.zeros(0, bool), empty, empty)


def _keys(base_ids: Sequence[str], new_index: Mapping[str, int]) -> dict[int, int]:
    """Order keys of the new handles: between the keys of the base ids around each id."""
    by_slot: dict[int, list[str]] = {}
    for ident in new_index:
        by_slot.setdefault(bisect.bisect_left(base_ids, ident), []).append(ident)
    keys: dict[int, int] = {}
    for p, members in by_slot.items():
        for rank, ident in enumerate(sorted(members)):
            keys[new_index[ident]] = (p - 1) * STEP + 1 + rank
    return keys
