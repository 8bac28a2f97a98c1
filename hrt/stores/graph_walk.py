"""Expansion as a pure function over a fetched neighbourhood, shared by every GraphStore adapter.

The adapters differ only in how they fetch the graph: the embedded one holds each user's whole
graph in memory as arrays, the Neo4j one fetches in one query just the bounded neighbourhood that
the walk can reach (per node, its first ``fanout_per_node`` visible links in visit order). Both
walk what they hold with :func:`walk` through a :class:`WalkView` and build the result with
:func:`candidates`, so the best-path walk, the caps and every tie-break are one piece of code and
the two deployments cannot drift apart.

Visit order is the contract between the walk and every adapter, which pre-sort links (the
embedded one with ``numpy.lexsort``, ``Neo4jGraphStore`` through its link-order indexes):
strongest edge first, then newest neighbour (no timestamp counts as 0), then neighbour id, then
edge type, then the edge's (source, target) ids, then forward before backward. The last two only
order two opposite edges of one type and weight between the same pair, and the two ends of a
self-loop.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphNode, PathStep, make_candidate


def visible(node: GraphNode | None, not_after: float | None) -> bool:
    """A node exists for a request as of ``not_after`` unless it is timestamped after it."""
    return node is not None and (not_after is None or node.ts is None or node.ts <= not_after)


H = TypeVar("H", bound=Hashable)  # a node handle: the id itself, or an adapter's index for it


def every_node(_handle: object) -> bool:
    """:attr:`WalkView.visible` when every node is shown (no ``not_after``, or one after every
    timestamp): the walk then makes no call per link."""
    return True


# best[handle] = (score, hops, seed handle, path as (edge, handle, forward) steps, hop first reached at)
_Best = dict[H, tuple[float, int, H, tuple[tuple[EdgeType, H, bool], ...], int]]


@dataclass(frozen=True, slots=True)
class WalkView(Generic[H]):
    """What the walk reads of a graph, per node handle. ``order`` must order handles as their ids
    order (the identity when the handle is the id); ``links`` yields (other, edge, weight, forward)
    in visit order (module docstring); ``visible`` is False for a missing node."""

    links: Callable[[H], Iterable[tuple[H, EdgeType, float, bool]]]
    visible: Callable[[H], bool]
    kind: Callable[[H], Kind]
    order: Callable[[H], Any]


def walk(view: WalkView[H], seeds: Sequence[tuple[H, float]], caps: ExpansionCaps) -> _Best[H]:
    """The best-path walk: seeds strongest first, then per hop each frontier node (best first,
    then id) offers its first ``fanout_per_node`` visible links; a node keeps the best path, ties
    the first found; new nodes are admitted up to ``max_per_kind`` per kind (seeds are exempt).
    Each node also keeps the hop at which the walk first reached it (0 for a seed): a better path
    found deeper replaces the path, never that hop, so a node's distance from the seeds does not
    depend on the depth asked for."""
    best: _Best[H] = {}
    per_kind: dict[Kind, int] = {}
    order = view.order
    for seed, score in sorted(seeds, key=lambda hs: (-hs[1], order(hs[0]))):
        if seed in best or not view.visible(seed):
            continue
        best[seed] = (score, 0, seed, (), 0)
        kind = view.kind(seed)
        per_kind[kind] = per_kind.get(kind, 0) + 1

    fanout, decay, cap, visible, kind_of = (
        caps.fanout_per_node,
        caps.hop_decay,
        caps.max_per_kind,
        view.visible,
        view.kind,
    )
    screened = visible is not every_node
    frontier = sorted(best, key=lambda h: (-best[h][0], order(h)))
    for hop in range(1, caps.depth + 1):
        reached: set[H] = set()
        for current in frontier:
            score, _, seed, path, _ = best[current]
            taken = 0
            for other, edge, weight, forward in view.links(current):
                if taken >= fanout:
                    break
                if screened and not visible(other):
                    continue  # invisible neighbours do not use up the fan-out
                taken += 1
                candidate_score = score * decay * weight
                previous = best.get(other)
                if previous is not None:
                    if previous[0] >= candidate_score:
                        continue  # ties keep the path found first (visit order)
                    first = previous[4]
                else:
                    kind = kind_of(other)
                    if per_kind.get(kind, 0) >= cap:
                        continue
                    per_kind[kind] = per_kind.get(kind, 0) + 1
                    first = hop
                best[other] = (candidate_score, hop, seed, (*path, (edge, other, forward)), first)
                reached.add(other)
        frontier = sorted(reached, key=lambda h: (-best[h][0], order(h)))
        if not frontier:
            break
    return best


def candidates(
    best: _Best[H],
    node: Callable[[H], GraphNode],
    name: Callable[[H], str],
    mentions: Callable[[H], tuple[str, ...]],
    last_mention: Callable[[H], float | None],
    order: Callable[[H], Any] | None = None,
) -> list[GraphCandidate]:
    """The walk's result as the expansion contract: one candidate per node, sorted by id (handles
    sort as their ids, as :class:`WalkView` asks of ``order``: an adapter's index in id order, or
    the id itself; ``order`` given, by it).

    It runs for every node of every request (~700 at 100k entities), so the loop is written out:
    names bound once, a path's steps made through one shared dict (paths share their steps), no
    call per step."""
    out: list[GraphCandidate] = []
    steps: dict[tuple[EdgeType, H, bool], PathStep] = {}  # paths share their steps: make each once
    memory_unit, concept, make, make_step = Kind.MEMORY_UNIT, Kind.CONCEPT, make_candidate, PathStep
    for handle in sorted(best, key=order):  # type: ignore[type-var,arg-type]  # ints or strings, or by order
        score, hops, seed, path, first = best[handle]
        n = node(handle)
        kind = n.kind
        made: tuple[PathStep, ...] = ()
        if path:
            made_steps: list[PathStep] = []
            for raw in path:
                s = steps.get(raw)
                if s is None:
                    s = steps[raw] = make_step(raw[0], name(raw[1]), raw[2])
                made_steps.append(s)
            made = tuple(made_steps)
        out.append(
            make(
                n,
                hops,
                name(seed),
                made,
                score,
                mentions(handle) if kind is memory_unit else (),
                last_mention(handle) if kind is concept else None,
                first,
            )
        )
    return out
