"""Stage 3, expansion: one graph call from all seeds to the request's depth.

Fan-out is capped per node (strongest edges first, then newest neighbours, then id) and per kind,
so a hub concept cannot explode the frontier. A candidate's path score is its seed's semantic
score times ``hop_decay x edge weight`` per hop; the best path wins, ties by visit order. Depth 0
still calls the graph once: it returns the seeds with the attributes scoring needs.
"""

from __future__ import annotations

from hrt.config import Settings
from hrt.pipeline.grounding import Grounding
from hrt.pipeline.intake import Intake
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphStore


async def run_expansion(
    intake: Intake, grounding: Grounding, graph: GraphStore, settings: Settings
) -> list[GraphCandidate]:
    if not grounding.seeds:
        return []
    caps = ExpansionCaps(
        depth=intake.depth,
        fanout_per_node=settings.fanout_per_node,
        max_per_kind=settings.max_candidates_per_kind,
        hop_decay=settings.hop_decay,
    )
    return await graph.expand(intake.user_id, grounding.seeds, caps, not_after=intake.as_of.timestamp())
