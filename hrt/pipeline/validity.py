"""The validity stage: set aside the candidates that were not true at the request's ``valid_at``.

HRT keeps two times (docs/api.md, "Facts that change"): when it learned a fact (a memory unit's
``creation_ts``, an artifact's ``created_at``: the request's ``as_of`` hides what was learned
later) and when the fact was true (``valid_from``/``valid_to``, event time: the request's
``valid_at``, by default its ``as_of``). Search and the walk already keep to both where they can
(search by each entity's own interval, the walk by each edge's); this stage decides the rest,
from the candidates the walk returned and one read of the graph:

- **Supersession.** A memory unit or artifact that a successor names in ``supersedes`` (a
  ``SUPERSEDES`` edge from the successor) stops being true when the successor starts (its
  ``valid_from``, else its creation), unless it has its own ``valid_to``. Only successors known as
  of ``as_of`` count, so a request as of before the successor was written still sees the old fact
  as current: the answer is what HRT knew then. The successors are read as of the request, not
  stored on the old fact, which keeps every answer a function of the data and the request.
- **Own intervals**, for what the walk reached (search already left out the documents whose own
  interval excludes ``valid_at``).
- **Concepts** become known at their first mention, or at their own ``valid_from`` when they
  have one: a concept without one that memory units mention, none of them written by ``as_of``,
  was not known then and is left out (not counted: like a memory unit written after ``as_of``, it
  did not exist for the request). A concept nothing mentions is known from the start; its own
  ``valid_from``/``valid_to`` apply as to any entity.

Without ``include_invalidated`` the candidates not valid at ``valid_at`` are dropped and counted
per kind (``retrieval_metadata.validity.suppressed``); with it they stay, marked, and score no
recency (scoring): a fact that no longer holds never outranks its successor for being recent.

The response reports this stage as part of expansion (``retrieval_metadata.stages``); its read
runs while the vector reads expansion's prefetch started are in flight.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hrt.pipeline.intake import Intake
from hrt.records import MAX_SUPERSEDES as _MAX_NAMED
from hrt.records import EdgeType, Kind
from hrt.stores.base import GraphCandidate, GraphNode, GraphStore, valid_at

if TYPE_CHECKING:
    from hrt.pipeline.context import RequestContext, Services

# successors read per candidate, newest first: a fact named by more successors than this (a fact is
# normally replaced once, a chain link by link) may come out ending at a later successor's start
MAX_SUCCESSORS = 4 * _MAX_NAMED


@dataclass(frozen=True, slots=True)
class Interval:
    """A candidate's validity as the request sees it (epoch seconds, None open)."""

    valid_from: float | None
    valid_to: float | None  # its own, else its earliest known successor's start
    superseded_by: tuple[str, ...]  # successors known as of the request, by id
    valid: bool  # holds at valid_at


@dataclass(slots=True)
class Validity:
    candidates: list[GraphCandidate]  # those kept, in their order
    at: float = 0.0  # the request's valid_at, epoch seconds
    successors: dict[str, list[GraphNode]] = field(default_factory=dict)  # known as of the request
    suppressed: dict[Kind, int] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)  # the ids set aside
    # kept candidates that do not hold at valid_at (only with include_invalidated): no recency
    stale: frozenset[str] = frozenset()

    def interval(self, node: GraphNode) -> Interval:
        """A kept candidate's interval as the request sees it (made for the returned items only)."""
        return interval_of(node, self.successors.get(node.id, []), self.at)


def interval_of(node: GraphNode, successors: list[GraphNode], at: float) -> Interval:
    end = node.valid_to
    named = tuple(sorted(s.id for s in successors))
    if end is None and successors:
        starts = [s.valid_from if s.valid_from is not None else s.ts for s in successors]
        known = [s for s in starts if s is not None]
        end = min(known) if known else None
    return Interval(node.valid_from, end, named, valid_at(node.valid_from, end, at))


async def run_validity(intake: Intake, candidates: list[GraphCandidate], graph: GraphStore) -> Validity:
    """Each candidate's interval, and the candidates the request keeps (module docstring)."""
    as_of = intake.as_of.timestamp()
    at = intake.event_time.timestamp()
    if not candidates:
        return Validity(candidates, at=at)
    replaceable = [c.node.id for c in candidates if c.node.kind is not Kind.CONCEPT]
    # concepts no mention as of the request dates, nor a valid_from of their own: are they
    # mentioned at all (later)?
    undated = [
        c.node.id
        for c in candidates
        if c.node.kind is Kind.CONCEPT and c.last_mention_ts is None and c.node.valid_from is None
    ]
    successors, mentioned = await asyncio.gather(
        graph.neighbors(intake.user_id, replaceable, EdgeType.SUPERSEDES, False, MAX_SUCCESSORS, as_of)
        if replaceable
        else _nothing(),
        graph.neighbors(intake.user_id, undated, EdgeType.MENTIONS, False, 1) if undated else _nothing(),
    )
    out = Validity([], at=at, successors={k: v for k, v in successors.items() if v})
    stale: set[str] = set()
    kept, ends, unknown = out.candidates, out.successors, {k for k, v in mentioned.items() if v}
    for c in candidates:
        node = c.node
        # the common case, first and cheap (it runs for every candidate): nothing ends it, it has
        # begun, and it is known
        start = node.valid_from
        if node.valid_to is None and (start is None or start <= at) and node.id not in ends:
            if not unknown or node.id not in unknown:
                kept.append(c)
            continue
        if node.id in unknown:
            continue  # first mentioned after as_of: not known yet
        if not out.interval(node).valid:
            if not intake.include_invalidated:
                out.suppressed[node.kind] = out.suppressed.get(node.kind, 0) + 1
                out.dropped.add(node.id)
                continue
            stale.add(node.id)
        kept.append(c)
    out.stale = frozenset(stale)
    return out


async def _nothing() -> dict[str, list[GraphNode]]:
    return {}


async def validity_stage(ctx: RequestContext, services: Services) -> str:
    """The validity stage: the candidates expansion found, with what was not true at ``valid_at``
    set aside (module docstring)."""
    ctx.validity = await run_validity(ctx.intake, ctx.expanded.candidates, services.graph)
    return "ok"
