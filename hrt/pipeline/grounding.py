"""The grounding stage: hybrid vector + lexical search per phrase, fused by RRF, with an
adaptive threshold decided in one pass over the scores the search already returned.

Adaptive threshold (per phrase). Thresholds run from ``threshold_max`` down to ``threshold_min``
in ``threshold_step`` steps; the first one that admits at least ``target = ceil(ratio x
seeds_per_phrase)`` hits is kept, else the floor. Rather than a query per step, counting the
already returned similarities gives the same answer without another round trip.

Admission: a hit is admitted when its cosine similarity reaches the phrase's threshold, or when it
is among the ``target`` best lexical hits and reaches the floor (exact words matter even when the
embedding is lukewarm). Admitted hits are ordered by RRF over their vector and lexical ranks,
ties by id, and the first ``seeds_per_phrase`` become seeds. A phrase with no admitted hit is
unmatched.

Semantic evidence (``semantic_evidence``): with ``cosine`` a hit's direct evidence for a
phrase is its cosine similarity; with ``fused`` it is its RRF score over both legs, normalised so
that the first hit of both legs scores 1.0, which keeps the lexical leg's evidence in scoring
(the default).
Seed choice and thresholds are the same in both modes: thresholds read the cosine, seeds are
ordered by RRF.

Across phrases (``phrase_evidence``): an entity's direct evidence, and a seed's score, is

- ``max``: its best evidence over the phrases (CombMAX);
- ``mean``: the sum of its evidence over all phrases divided by the number of phrases, a phrase
  that did not return it counting 0 (CombSUM, normalised into [0, 1]).

``mean`` rewards what several phrases agree on and keeps one short phrase ("Caroline") from lifting
everything it matches. ``fused`` evidence needs it most: it gives the first hit of every phrase
1.0, however short the phrase (the four combinations on LoCoMo dev: docs/eval-locomo.md).

``mean`` shrinks the semantic term of an entity only one phrase matches (to 1/n of it), which
matters when recency, salience or preference also weigh: it suits requests whose phrases describe
one need, not phrases naming unrelated topics. Both stay off by default.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hrt.config import GroundingConfig
from hrt.contract import Filters
from hrt.pipeline.context import settle
from hrt.pipeline.seeds import add_named_seeds
from hrt.records import Kind
from hrt.stores.base import PhraseVectors, SearchFilter, VectorHit, VectorIndex

if TYPE_CHECKING:
    from hrt.pipeline.context import RequestContext, Services
    from hrt.pipeline.intake import Intake
    from hrt.records import Preference

EPS = 1e-9


def rrf_score(ranks: Sequence[int | None], k: int = 60) -> float:
    """Reciprocal Rank Fusion: sum of 1/(k + rank) over the lists an item appears in."""
    return sum(1.0 / (k + r) for r in ranks if r is not None)


def threshold_ladder(high: float, low: float, step: float) -> list[float]:
    steps = math.floor((high - low) / step + EPS)
    return [round(high - i * step, 6) for i in range(steps + 1)]


def adaptive_threshold(similarities: Sequence[float], target: int, high: float, low: float, step: float) -> float:
    """The highest threshold on the ladder that admits at least ``target`` similarities, else
    ``low``: what a lowering loop of queries converges to, computed in one pass."""
    ordered = sorted(similarities, reverse=True)
    for threshold in threshold_ladder(high, low, step):
        count = sum(1 for s in ordered if s >= threshold - EPS)
        if count >= target:
            return threshold
    return low


@dataclass(frozen=True, slots=True)
class PhraseResult:
    phrase: str
    threshold: float
    best_similarity: float
    seed_ids: tuple[str, ...]

    @property
    def matched(self) -> bool:
        return bool(self.seed_ids)


@dataclass(slots=True)
class Grounding:
    phrases: list[PhraseResult]
    seeds: dict[str, float] = field(default_factory=dict)  # seed id -> semantic score in [0, 1]
    kinds: dict[str, Kind] = field(default_factory=dict)  # every hit seen
    similarity: dict[str, float] = field(default_factory=dict)  # direct evidence per hit seen (over phrases)
    phrases_of: dict[str, list[str]] = field(default_factory=dict)  # seed id -> phrases grounding it
    hit_phrases: dict[str, list[str]] = field(default_factory=dict)  # hit id -> phrases whose search returned it
    best_effort: list[str] = field(default_factory=list)  # seeds taken below the floor (:func:`best_effort`)

    @property
    def unmatched(self) -> list[str]:
        return [p.phrase for p in self.phrases if not p.matched]


def ground_phrase(phrase: str, hits: Sequence[VectorHit], cfg: GroundingConfig) -> tuple[PhraseResult, list[VectorHit]]:
    target = max(1, math.ceil(cfg.threshold_target_ratio * cfg.seeds_per_phrase - EPS))
    threshold = adaptive_threshold(
        [h.similarity for h in hits], target, cfg.threshold_max, cfg.threshold_min, cfg.threshold_step
    )
    admitted = [
        h
        for h in hits
        if h.similarity >= threshold - EPS
        or (
            cfg.lexical_admits_at_floor
            and h.lexical_rank is not None
            and h.lexical_rank <= target
            and h.similarity >= cfg.threshold_min - EPS
        )
    ]
    admitted.sort(key=lambda h: (-rrf_score((h.vector_rank, h.lexical_rank), cfg.rrf_k), h.id))
    chosen = admitted[: cfg.seeds_per_phrase]
    best = max((h.similarity for h in hits), default=0.0)
    return PhraseResult(phrase, threshold, best, tuple(h.id for h in chosen)), chosen


def fused_similarity(hit: VectorHit, rrf_k: int) -> float:
    """RRF over the hit's vector and lexical ranks, normalised: 1.0 for the first hit of both legs."""
    return rrf_score((hit.vector_rank, hit.lexical_rank), rrf_k) / (2.0 / (rrf_k + 1))


def combine_phrase_evidence(per_phrase: Sequence[float], n_phrases: int, mode: str) -> float:
    """One entity's evidence over the request's ``n_phrases`` phrases, from its evidence for each
    phrase that returned it (``per_phrase``; the others count 0): the best (``max``), or the sum
    over all phrases divided by their number (``mean``; each term clamped to [0, 1] first)."""
    if mode == "max":
        return max(per_phrase, default=0.0)
    if mode == "mean":
        return sum(min(1.0, max(0.0, e)) for e in per_phrase) / max(1, n_phrases)
    raise ValueError(f"unknown phrase_evidence {mode!r}")


def search_filter(filters: Filters, valid_at: float | None = None) -> SearchFilter | None:
    """The request's filters that search can apply (memory units' tags and agents, the time range
    of memory units and artifacts, each entity's own validity at ``valid_at``), so each leg's top
    k holds what the request can return. Kinds stay unfiltered: seeds of any kind lead the walk to
    the kinds the request wants."""
    tr = filters.time_range
    where = SearchFilter(
        tags=tuple(filters.tags),
        source_agent_ids=tuple(filters.source_agent_ids),
        ts_from=tr.start.timestamp() if tr is not None and tr.start is not None else None,
        ts_to=tr.end.timestamp() if tr is not None and tr.end is not None else None,
        valid_at=valid_at,
    )
    return where or None


# hits per phrase that seed the walk when no phrase grounded (:func:`best_effort`)
BEST_EFFORT_SEEDS = 3


def best_effort(
    grounding: Grounding,
    per_phrase: Sequence[Sequence[VectorHit]],
    evidence: Callable[[VectorHit], float],
    cfg: GroundingConfig,
) -> None:
    """No phrase reached its floor: each phrase's best :data:`BEST_EFFORT_SEEDS` hits (by RRF)
    seed the walk with their own evidence, and the response says so (``best_effort``). The
    phrases stay unmatched."""
    for result, hits in zip(grounding.phrases, per_phrase, strict=True):
        ranked = sorted(hits, key=lambda h: (-rrf_score((h.vector_rank, h.lexical_rank), cfg.rrf_k), h.id))
        for h in ranked[:BEST_EFFORT_SEEDS]:
            grounding.seeds[h.id] = max(grounding.seeds.get(h.id, 0.0), min(1.0, max(0.0, evidence(h))))
            grounding.phrases_of.setdefault(h.id, []).append(result.phrase)
            if h.id not in grounding.best_effort:
                grounding.best_effort.append(h.id)


async def run_grounding(intake: Intake, vectors: PhraseVectors, index: VectorIndex, cfg: GroundingConfig) -> Grounding:
    if not intake.phrases:  # named seeds alone (hrt/pipeline/seeds.py): nothing to search for
        return Grounding(phrases=[])
    per_phrase = await index.search(
        intake.user_id,
        list(intake.phrases),
        vectors,
        kinds=list(Kind),
        k=cfg.search_k,
        not_after=intake.as_of.timestamp(),
        where=search_filter(intake.filters, intake.validity_filter),
    )
    fused = cfg.semantic_evidence == "fused"

    def evidence(h: VectorHit) -> float:
        return fused_similarity(h, cfg.rrf_k) if fused else h.similarity

    grounding = Grounding(phrases=[])
    found: dict[str, list[float]] = {}  # hit id -> its evidence for each phrase that returned it
    for phrase, hits in zip(intake.phrases, per_phrase, strict=True):
        result, chosen = ground_phrase(phrase, hits, cfg)
        grounding.phrases.append(result)
        for h in hits:
            grounding.kinds[h.id] = h.kind
            found.setdefault(h.id, []).append(evidence(h))
            grounding.hit_phrases.setdefault(h.id, []).append(phrase)
        for h in chosen:
            score = min(1.0, max(0.0, evidence(h)))
            grounding.seeds[h.id] = max(grounding.seeds.get(h.id, 0.0), score)
            grounding.phrases_of.setdefault(h.id, []).append(phrase)
    if not grounding.seeds:
        best_effort(grounding, per_phrase, evidence, cfg)
    mode = cfg.phrase_evidence
    n = len(intake.phrases)
    grounding.similarity = {i: combine_phrase_evidence(e, n, mode) for i, e in found.items()}
    if mode != "max":  # a seed scores its evidence over every phrase, as any other hit
        grounding.seeds = {i: min(1.0, max(0.0, grounding.similarity[i])) for i in grounding.seeds}
    return grounding


async def start_search(ctx: RequestContext, services: Services) -> None:
    """The intake stage's prefetch, which the runner starts once intake is done: grounding's search
    (its lexical leg needs no vectors: at 1M documents that leg is most of the grounding), with the
    preferences scoring needs beside it, then the wait for the vectors (intake's time ends when
    they are in). Nothing for a user nothing was ever stored for."""
    if not ctx.user_known:
        return
    embedding, intake = ctx.embedding, ctx.intake
    try:
        ctx.searching = asyncio.ensure_future(
            asyncio.gather(
                run_grounding(intake, embedding, services.vectors, ctx.cfg.grounding),
                services.records.preferences(intake.user_id),
            )
        )
        await asyncio.shield(embedding)
    except BaseException:
        await settle(embedding, ctx.searching)
        raise


@dataclass(frozen=True, slots=True)
class Grounded:
    """What the grounding stage provides: the phrases' seeds and similarities (with the request's
    named seeds joined), and the user's preferences (read beside the search)."""

    grounding: Grounding
    preferences: list[Preference]


async def grounding_stage(ctx: RequestContext, services: Services) -> str:
    """The grounding stage: the search the intake stage started (and the user's preferences, read
    beside it), then the request's named seeds join the grounded ones."""
    searching = ctx.searching
    assert searching is not None  # started by the runner (start_search, intake's prefetch)
    try:
        grounding, preferences = await searching
    except BaseException:
        await settle(searching)
        raise
    add_named_seeds(grounding, ctx.intake.seed_ids)
    ctx.grounded = Grounded(grounding, preferences)
    return "ok"
