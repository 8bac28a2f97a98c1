"""The assembly stage: the AugmentedMemoryContext V9.4, deterministic to the byte.

Snippets: a text that fits in ``snippet_chars`` is kept whole. A longer one is cut to a window
around the earliest occurrence of a key phrase (whole phrase first, else its first content word
found), starting about a third of the window before it, snapped to word boundaries, with "…"
marking each cut. With no occurrence, the window is the text's beginning.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hrt.config import AssemblyConfig
from hrt.contract import (
    CONTRACT_VERSION,
    AugmentedMemoryContext,
    BestEffort,
    IdName,
    IdTitle,
    ItemInterval,
    ItemProvenance,
    MemoryUnitAttributes,
    PathHop,
    PhraseGrounding,
    RelevanceGate,
    RetrievalMetadata,
    RetrievedArtifact,
    RetrievedConcept,
    RetrievedMemoryUnit,
    ScoreBreakdown,
    ScoringDetails,
    TimeWindowOut,
    ValidityReport,
    WeightsUsed,
)
from hrt.pipeline.expansion import Expanded
from hrt.pipeline.grounding import Grounded, Grounding, ground_phrase
from hrt.pipeline.hydration import Hydrated
from hrt.pipeline.intake import Intake
from hrt.pipeline.neighbours import NO_NEIGHBOURS
from hrt.pipeline.render import render_context
from hrt.pipeline.rerank import RerankOutcome
from hrt.pipeline.scoring import Evidence, EvidenceSource, Scored, Scores, best_semantic, evidence_source
from hrt.pipeline.seeds import settle_named_seeds
from hrt.pipeline.selection import Selection
from hrt.pipeline.validity import Validity
from hrt.records import Artifact, Concept, Entity, Kind, MemoryUnit, iso
from hrt.stores.base import GraphNode
from hrt.text import STOPWORDS, WORD

if TYPE_CHECKING:
    from hrt.metrics import Metrics
    from hrt.pipeline.context import RequestContext, Services


def iso_ts(ts: float) -> str:
    return iso(datetime.fromtimestamp(ts, UTC))


ELLIPSIS = "…"


def related_memory_units(
    concept_id: str,
    selected_mus: Sequence[GraphNode],
    mu_concepts: Mapping[str, Sequence[GraphNode]],
    concept_mus: Mapping[str, Sequence[GraphNode]],
    count: int,
) -> list[GraphNode]:
    """A concept's related memory units: those this response returns that mention it (in its
    order), then the newest others. ``mu_concepts`` holds the returned memory units' concepts and
    ``concept_mus`` the concept's newest mentioning memory units, at least ``count`` plus the
    number returned (so that ``count`` others remain once the returned ones are set apart)."""
    newest = concept_mus.get(concept_id, ())
    in_newest = {mu.id for mu in newest}
    returned = [
        mu for mu in selected_mus if mu.id in in_newest or any(c.id == concept_id for c in mu_concepts.get(mu.id, ()))
    ]
    shown = {mu.id for mu in selected_mus}
    others = [mu for mu in newest if mu.id not in shown]
    return (returned + others)[:count]


def find_anchor(text: str, phrases: Sequence[str]) -> int | None:
    lowered = text.casefold()
    positions = [pos for p in phrases if (pos := lowered.find(p.casefold())) >= 0]
    if positions:
        return min(positions)
    for p in phrases:
        for word in WORD.findall(p):
            if word.lower() in STOPWORDS or len(word) < 3:
                continue
            m = re.search(r"\b" + re.escape(word.casefold()), lowered)
            if m:
                positions.append(m.start())
        if positions:
            return min(positions)
    return None


def make_snippet(text: str, phrases: Sequence[str], max_chars: int) -> str:
    text = " ".join(text.split())
    if len(text) <= max_chars:
        return text
    anchor = find_anchor(text, phrases)
    start = 0 if anchor is None else max(0, anchor - max_chars // 3)
    if start > 0:
        space = text.rfind(" ", 0, start + 1)
        start = space + 1 if space >= 0 else start
    end = min(len(text), start + max_chars)
    if end < len(text):
        space = text.rfind(" ", start, end)
        if space > start:
            end = space
    body = text[start:end].strip()
    return (ELLIPSIS if start > 0 else "") + body + (ELLIPSIS if end < len(text) else "")


def rounder(decimals: int):  # type: ignore[no-untyped-def]
    def r(x: float) -> float:
        value = round(float(x), decimals)
        return 0.0 if value == 0 else value  # no "-0.0" in the output

    return r


def summary_text(
    n_phrases: int,
    n_seeds: int,
    n_candidates: int,
    depth: int,
    counts: Mapping[Kind, int],
    unmatched: Sequence[str],
    rerank_applied: bool,
    degraded_reasons: Sequence[str],
) -> str:
    unmatched_text = "[" + ", ".join(repr(p) for p in unmatched) + "]" if unmatched else "none"
    parts = [
        f"HRT: Processed {n_phrases} key phrase{'s' if n_phrases != 1 else ''}.",
        f"Found {n_seeds} seed entit{'ies' if n_seeds != 1 else 'y'} via hybrid search.",
        f"Expanded to {n_candidates} graph candidate{'s' if n_candidates != 1 else ''} at depth {depth}.",
        f"Prioritized and returned top {counts[Kind.MEMORY_UNIT]} MemoryUnits, "
        f"{counts[Kind.CONCEPT]} Concepts, {counts[Kind.ARTIFACT]} Artifacts.",
        f"Unmatched phrases: {unmatched_text}.",
    ]
    if rerank_applied:
        parts.append("Reranked.")
    if degraded_reasons:
        parts.append("Degraded: " + "; ".join(degraded_reasons) + ".")
    return " ".join(parts)


async def assembly_stage(ctx: RequestContext, services: Services) -> str:
    """The assembly stage: the response, from what the earlier stages provide (it reads no store),
    and its rendered text when the request asks for one (hrt/pipeline/render.py)."""
    if not ctx.user_known:
        nothing_stored(ctx)
    ctx.stages["assembly"] = "ok"  # the response reports this stage, which cannot fail from here
    mark_outages(ctx, services.metrics)  # the stages a store's fallback served: degraded
    response = ctx.response = assemble(ctx, services.deployment)
    response.retrieval_metadata.seed_grounding = ctx.expanded.named
    response.retrieval_metadata.user_known = None if ctx.user_known else False
    if ctx.request.render is not None:
        response.retrieval_metadata.rendered = render_context(response, ctx.hydrated.entities, ctx.request.render)
    return "ok"


def nothing_stored(ctx: RequestContext) -> None:
    """The state the skipped stages leave for a user nothing was ever stored for: every phrase
    grounded to nothing (as a search with no hit grounds it), every named seed unknown, no
    candidate, nothing selected."""
    grounding = Grounding(phrases=[ground_phrase(p, [], ctx.cfg.grounding)[0] for p in ctx.intake.phrases])
    ctx.grounded = Grounded(grounding, [])
    named = settle_named_seeds(grounding, ctx.intake.seed_ids, [])
    ctx.expanded = Expanded([], named)
    ctx.validity = Validity(candidates=[])
    ctx.scores = Scores(Evidence.of(ctx.cfg, windows=ctx.intake.windows), [])
    empty: dict[Kind, list[Scored]] = {kind: [] for kind in Kind}
    ctx.hydrated = Hydrated(empty, {}, {})
    ctx.reranked = RerankOutcome(items=empty, status="skipped", reason=None, applied=False)
    ctx.selection = Selection(empty, 0)
    ctx.neighbours = NO_NEIGHBOURS


def mark_outages(ctx: RequestContext, metrics: Metrics) -> None:
    """The stages whose reads a fallback answered (a store down, hrt/stores/fallback.py) become
    ``degraded``, their reasons added once each, in the pipeline's stage order then by text:
    the same outage gives the same response, whichever read found the store down first."""
    if not ctx.outages:
        return
    order = {name: i for i, name in enumerate(ctx.stages)}
    for stage, reason in sorted({(d.stage, d.reason) for d in ctx.outages}, key=lambda x: (order.get(x[0], 99), x)):
        if ctx.stages.get(stage) != "degraded":
            metrics.degraded.labels(stage=stage).inc()
        ctx.stages[stage] = "degraded"
        ctx.degraded.append(reason)


def assemble(ctx: RequestContext, deployment: str) -> AugmentedMemoryContext:
    """The response of a request whose selection is made (``ctx.selection``)."""
    cfg, intake, grounding, selected = ctx.cfg.assembly, ctx.intake, ctx.grounded.grounding, ctx.selection.selected
    entities = ctx.hydrated.entities
    r = rounder(cfg.score_decimals)
    phrases, neighbours = list(intake.phrases), ctx.neighbours
    mus = memory_units_out(selected, entities, neighbours.concepts_of, phrases, cfg, r)
    concepts = concepts_out(selected, entities, neighbours.concepts_of, neighbours.units_of, phrases, cfg, r)
    artifacts = artifacts_out(selected, entities, phrases, cfg, r)
    counts = {Kind.MEMORY_UNIT: len(mus), Kind.CONCEPT: len(concepts), Kind.ARTIFACT: len(artifacts)}
    n_candidates = len(ctx.scores.scored)
    w = intake.weights
    return AugmentedMemoryContext(
        retrieved_memory_units=mus,
        retrieved_concepts=concepts,
        retrieved_artifacts=artifacts,
        retrieval_summary=summary_text(
            len(phrases),
            len(grounding.seeds),
            n_candidates,
            intake.depth,
            counts,
            grounding.unmatched,
            ctx.reranked.applied,
            ctx.degraded,
        ),
        scoring_details=ScoringDetails(
            total_candidates_considered=n_candidates,
            seed_entities_identified_from_key_phrases=len(grounding.seeds),
            graph_traversal_depth_used=intake.depth,
            weights_used=WeightsUsed(
                alpha_semantic_similarity=r(w.alpha_semantic_similarity),
                beta_recency=r(w.beta_recency),
                gamma_salience=r(w.gamma_salience),
                delta_user_preference=r(w.delta_user_preference),
            ),
        ),
        unmatched_key_phrases=grounding.unmatched,
        retrieval_metadata=metadata(ctx, deployment, mus, r),
    )


def _breakdown(s: Scored, r: Callable[[float], float]) -> ScoreBreakdown:
    return ScoreBreakdown(
        semantic=r(s.semantic),
        recency=r(s.recency),
        salience=r(s.salience),
        preference=r(s.preference),
        rerank=None if s.rerank is None else r(s.rerank),
    )


def memory_units_out(
    selected: Mapping[Kind, Sequence[Scored]],
    entities: Mapping[str, Entity],
    mu_concepts: Mapping[str, Sequence[GraphNode]],
    phrases: Sequence[str],
    cfg: AssemblyConfig,
    r: Callable[[float], float],
) -> list[RetrievedMemoryUnit]:
    mus: list[RetrievedMemoryUnit] = []
    for s in selected.get(Kind.MEMORY_UNIT, ()):
        mu = entities[s.id]
        assert isinstance(mu, MemoryUnit)
        mus.append(
            RetrievedMemoryUnit(
                muid=mu.muid,
                title=mu.title,
                content_snippet=make_snippet(mu.content, phrases, cfg.snippet_chars),
                creation_ts=iso(mu.creation_ts),
                source_type=mu.source_type,
                importance_score=r(mu.importance_score),
                final_retrieval_score=r(s.final),
                score_breakdown=_breakdown(s, r),
                connected_concept_ids_and_names=[IdName(id=n.id, name=n.label) for n in mu_concepts.get(s.id, ())],
            )
        )
    return mus


def concepts_out(
    selected: Mapping[Kind, Sequence[Scored]],
    entities: Mapping[str, Entity],
    mu_concepts: Mapping[str, Sequence[GraphNode]],
    concept_mus: Mapping[str, Sequence[GraphNode]],
    phrases: Sequence[str],
    cfg: AssemblyConfig,
    r: Callable[[float], float],
) -> list[RetrievedConcept]:
    selected_mus = [s.candidate.node for s in selected.get(Kind.MEMORY_UNIT, ())]
    concepts: list[RetrievedConcept] = []
    for s in selected.get(Kind.CONCEPT, ()):
        c = entities[s.id]
        assert isinstance(c, Concept)
        neighbours = related_memory_units(s.id, selected_mus, mu_concepts, concept_mus, cfg.related_items)
        concepts.append(
            RetrievedConcept(
                id=c.id,
                name=c.name,
                type=c.type,
                description_snippet=make_snippet(c.description, phrases, cfg.snippet_chars),
                status=c.status,
                salience=r(c.salience),
                final_retrieval_score=r(s.final),
                score_breakdown=_breakdown(s, r),
                related_top_memory_unit_ids_and_titles=[IdTitle(id=n.id, title=n.label) for n in neighbours],
                key_properties_values={k: c.properties[k] for k in sorted(c.properties)},
            )
        )
    return concepts


def artifacts_out(
    selected: Mapping[Kind, Sequence[Scored]],
    entities: Mapping[str, Entity],
    phrases: Sequence[str],
    cfg: AssemblyConfig,
    r: Callable[[float], float],
) -> list[RetrievedArtifact]:
    artifacts: list[RetrievedArtifact] = []
    for s in selected.get(Kind.ARTIFACT, ()):
        a = entities[s.id]
        assert isinstance(a, Artifact)
        artifacts.append(
            RetrievedArtifact(
                id=a.id,
                artifact_type=a.artifact_type,
                title=a.title,
                content_snippet=make_snippet(a.content, phrases, cfg.snippet_chars),
                created_at=iso(a.created_at),
                final_retrieval_score=r(s.final),
                score_breakdown=_breakdown(s, r),
            )
        )
    return artifacts


def metadata(
    ctx: RequestContext, deployment: str, mus: Sequence[RetrievedMemoryUnit], r: Callable[[float], float]
) -> RetrievalMetadata:
    """``retrieval_metadata``: how the request was understood, grounded, scored and configured."""
    intake, grounding, evidence = ctx.intake, ctx.grounded.grounding, ctx.scores.evidence
    selected, missing = ctx.selection.selected, ctx.hydrated.missing
    provenance = {s.id: item_provenance(s, grounding, evidence, r) for kind in Kind for s in selected.get(kind, ())}
    windows = evidence.windows if evidence.temporal else ()
    best = best_semantic(ctx.scores.scored)
    return RetrievalMetadata(
        contract_version=CONTRACT_VERSION,
        user_id=intake.user_id,
        as_of=iso(intake.as_of),
        key_phrases_processed=list(intake.phrases),
        key_phrase_source=intake.phrase_source,
        phrase_grounding=phrase_grounding(grounding, r),
        stages=dict(ctx.stages),
        degraded=bool(ctx.degraded),
        degraded_reasons=list(ctx.degraded),
        rerank_applied=ctx.reranked.applied,
        missing_records={k: list(missing[k]) for k in sorted(missing)},
        near_duplicates_removed=ctx.selection.near_duplicates_removed,
        deployment=deployment,
        config_hash=ctx.config_hash,
        config=ctx.applied,
        best_effort=(
            BestEffort(phrases=grounding.unmatched, seed_ids=list(grounding.best_effort))
            if grounding.best_effort
            else None
        ),
        time_windows=[
            TimeWindowOut(key_phrase=w.phrase, text=w.text, start=iso_ts(w.start), end=iso_ts(w.end)) for w in windows
        ],
        relevance_gate=RelevanceGate(
            threshold=r(evidence.gate),
            best_semantic={k.value: r(v) for k, v in sorted(best.items(), key=lambda kv: kv[0].value)},
        ),
        validity=validity_report(
            intake, ctx.validity, {s.id: s.candidate.node for kind in Kind for s in selected.get(kind, ())}
        ),
        provenance={k: provenance[k] for k in sorted(provenance)},
        memory_unit_attributes=unit_attributes(ctx, mus),
    )


def phrase_grounding(grounding: Grounding, r: Callable[[float], float]) -> list[PhraseGrounding]:
    """How each key phrase was grounded: its threshold, best similarity and seeds."""
    return [
        PhraseGrounding(
            key_phrase=p.phrase,
            threshold=r(p.threshold),
            best_similarity=r(p.best_similarity),
            seed_ids=list(p.seed_ids),
            matched=p.matched,
        )
        for p in grounding.phrases
    ]


def unit_attributes(ctx: RequestContext, mus: Sequence[RetrievedMemoryUnit]) -> dict[str, MemoryUnitAttributes]:
    """The returned memory units' source agent, tags and metadata, by id."""
    return dict(
        sorted(
            (
                mu.muid,
                MemoryUnitAttributes(
                    source_agent_id=m.source_agent_id, tags=list(m.tags), metadata=sorted_keys(m.metadata)
                ),
            )
            for mu in mus
            if isinstance(m := ctx.hydrated.entities[mu.muid], MemoryUnit)
        )
    )


def validity_report(intake: Intake, validity: Validity | None, returned: Mapping[str, GraphNode]) -> ValidityReport:
    """``retrieval_metadata.validity``: the event time asked about, the candidates set aside per
    kind (every kind named, 0 when none), and each returned item's interval."""
    suppressed = validity.suppressed if validity is not None else {}
    intervals: dict[str, ItemInterval] = {}
    if validity is not None:
        for ident in sorted(returned):
            v = validity.interval(returned[ident])
            intervals[ident] = ItemInterval(
                valid_from=None if v.valid_from is None else iso_ts(v.valid_from),
                valid_to=None if v.valid_to is None else iso_ts(v.valid_to),
                superseded_by=list(v.superseded_by),
                valid=v.valid,
            )
    return ValidityReport(
        valid_at=iso(intake.event_time),
        include_invalidated=intake.include_invalidated,
        suppressed={k.value: suppressed.get(k, 0) for k in Kind},
        intervals=intervals,
    )


def sorted_keys(value: Any) -> Any:
    """JSON with every object's keys sorted, so free-form metadata serialises one way."""
    if isinstance(value, dict):
        return {k: sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [sorted_keys(v) for v in value]
    return value


def item_provenance(s: Scored, grounding: Grounding, evidence: Evidence, r: Callable[[float], float]) -> ItemProvenance:
    """What grounded an item or its seed, the path from that seed, and which evidence its semantic
    term is (scoring.evidence_source: the rule of ``evidence`` decides; "source" for an artifact
    that took its source memory unit's term, ``artifact_evidence``)."""
    c = s.candidate
    direct = grounding.similarity.get(s.id)
    own = evidence.own.get(s.id)
    source: EvidenceSource = "source" if s.source is not None else evidence_source(c, direct, own, evidence.rule)
    return ItemProvenance(
        kind=s.kind.value,
        phrases=list(grounding.hit_phrases.get(s.id, ())),
        seed_id=c.seed_id,
        seed_phrases=list(grounding.phrases_of.get(c.seed_id, ())),
        hops=[
            PathHop(edge=step.edge.value, node_id=step.node_id, direction="out" if step.forward else "in")
            for step in c.path
        ],
        evidence=source,
        search_evidence=None if direct is None else r(direct),
        path_score=r(c.path_score),
        own_similarity=r(own) if source == "path_x_cosine" and own is not None else None,
    )
