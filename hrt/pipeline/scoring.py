"""Stage 4, scoring: the EntityScorer, pure functions with explicit inputs.

    final = alpha * semantic + beta * recency + gamma * salience + delta * preference

with the weights normalised to sum 1 and every term in [0, 1]:

- semantic:   max(cosine similarity of the entity to any key phrase, when search returned it;
              its best path score: seed similarity x (hop_decay x edge weight) per hop),
              clamped to [0, 1].
- recency:    0.5 ** (age_days / half_life_days), age measured back from ``as_of`` (never
              negative). Memory units use ``creation_ts``, artifacts ``created_at``, concepts the
              newest memory unit that mentions them; with no timestamp, 0.5 (neutral).
- salience:   memory units importance_score / 10, concepts salience, artifacts confidence.
- preference: the user's preference weights (0.5 is neutral). Concepts: the concept's own weight,
              else its type's. Artifacts: their artifact_type's. Memory units: the mean of their
              source_type's weight and the strongest weight among the concepts they mention,
              over the signals that exist; neutral when none does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from hrt.config import Weights
from hrt.records import Kind, Preference
from hrt.stores.base import GraphCandidate, GraphNode

SECONDS_PER_DAY = 86_400.0


def clamp01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def recency_score(ts: float | None, as_of: float, half_life_days: float) -> float:
    if ts is None:
        return 0.5
    age_days = max(0.0, as_of - ts) / SECONDS_PER_DAY
    return float(0.5 ** (age_days / half_life_days))


def semantic_score(direct_similarity: float | None, path_score: float) -> float:
    return clamp01(max(direct_similarity if direct_similarity is not None else 0.0, path_score))


@dataclass(frozen=True, slots=True)
class PreferenceBook:
    """A user's preference records, indexed by what they target."""

    concepts: Mapping[str, float]
    concept_types: Mapping[str, float]
    source_types: Mapping[str, float]
    artifact_types: Mapping[str, float]
    neutral: float = 0.5

    @classmethod
    def build(cls, prefs: Iterable[Preference], neutral: float = 0.5) -> PreferenceBook:
        tables: dict[str, dict[str, float]] = {
            "concept": {},
            "concept_type": {},
            "source_type": {},
            "artifact_type": {},
        }
        for p in prefs:
            tables[p.target_kind][p.target] = p.weight
        return cls(tables["concept"], tables["concept_type"], tables["source_type"], tables["artifact_type"], neutral)


def preference_score(
    node: GraphNode, mentions: Iterable[str], book: PreferenceBook, concept_types: Mapping[str, str]
) -> float:
    if node.kind is Kind.CONCEPT:
        if node.id in book.concepts:
            return book.concepts[node.id]
        return book.concept_types.get(node.category, book.neutral)
    if node.kind is Kind.ARTIFACT:
        return book.artifact_types.get(node.category, book.neutral)
    signals: list[float] = []
    if node.category in book.source_types:
        signals.append(book.source_types[node.category])
    concept_weights = [
        w
        for cid in mentions
        if (w := book.concepts.get(cid, book.concept_types.get(concept_types.get(cid, ""), -1.0))) >= 0.0
    ]
    if concept_weights:
        signals.append(max(concept_weights))
    return sum(signals) / len(signals) if signals else book.neutral


@dataclass(frozen=True, slots=True)
class Scored:
    candidate: GraphCandidate
    semantic: float
    recency: float
    salience: float
    preference: float
    final: float
    rerank: float | None = None

    @property
    def id(self) -> str:
        return self.candidate.node.id

    @property
    def kind(self) -> Kind:
        return self.candidate.node.kind

    def with_rerank(self, rerank: float, final: float) -> Scored:
        return replace(self, rerank=rerank, final=final)


def combine(weights: Weights, semantic: float, recency: float, salience: float, preference: float) -> float:
    return (
        weights.alpha_semantic_similarity * semantic
        + weights.beta_recency * recency
        + weights.gamma_salience * salience
        + weights.delta_user_preference * preference
    )


def score_candidates(
    candidates: Iterable[GraphCandidate],
    similarity: Mapping[str, float],
    book: PreferenceBook,
    weights: Weights,
    as_of: float,
    half_life_days: float,
) -> list[Scored]:
    """Score every candidate; returned best first, ties broken by id.

    The loop is :func:`semantic_score`, :func:`recency_score`, :func:`preference_score` and
    :func:`combine` written out (the same operations in the same order, so the same floats): it
    runs for every candidate of every request, ~700 at 100k entities."""
    cands = list(candidates)
    concept_types = {c.node.id: c.node.category for c in cands if c.node.kind is Kind.CONCEPT}
    a, b, g, d = (
        weights.alpha_semantic_similarity,
        weights.beta_recency,
        weights.gamma_salience,
        weights.delta_user_preference,
    )
    concept, memory_unit = Kind.CONCEPT, Kind.MEMORY_UNIT
    mention_weight: dict[str, float] = {}  # per mentioned concept: its weight, -1.0 for none
    plain_mentions = not book.concepts and not book.concept_types  # no mention can carry a weight
    concept_weights, concept_type_weights, artifact_weights = book.concepts, book.concept_types, book.artifact_types
    neutral = book.neutral
    # sorted by (-final, id, position): the position only orders a repeated id, so a Scored is never compared
    ranked: list[tuple[float, str, int, Scored]] = []
    for position, c in enumerate(cands):
        node = c.node
        kind = node.kind
        sem = similarity.get(node.id, 0.0)
        if c.path_score > sem:
            sem = c.path_score
        sem = 0.0 if sem < 0.0 else 1.0 if sem > 1.0 else sem
        ts = c.last_mention_ts if kind is concept else node.ts
        rec = 0.5 if ts is None else float(0.5 ** ((max(0.0, as_of - ts) / SECONDS_PER_DAY) / half_life_days))
        sal = node.salience
        sal = 0.0 if sal < 0.0 else 1.0 if sal > 1.0 else sal
        if kind is memory_unit and plain_mentions:
            pref = book.source_types.get(node.category, book.neutral)
        elif kind is memory_unit:
            signals: list[float] = []
            if node.category in book.source_types:
                signals.append(book.source_types[node.category])
            strongest = -1.0
            for cid in c.mentions:
                w = mention_weight.get(cid)
                if w is None:
                    w = mention_weight[cid] = book.concepts.get(
                        cid, book.concept_types.get(concept_types.get(cid, ""), -1.0)
                    )
                if w >= 0.0 and w > strongest:
                    strongest = w
            if strongest >= 0.0:
                signals.append(strongest)
            pref = sum(signals) / len(signals) if signals else book.neutral
        elif kind is concept:
            own = concept_weights.get(node.id)
            pref = concept_type_weights.get(node.category, neutral) if own is None else own
        else:
            pref = artifact_weights.get(node.category, neutral)
        pref = 0.0 if pref < 0.0 else 1.0 if pref > 1.0 else pref
        final = a * sem + b * rec + g * sal + d * pref
        ranked.append((-final, node.id, position, Scored(c, sem, rec, sal, pref, final)))
    ranked.sort()
    return [item for *_, item in ranked]
