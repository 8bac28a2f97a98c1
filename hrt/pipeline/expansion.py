"""The expansion stage: one graph call from all seeds to the request's depth, then the filters;
its prefetch starts the vector reads scoring needs, which run beside the validity stage's graph
read (hrt/pipeline/validity.py).

Fan-out is capped per node (strongest edges first, then newest neighbours, then id) and per kind,
so a hub concept cannot explode the frontier. A candidate's path score is its seed's semantic
score times ``hop_decay x edge weight`` per hop; the best path wins, ties by visit order; each
candidate also carries the hop at which the walk first reached it (its distance from the seeds).
Depth 0 still calls the graph once: it returns the seeds with the attributes scoring needs.

Own evidence (:func:`own_similarities`): the ``reached_evidence`` rules ``scoped`` (default) and
``path_x_cosine`` weigh a candidate's path by its own best cosine similarity to the phrases
(``hrt/pipeline/scoring.py``): those of the candidates that need it are read from the vector
index in one call (``VectorIndex.similarities``), after the walk. A candidate the index has no
vector for (its projection still pending) is left out, and scoring keeps its path. With
``passage_weight`` above 0, the same read also takes every memory unit candidate's own cosine, and
a second (:func:`passage_evidence`) the best passage cosine (hrt.records.passage_texts) of the
``passage_pool`` best of them, which scoring mixes into the semantic term.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from hrt.config import ExpansionConfig, RetrievalConfig
from hrt.pipeline.grounding import Grounding
from hrt.pipeline.intake import Intake
from hrt.pipeline.scoring import candidate_semantic
from hrt.pipeline.seeds import settle_named_seeds
from hrt.pipeline.selection import filter_candidates, filter_metadata
from hrt.records import Kind
from hrt.stores.base import ExpansionCaps, GraphCandidate, GraphStore, Vector, VectorIndex

if TYPE_CHECKING:
    from hrt.contract import SeedGrounding
    from hrt.pipeline.context import RequestContext, Services


async def run_expansion(
    intake: Intake, grounding: Grounding, graph: GraphStore, cfg: ExpansionConfig
) -> list[GraphCandidate]:
    if not grounding.seeds:
        return []
    caps = ExpansionCaps(
        depth=intake.depth,
        fanout_per_node=cfg.fanout_per_node,
        max_per_kind=cfg.max_candidates_per_kind,
        hop_decay=cfg.hop_decay,
    )
    not_after = intake.as_of.timestamp()
    candidates = await graph.expand(
        intake.user_id, grounding.seeds, caps, not_after=not_after, valid_at=intake.validity_filter
    )
    if cfg.path_evidence == "noisy_or" and intake.depth > 0 and candidates:
        return await _noisy_or_paths(intake, grounding, graph, caps, candidates)
    return candidates


async def _noisy_or_paths(
    intake: Intake, grounding: Grounding, graph: GraphStore, caps: ExpansionCaps, candidates: list[GraphCandidate]
) -> list[GraphCandidate]:
    """``path_evidence = "noisy_or"``: each candidate's ``path_score`` becomes
    ``1 - (1 - direct) x prod over seeds (1 - best path from that seed)`` over its direct evidence
    (grounding) and the best path from every seed that reaches it in at least one hop, so a turn
    that two matching observations cite, or that matches and is cited, outranks one with a single
    piece of evidence; scoring's ``max(direct, path)`` then reads it. ``GraphStore.expand`` returns
    each node's best path only, so this walks once more per seed (the candidates stay those of the
    one walk above)."""
    not_after = intake.as_of.timestamp()
    reached: dict[str, list[float]] = defaultdict(list)
    for seed_id, score in sorted(grounding.seeds.items()):
        walked = await graph.expand(
            intake.user_id, {seed_id: score}, caps, not_after=not_after, valid_at=intake.validity_filter
        )
        for c in walked:
            if c.hops > 0:
                reached[c.node.id].append(c.path_score)
    out: list[GraphCandidate] = []
    for c in candidates:
        evidence = [grounding.similarity.get(c.node.id, 0.0), *reached.get(c.node.id, ())]
        miss = math.prod(1.0 - min(1.0, max(0.0, e)) for e in evidence)
        out.append(replace(c, path_score=max(c.path_score, 1.0 - miss)))
    return out


def needs_own(candidates: Iterable[GraphCandidate], hits: Mapping[str, float], rule: str) -> list[str]:
    """The candidates whose own cosine the rule reads: under ``path_x_cosine`` those no search
    returned; under ``scoped`` those too, and every candidate two or more hops from the seeds."""
    if rule == "path_x_cosine":
        return [c.node.id for c in candidates if c.node.id not in hits]
    if rule == "scoped":
        return [c.node.id for c in candidates if c.distance >= 2 or (c.distance == 1 and c.node.id not in hits)]
    return []


async def own_similarities(
    intake: Intake,
    candidates: list[GraphCandidate],
    hits: Mapping[str, float],
    vectors: Vector,
    index: VectorIndex,
    rule: str,
    units: bool = False,
) -> tuple[dict[str, float], dict[str, float]]:
    """The own best cosine to the phrases of the candidates ``rule`` needs it for and, with
    ``units`` (passages in use), of every memory unit candidate too, in one read (none when
    nothing is needed)."""
    wanted = needs_own(candidates, hits, rule)
    unit_ids = [c.node.id for c in candidates if c.node.kind is Kind.MEMORY_UNIT] if units else []
    ids = sorted({*wanted, *unit_ids})
    if not ids:
        return {}, {}
    found = await index.similarities(intake.user_id, ids, vectors)
    return {i: found[i] for i in wanted if i in found}, {i: found[i] for i in unit_ids if i in found}


async def passage_evidence(
    intake: Intake,
    candidates: list[GraphCandidate],
    hits: Mapping[str, float],
    own: Mapping[str, float],
    unit_own: Mapping[str, float],
    vectors: Vector,
    index: VectorIndex,
    cfg: ExpansionConfig,
    pool: int,
) -> dict[str, float]:
    """Every memory unit candidate's passage evidence (``passage_weight``): for the ``pool`` best
    by their semantic term so far (ties by id), their best passage cosine, read in one call
    (``VectorIndex.passage_similarities``); for the rest, their own cosine (``unit_own``), what a
    memory unit without passages has. LoCoMo dev: passages beyond the first 50 change no answer
    that matters (docs/eval-locomo.md, "Scoring defaults"), and reading them all costs time at 100k."""
    ranked = sorted(
        (
            -candidate_semantic(c, hits.get(c.node.id), own.get(c.node.id), cfg.reached_evidence, cfg.hop_decay),
            c.node.id,
        )
        for c in candidates
        if c.node.kind is Kind.MEMORY_UNIT
    )
    top = sorted({ident for _, ident in ranked[:pool]})
    out = dict(unit_own)
    if top:
        read = await index.passage_similarities(intake.user_id, top, vectors)
        out.update({ident: best for ident, (_, best) in read.items()})
    return out


async def scoring_reads(
    intake: Intake,
    candidates: list[GraphCandidate],
    hits: Mapping[str, float],
    vectors: Vector,
    index: VectorIndex,
    cfg: RetrievalConfig,
) -> tuple[dict[str, float], dict[str, float]]:
    """The vector-index reads scoring needs beyond the search hits: the own cosines the
    reached-evidence rule needs, then (``passage_weight`` above 0) the memory units' passage
    evidence. The passage pool is chosen among the candidates of the walk, before what was not
    valid is set aside."""
    if not intake.phrases:  # named seeds alone: no cosine to read (hrt/pipeline/seeds.py)
        return {}, {}
    passages = cfg.scoring.passage_weight > 0.0
    own, unit_own = await own_similarities(
        intake, candidates, hits, vectors, index, cfg.expansion.reached_evidence, units=passages
    )
    if not passages:
        return own, {}
    passage = await passage_evidence(
        intake, candidates, hits, own, unit_own, vectors, index, cfg.expansion, cfg.scoring.passage_pool
    )
    return own, passage


@dataclass(frozen=True, slots=True)
class Expanded:
    """What the expansion stage provides: the walk's candidates that the request's filters leave
    (validity, the next stage, sets aside what was not true at ``valid_at``), and the named seeds
    as settled."""

    candidates: list[GraphCandidate]
    named: SeedGrounding | None


@dataclass(frozen=True, slots=True)
class OwnEvidence:
    """What expansion's prefetch reads for scoring: own cosines, passage cosines, by id."""

    own: dict[str, float]
    passages: dict[str, float]


async def expansion_stage(ctx: RequestContext, services: Services) -> str:
    """The expansion stage: the walk; the named seeds settled; what the request's filters exclude
    left out (never scored: the relevance gate measures against the best candidate the request can
    get). ``skipped`` at depth 0."""
    intake, grounding = ctx.intake, ctx.grounded.grounding
    candidates = await run_expansion(intake, grounding, services.graph, ctx.cfg.expansion)
    named = settle_named_seeds(grounding, intake.seed_ids, candidates)
    candidates = filter_candidates(candidates, intake.filters)
    if intake.filters.metadata is not None:
        candidates = await filter_metadata(intake.user_id, candidates, intake.filters.metadata, services.records)
    ctx.expanded = Expanded(candidates, named)
    return "ok" if intake.depth > 0 else "skipped"


async def start_own_evidence(ctx: RequestContext, services: Services) -> None:
    """The expansion stage's prefetch: the vector reads scoring needs (:func:`scoring_reads`),
    started before validity's graph read so that the two round trips are in flight at once;
    scoring awaits them (``ctx.own_evidence``)."""
    ctx.own_evidence = ctx.started(_own_evidence(ctx, services))


async def _own_evidence(ctx: RequestContext, services: Services) -> OwnEvidence:
    grounding = ctx.grounded.grounding
    own, passages = await scoring_reads(
        ctx.intake, ctx.expanded.candidates, grounding.similarity, ctx.embedding.result(), services.vectors, ctx.cfg
    )
    return OwnEvidence(own, passages)
