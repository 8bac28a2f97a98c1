"""The neighbours stage: the graph reads assembly shows beside the returned items, so that
assembly itself reads no store.

A returned memory unit's concepts (``MENTIONS`` out, newest first, up to
:data:`CONNECTED_CONCEPTS`) and a returned concept's newest mentioning memory units (enough for
``related_items`` once the returned ones are set apart: assembly's ``related_memory_units``), both
as true at the request's ``valid_at`` and known as of its ``as_of``, the two reads in flight at
once; the memory units that a successor replaced by ``valid_at`` are then left out of a concept's
list (:func:`current_neighbours`). The response reports this stage as part of assembly
(``retrieval_metadata.stages``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hrt.pipeline.intake import Intake
from hrt.pipeline.validity import MAX_SUCCESSORS, Validity, interval_of
from hrt.records import EdgeType, Kind
from hrt.stores.base import GraphNode, GraphStore

if TYPE_CHECKING:
    from hrt.pipeline.context import RequestContext, Services

CONNECTED_CONCEPTS = 50  # a memory unit's connected concepts shown, newest first


@dataclass(frozen=True, slots=True)
class Neighbours:
    """What the neighbours stage provides: each returned memory unit's concepts and each returned
    concept's newest current memory units, by id."""

    concepts_of: dict[str, list[GraphNode]]
    units_of: dict[str, list[GraphNode]]


NO_NEIGHBOURS = Neighbours({}, {})


async def neighbours_stage(ctx: RequestContext, services: Services) -> str:
    """The neighbours stage (module docstring)."""
    intake, graph = ctx.intake, services.graph
    not_after, at = intake.as_of.timestamp(), intake.validity_filter
    selected = ctx.selection.selected
    mu_ids = [x.id for x in selected[Kind.MEMORY_UNIT]]
    concept_ids = [x.id for x in selected[Kind.CONCEPT]]
    related = ctx.cfg.assembly.related_items + len(mu_ids)
    concepts_of, units_of = await asyncio.gather(
        mentions(graph, intake.user_id, mu_ids, True, CONNECTED_CONCEPTS, not_after, at),
        mentions(graph, intake.user_id, concept_ids, False, related, not_after, at),
    )
    units_of = await current_neighbours(intake, units_of, ctx.validity, graph)
    ctx.neighbours = Neighbours(concepts_of, units_of)
    return "ok"


async def mentions(
    graph: GraphStore,
    user_id: str,
    ids: list[str],
    outgoing: bool,
    limit: int,
    not_after: float,
    valid_at: float | None,
) -> dict[str, list[GraphNode]]:
    """The ``MENTIONS`` neighbours (up to ``limit`` each) that assembly shows, as true at
    ``valid_at``; no read for no ids."""
    if not ids:
        return {}
    return await graph.neighbors(user_id, ids, EdgeType.MENTIONS, outgoing, limit, not_after, valid_at)


async def current_neighbours(
    intake: Intake, lists: dict[str, list[GraphNode]], validity: Validity, graph: GraphStore
) -> dict[str, list[GraphNode]]:
    """Assembly's neighbour lists (a concept's related memory units) without the superseded ones:
    the store already left out what its own or its edge's interval excludes; supersession is
    known for the candidates, and read (one call) for the others. Unchanged with
    ``include_invalidated``."""
    if intake.include_invalidated:
        return lists
    kept = {c.node.id for c in validity.candidates}
    unknown = sorted(
        {n.id for nodes in lists.values() for n in nodes if n.kind is not Kind.CONCEPT} - kept - validity.dropped
    )
    gone = set(validity.dropped)
    if unknown:
        at = intake.event_time.timestamp()
        by = await graph.neighbors(
            intake.user_id, unknown, EdgeType.SUPERSEDES, False, MAX_SUCCESSORS, intake.as_of.timestamp()
        )
        nodes = {n.id: n for ns in lists.values() for n in ns}
        gone |= {i for i in unknown if not interval_of(nodes[i], by.get(i, []), at).valid}
    if not gone:
        return lists
    return {k: [n for n in ns if n.id not in gone] for k, ns in lists.items()}
