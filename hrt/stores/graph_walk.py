"""Expansion as a pure function over a fetched neighbourhood, shared by every GraphStore adapter.

The adapters differ only in how they fetch the graph: the embedded one holds each user's whole
adjacency in memory, the Neo4j one fetches in one query just the bounded neighbourhood that the
walk can reach (per node, its first ``fanout_per_node`` visible links in visit order). Both hand
what they fetched to :func:`expand_graph`, so the best-path walk, the caps and every tie-break are
one piece of code and the two deployments cannot drift apart.

Visit order (:func:`link_order`) is the contract between the walk and any adapter that pre-sorts
or truncates links in its own query language; ``Neo4jGraphStore`` mirrors it in Cypher:
strongest edge first, then newest neighbour (no timestamp counts as 0), then neighbour id, then
edge type, then the edge's (source, target) ids, then forward before backward. The last two only
order two opposite edges of one type and weight between the same pair, and the two ends of a
self-loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hrt.records import EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphNode, PathStep


@dataclass(frozen=True, slots=True)
class Link:
    """One edge seen from one of its ends."""

    other: str
    edge: EdgeType
    weight: float
    forward: bool  # True when the edge points from this node to ``other``


LinkKey = tuple[float, float, str, str, str, str, bool]


def link_order(node_id: str, link: Link, nodes: Mapping[str, GraphNode]) -> LinkKey:
    """Sort key of the visit order for fan-out caps among the links of ``node_id`` (see the module
    docstring)."""
    other = nodes.get(link.other)
    newest = -(other.ts or 0.0) if other is not None else 0.0
    source, target = (node_id, link.other) if link.forward else (link.other, node_id)
    return (-link.weight, newest, link.other, link.edge.value, source, target, not link.forward)


def neighbour_order(node: GraphNode) -> tuple[float, float, str]:
    """Order of :meth:`GraphStore.neighbors`: newest first (no timestamp counts as 0), then most
    salient, then id."""
    return (-(node.ts or 0.0), -node.salience, node.id)


def visible(node: GraphNode | None, not_after: float | None) -> bool:
    """A node exists for a request as of ``not_after`` unless it is timestamped after it."""
    return node is not None and (not_after is None or node.ts is None or node.ts <= not_after)


def mentions_of(links: Iterable[Link]) -> tuple[str, ...]:
    """A memory unit's mentioned concepts, in visit order (``links`` must be its complete list)."""
    return tuple(lk.other for lk in links if lk.edge is EdgeType.MENTIONS and lk.forward)


def last_mention_of(links: Iterable[Link], nodes: Mapping[str, GraphNode], not_after: float | None) -> float | None:
    """A concept's newest visible mentioning memory unit (``links`` must be its complete list)."""
    stamps = [
        ts
        for lk in links
        if lk.edge is EdgeType.MENTIONS
        and not lk.forward
        and (other := nodes.get(lk.other)) is not None
        and (ts := other.ts) is not None
        and (not_after is None or ts <= not_after)
    ]
    return max(stamps) if stamps else None


# best[id] = (score, hops, seed id, path)
_Best = dict[str, tuple[float, int, str, tuple[PathStep, ...]]]


def _walk(
    nodes: Mapping[str, GraphNode],
    adjacency: Mapping[str, Sequence[Link]],
    seeds: Mapping[str, float],
    caps: ExpansionCaps,
    not_after: float | None,
) -> _Best:
    best: _Best = {}
    per_kind: dict[Kind, int] = {}
    # Seeds are admitted strongest first and are not subject to the per-kind cap.
    for seed_id, score in sorted(seeds.items(), key=lambda kv: (-kv[1], kv[0])):
        node = nodes.get(seed_id)
        if node is None or not visible(node, not_after) or seed_id in best:
            continue
        best[seed_id] = (score, 0, seed_id, ())
        per_kind[node.kind] = per_kind.get(node.kind, 0) + 1

    frontier = sorted(best, key=lambda i: (-best[i][0], i))
    for hop in range(1, caps.depth + 1):
        reached: set[str] = set()
        for current in frontier:
            score, _, seed_id, path = best[current]
            taken = 0
            for link in adjacency.get(current, ()):
                if taken >= caps.fanout_per_node:
                    break
                node = nodes.get(link.other)
                if node is None or not visible(node, not_after):
                    continue  # invisible neighbours do not use up the fan-out
                taken += 1
                candidate_score = score * caps.hop_decay * link.weight
                previous = best.get(link.other)
                if previous is not None:
                    if previous[0] >= candidate_score:
                        continue  # ties keep the path found first (visit order)
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
    return best


def expand_graph(
    nodes: Mapping[str, GraphNode],
    adjacency: Mapping[str, Sequence[Link]],
    seeds: Mapping[str, float],
    caps: ExpansionCaps,
    not_after: float | None = None,
    *,
    mentions: Mapping[str, tuple[str, ...]] | None = None,
    last_mentions: Mapping[str, float | None] | None = None,
) -> list[GraphCandidate]:
    """The expansion contract of :meth:`GraphStore.expand`, sorted by node id.

    ``adjacency`` lists each node's links in :func:`link_order`; it may be truncated to the first
    ``caps.fanout_per_node`` visible links per node, and need only cover nodes within
    ``caps.depth - 1`` hops, since the walk never looks further. ``nodes`` must hold every node the
    links lead to. ``mentions`` (memory units) and ``last_mentions`` (concepts) are derived from
    ``adjacency`` when not given, which is right only when the adjacency is complete.
    """
    best = _walk(nodes, adjacency, seeds, caps, not_after)
    out: list[GraphCandidate] = []
    for ident in sorted(best):
        score, hops, seed_id, path = best[ident]
        node = nodes[ident]
        mentioned: tuple[str, ...] = ()
        last_mention: float | None = None
        if node.kind is Kind.MEMORY_UNIT:
            mentioned = mentions.get(ident, ()) if mentions is not None else mentions_of(adjacency.get(ident, ()))
        elif node.kind is Kind.CONCEPT:
            last_mention = (
                last_mentions.get(ident)
                if last_mentions is not None
                else last_mention_of(adjacency.get(ident, ()), nodes, not_after)
            )
        out.append(
            GraphCandidate(
                node=node,
                hops=hops,
                seed_id=seed_id,
                path=path,
                path_score=score,
                mentions=mentioned,
                last_mention_ts=last_mention,
            )
        )
    return out
