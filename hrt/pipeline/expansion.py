"""Stage 3, expansion: one graph call from all seeds to the request's depth.

Fan-out is capped per node (strongest edges first, then newest neighbours, then id) and per kind,
so a hub concept cannot explode the frontier. A candidate's path score is its seed's semantic
score times ``hop_decay x edge weight`` per hop; the best path wins, ties by visit order. Depth 0
still calls the graph once: it returns the seeds with the attributes scoring needs.

Reached evidence (``reached_evidence``): a candidate that no phrase's search returned has only its
path as semantic evidence, and every turn an observation derives from, or every neighbour of a
hub, inherits the same path score. With ``path_x_cosine`` that path score is multiplied by the
candidate's own best cosine similarity to the phrases (clamped at 0), read from the vector index in
one call: a reached candidate scores as high as its path *and* its text allow. A candidate the
index has no vector for (its projection still pending) keeps its path score. LoCoMo dev, HRT full
(fused evidence, depth 1): recall@10 74.7 -> 75.6, recall@5 62.8 -> 63.8, nDCG@10 53.4 -> 54.1,
adversarial recall@10 75.7 -> 79.5 (docs/eval-locomo.md). Off by default: it costs a read per
request, and it shrinks the semantic term of reached candidates, which shifts HRT's default
weights towards recency and salience in a way LoCoMo (asked with semantic weight alone) cannot
measure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from hrt.config import Settings
from hrt.pipeline.grounding import Grounding
from hrt.pipeline.intake import Intake
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphStore, Vector, VectorIndex


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


async def scale_reached(
    intake: Intake,
    candidates: list[GraphCandidate],
    hits: Mapping[str, float],
    vectors: Vector,
    index: VectorIndex,
) -> list[GraphCandidate]:
    """``reached_evidence=path_x_cosine``: each candidate not in ``hits`` (the search hits' direct
    evidence) with its path score times its own best cosine to the phrases, clamped at 0."""
    reached = [c.node.id for c in candidates if c.node.id not in hits]
    if not reached:
        return candidates
    own = await index.similarities(intake.user_id, reached, vectors)
    return [
        replace(c, path_score=c.path_score * max(0.0, own[c.node.id]))
        if c.node.id not in hits and c.node.id in own
        else c
        for c in candidates
    ]
