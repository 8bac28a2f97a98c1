"""The scoring stage: the EntityScorer, pure functions with explicit inputs.

    final = alpha * semantic + relevance * (beta * recency + gamma * salience + delta * preference)

with the weights normalised to sum 1 and every term in [0, 1]. Relevance comes first: the
semantic term says how well a candidate matches the key phrases, and the other three only order
candidates that match well enough (``relevance``, below). The terms:

- semantic (:func:`candidate_semantic`, ``reached_evidence``): with ``scoped`` (the default) a
  candidate's own evidence counts in full in the seeds' neighbourhood and less the further the
  graph had to go to reach it:

  - a seed (distance 0): its direct evidence (grounding's score for it: fused or cosine, over the
    phrases);
  - one hop from a seed: a search hit, the best of its direct evidence and its best path; any
    other, its best path times its own best cosine to the phrases (clamped at 0);
  - further: its best path times its own cosine times ``hop_decay`` for every hop past the first,
    search hit or not (a hit that only a two-hop walk reaches is a weak hit far from every seed).

  The path score is seed score x (``hop_decay`` x edge weight) per hop; distance is the hop at
  which the walk first reached the candidate. A deeper walk can only add far candidates, which
  compete on path *and* text, one ``hop_decay`` behind one-hop ones: many mediocre two-hop
  candidates cannot crowd out one-hop evidence. ``path`` (max of direct evidence and path) and
  ``path_x_cosine`` (search hits: max of direct and path; others: path x own cosine) are the
  earlier rules. A candidate the index has no vector for keeps its path as its own cosine's place.
- passages (``passage_weight`` = w, :func:`with_passage`): a memory unit's semantic term so far
  becomes ``(s + w x p) / (1 + w)``, ``p`` its best passage cosine to the phrases (each sentence
  of a multi-sentence text is embedded at write time behind its title or author,
  ``hrt.records.passage_texts``; a one-sentence text's passage is its own vector). A turn that
  says several things is no longer judged by the average of them.
- artifacts (``artifact_evidence`` "source", :func:`lift_artifacts`): an artifact whose best path
  ends with a DERIVED_FROM edge from a memory unit takes that memory unit's semantic term (passages
  included) when it is higher than its own. What was derived from a relevant memory (a session's
  summary, a note drawn from a turn) is at least as relevant as the memory; it is applied after
  the time match, before the relevance gate, and changes no other kind's terms. A memory unit the
  request's filters exclude is not a candidate, so it lifts nothing.
- time (``temporal_match``): when the phrases name dates (``hrt/pipeline/temporal.py``), a
  candidate whose timestamp falls in one of those windows scores ``(1 + s) / 2``, any other
  ``s / 2``: in-window candidates first, each group in its own order. No date, no change.
- recency:    0.5 ** (age_days / half_life_days), age measured back from ``as_of`` (never
              negative). Memory units use ``creation_ts``, artifacts ``created_at``, concepts the
              newest memory unit that mentions them; with no timestamp, 0.5 (neutral). A fact kept
              by ``include_invalidated`` that does not hold at ``valid_at`` scores 0: no longer
              true, it never outranks its successor for being recent (hrt/pipeline/validity.py).
- salience:   memory units importance_score / 10, concepts salience, artifacts confidence.
- preference: the user's preference weights (0.5 is neutral). Concepts: the concept's own weight,
              else its type's. Artifacts: their artifact_type's. Memory units: the mean of their
              source_type's weight and the strongest weight among the concepts they mention,
              over the signals that exist; neutral when none does.
- relevance (``relevance_gate`` = tau, :func:`relevance_factor`): per kind, ``clamp((semantic /
  best - tau) / (1 - tau), 0, 1)``, ``best`` the highest semantic term among the request's
  candidates of that kind. A candidate below ``tau x best`` gets nothing from recency, salience
  and preference, so it scores below ``alpha x tau x best`` and can never pass one at or above
  ``tau x best``, whatever its age, importance or the user's preferences; from ``tau x best`` up
  the three terms count more and more, in full at ``best``. ``tau`` 0 is the plain weighted sum.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from hrt.config import ExpansionConfig, RetrievalConfig, ScoringConfig, Weights
from hrt.pipeline.temporal import TimeWindow, in_any
from hrt.records import EdgeType, Kind, Preference
from hrt.stores.base import GraphCandidate, GraphNode, positional_maker

if TYPE_CHECKING:
    from hrt.pipeline.context import RequestContext, Services

SECONDS_PER_DAY = 86_400.0


def clamp01(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def recency_score(ts: float | None, as_of: float, half_life_days: float) -> float:
    if ts is None:
        return 0.5
    age_days = max(0.0, as_of - ts) / SECONDS_PER_DAY
    return float(0.5 ** (age_days / half_life_days))


def semantic_score(direct_similarity: float | None, path_score: float) -> float:
    """The ``path`` rule: the best of the direct evidence and the path, clamped."""
    return clamp01(max(direct_similarity if direct_similarity is not None else 0.0, path_score))


REACHED_RULES = ("path", "path_x_cosine", "scoped")
# the configuration's defaults, which Evidence's are
_EXPANSION, _SCORING = ExpansionConfig(), ScoringConfig()


@dataclass(frozen=True, slots=True)
class Evidence:
    """How the semantic term is made beyond the direct evidence (module docstring): the rule, the
    candidates' own cosines (``own``: ids the index has a vector for), ``hop_decay``, the
    phrases' time windows (used when ``temporal``) and the relevance gate's ``tau``. The settings'
    defaults are the configuration's (:meth:`of` a default ``RetrievalConfig``); :data:`PLAIN` is
    the plain weighted sum."""

    rule: str = _EXPANSION.reached_evidence
    own: Mapping[str, float] = field(default_factory=dict)
    hop_decay: float = _EXPANSION.hop_decay
    windows: Sequence[TimeWindow] = ()
    temporal: bool = _SCORING.temporal_match == "tier"
    gate: float = _SCORING.relevance_gate
    # candidates kept that do not hold at the request's valid_at (include_invalidated): no recency
    stale: frozenset[str] = frozenset()
    # memory units' best passage cosines (``passage_weight`` > 0): see :func:`with_passage`
    passages: Mapping[str, float] = field(default_factory=dict)
    passage_weight: float = _SCORING.passage_weight
    # ``artifact_evidence`` "source": an artifact reached from a memory unit takes at least its
    # semantic term (:func:`derived_source`)
    artifact_source: bool = _SCORING.artifact_evidence == "source"
    # ``recency_clock`` "latest": recency's age measured back from the newest candidate, not as_of
    latest_clock: bool = _SCORING.recency_clock == "latest"
    # a stale candidate's final score is multiplied by this (``invalidated_factor``)
    stale_factor: float = _SCORING.invalidated_factor
    # per stale candidate, the ids of the successors that superseded it
    successors: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        cfg: RetrievalConfig,
        own: Mapping[str, float] | None = None,
        windows: Sequence[TimeWindow] = (),
        stale: frozenset[str] = frozenset(),
        passages: Mapping[str, float] | None = None,
        successors: Mapping[str, tuple[str, ...]] | None = None,
    ) -> Evidence:
        """A request's evidence: ``cfg``'s rules with the request's reads."""
        ex, sc = cfg.expansion, cfg.scoring
        return cls(
            rule=ex.reached_evidence,
            own={} if own is None else own,
            hop_decay=ex.hop_decay,
            windows=windows,
            temporal=sc.temporal_match == "tier",
            gate=sc.relevance_gate,
            stale=stale,
            passages={} if passages is None else passages,
            passage_weight=sc.passage_weight,
            artifact_source=sc.artifact_evidence == "source",
            latest_clock=sc.recency_clock == "latest",
            stale_factor=sc.invalidated_factor,
            successors={} if successors is None else successors,
        )


# the plain weighted sum: the path rule, no time match, no gate, no passages, artifacts on their own
PLAIN = Evidence(
    rule="path",
    temporal=False,
    gate=0.0,
    passage_weight=0.0,
    artifact_source=False,
    latest_clock=False,
    stale_factor=1.0,
)


def recency_clock(candidates: Sequence[GraphCandidate], as_of: float) -> float:
    """What recency's age is measured back from under ``recency_clock`` "latest": the newest time
    among the candidates (a concept's newest mention), never after ``as_of``; ``as_of`` when none
    has a time."""
    newest: float | None = None
    for c in candidates:
        ts = c.last_mention_ts if c.node.kind is Kind.CONCEPT else c.node.ts
        if ts is not None and (newest is None or ts > newest):
            newest = ts
    return as_of if newest is None or newest > as_of else newest


def candidate_semantic(
    c: GraphCandidate, direct: float | None, own: float | None, rule: str, hop_decay: float
) -> float:
    """A candidate's semantic evidence before the time match (module docstring), in [0, 1]."""
    path = c.path_score
    if rule == "path":
        return semantic_score(direct, path)
    mine = path if own is None else path * (own if own > 0.0 else 0.0)
    if rule == "path_x_cosine":
        return semantic_score(direct, path) if direct is not None else clamp01(mine)
    if rule != "scoped":
        raise ValueError(f"unknown reached_evidence {rule!r}")
    distance = c.distance
    if distance == 0:
        return clamp01(direct if direct is not None else path)
    if distance == 1:
        return semantic_score(direct, path) if direct is not None else clamp01(mine)
    return clamp01(mine * hop_decay ** (distance - 1))


# "source": an artifact that took the semantic term of the memory unit it was reached from
EvidenceSource = Literal["search", "path", "path_x_cosine", "source"]


def evidence_source(c: GraphCandidate, direct: float | None, own: float | None, rule: str) -> EvidenceSource:
    """Which evidence :func:`candidate_semantic` took for a candidate: its own search hit
    (``search``), its path from the seed (``path``), or that path times its own best cosine to the
    phrases (``path_x_cosine``; times ``hop_decay`` per hop past the first). Provenance reports it."""
    best_of: EvidenceSource = "search" if direct is not None and direct >= c.path_score else "path"
    if rule == "path":
        return best_of
    mine: EvidenceSource = "path" if own is None else "path_x_cosine"
    if rule == "path_x_cosine":
        return best_of if direct is not None else mine
    if c.distance == 0:
        return "search" if direct is not None else "path"
    if c.distance == 1:
        return best_of if direct is not None else mine
    return mine


def with_passage(semantic: float, passage: float | None, weight: float) -> float:
    """A memory unit's semantic term with its passage evidence: ``(s + w x p) / (1 + w)``, ``p``
    its best passage cosine clamped at 0 (its own cosine when it has no passages); unchanged when
    the index has no vector for it (``p`` None) or ``w`` is 0."""
    if passage is None or weight <= 0.0:
        return semantic
    return (semantic + weight * (passage if passage > 0.0 else 0.0)) / (1.0 + weight)


def derived_source(c: GraphCandidate) -> str | None:
    """The memory unit an artifact was reached from when its best path's last edge is DERIVED_FROM
    (the node before it on the path: the seed after one hop), else None. Whether that node is a
    memory unit among the candidates is the caller's to check."""
    path = c.path
    if not path or path[-1].edge is not EdgeType.DERIVED_FROM:
        return None
    return c.seed_id if len(path) == 1 else path[-2].node_id


def time_matched(semantic: float, ts: float | None, windows: Sequence[TimeWindow]) -> float:
    """With windows: ``(1 + s) / 2`` for a timestamp in one of them, ``s / 2`` otherwise."""
    if not windows:
        return semantic
    return (1.0 + semantic) / 2.0 if in_any(ts, windows) else semantic / 2.0


def relevance_factor(semantic: float, best: float, tau: float) -> float:
    """The share of recency, salience and preference a candidate gets: 1 with no gate (``tau``
    0), else ``clamp((semantic / best - tau) / (1 - tau), 0, 1)`` (0 when nothing is relevant)."""
    if tau <= 0.0:
        return 1.0
    if best <= 0.0:
        return 0.0
    return clamp01((semantic / best - tau) / (1.0 - tau))


@dataclass(frozen=True, slots=True)
class PreferenceBook:
    """A user's preference records, indexed by what they target."""

    concepts: Mapping[str, float]
    concept_types: Mapping[str, float]
    source_types: Mapping[str, float]
    artifact_types: Mapping[str, float]
    neutral: float = _SCORING.neutral_preference

    @classmethod
    def build(cls, prefs: Iterable[Preference], neutral: float = _SCORING.neutral_preference) -> PreferenceBook:
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
    relevance: float = 1.0  # the relevance gate's factor on recency, salience and preference
    # the memory unit whose semantic term an artifact took (``artifact_evidence`` "source")
    source: str | None = None
    # no longer true at valid_at (kept by include_invalidated)
    stale: bool = False
    # the successors (superseding it) it is ranked after, whatever the scores: what replaced a fact
    # always comes before it (:func:`after_successors`)
    after: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return self.candidate.node.id

    @property
    def kind(self) -> Kind:
        return self.candidate.node.kind

    def with_rerank(self, rerank: float, final: float) -> Scored:
        return replace(self, rerank=rerank, final=final)


make_scored = positional_maker(Scored)


def combine(
    weights: Weights,
    semantic: float,
    recency: float,
    salience: float,
    preference: float,
    relevance: float | None = None,
) -> float:
    """The weighted sum; with a ``relevance`` factor (a gated request), that factor times the
    three terms after the semantic one."""
    if relevance is None:
        return (
            weights.alpha_semantic_similarity * semantic
            + weights.beta_recency * recency
            + weights.gamma_salience * salience
            + weights.delta_user_preference * preference
        )
    return weights.alpha_semantic_similarity * semantic + relevance * (
        weights.beta_recency * recency + weights.gamma_salience * salience + weights.delta_user_preference * preference
    )


def best_semantic(scored: Iterable[Scored]) -> dict[Kind, float]:
    """Per kind, the highest semantic term (what the relevance gate measures against)."""
    out: dict[Kind, float] = {}
    for x in scored:
        if x.semantic > out.get(x.kind, -1.0):
            out[x.kind] = x.semantic
    return out


def lift_artifacts(
    terms: list[tuple[GraphCandidate, float, float, float, float]], best: dict[Kind, float]
) -> dict[int, str]:
    """``artifact_evidence`` "source", in place: an artifact reached from a memory unit over
    DERIVED_FROM (:func:`derived_source`) takes the memory unit's semantic term when it is higher
    than its own: what was derived from a relevant memory is at least as relevant as that memory.
    Updates the artifacts' best term (the gate's reference); returns the positions lifted, with
    the memory unit each took its term from."""
    unit_semantic = {c.node.id: sem for c, sem, *_ in terms if c.node.kind is Kind.MEMORY_UNIT}
    lifted: dict[int, str] = {}
    for position, (c, sem, rec, sal, pref) in enumerate(terms):
        if c.node.kind is not Kind.ARTIFACT:
            continue
        source = derived_source(c)
        carried = None if source is None else unit_semantic.get(source)
        if source is not None and carried is not None and carried > sem:
            terms[position] = (c, carried, rec, sal, pref)
            lifted[position] = source
            if carried > best.get(Kind.ARTIFACT, -1.0):
                best[Kind.ARTIFACT] = carried
    return lifted


def score_candidates(
    candidates: Iterable[GraphCandidate],
    similarity: Mapping[str, float],
    book: PreferenceBook,
    weights: Weights,
    as_of: float,
    half_life_days: float,
    evidence: Evidence,
) -> list[Scored]:
    """Score every candidate; returned best first, ties broken by id.

    The loops are :func:`candidate_semantic`, :func:`time_matched`, :func:`recency_score`,
    :func:`preference_score` written out (the same operations in the same order, so the same
    floats): they run for every candidate of every request, ~700 at 100k entities. The relevance
    gate needs every candidate's semantic term first, so the final scores are a second pass
    (:func:`rank`)."""
    cands = list(candidates)
    if evidence.latest_clock:
        as_of = recency_clock(cands, as_of)
    sems, best = _semantic_terms(cands, similarity, evidence)
    terms = _other_terms(cands, sems, book, as_of, half_life_days, evidence.stale)
    sources = lift_artifacts(terms, best) if evidence.artifact_source else {}
    stale, factor = evidence.stale, evidence.stale_factor
    return rank(terms, best, weights, evidence.gate, sources, stale, factor, evidence.successors)


def _semantic_terms(
    cands: Sequence[GraphCandidate], similarity: Mapping[str, float], evidence: Evidence
) -> tuple[list[float], dict[Kind, float]]:
    """Each candidate's semantic term, and the best of each kind among those still valid (what no
    longer holds sets no bar for what does: the relevance gate's best)."""
    memory_unit = Kind.MEMORY_UNIT
    rule, own_cosine, decay, stale = evidence.rule, evidence.own, evidence.hop_decay, evidence.stale
    passage, lam = evidence.passages, evidence.passage_weight
    windows = evidence.windows if evidence.temporal else ()
    plain = rule == "path"
    sems: list[float] = []
    best: dict[Kind, float] = {}
    for c in cands:
        node = c.node
        kind = node.kind
        if plain:
            sem = similarity.get(node.id, 0.0)
            if c.path_score > sem:
                sem = c.path_score
            sem = 0.0 if sem < 0.0 else 1.0 if sem > 1.0 else sem
        else:
            sem = candidate_semantic(c, similarity.get(node.id), own_cosine.get(node.id), rule, decay)
        if lam > 0.0 and kind is memory_unit:
            sem = with_passage(sem, passage.get(node.id), lam)
        if windows:
            sem = time_matched(sem, node.ts, windows)
        if sem > best.get(kind, -1.0) and not (stale and node.id in stale):
            best[kind] = sem
        sems.append(sem)
    return sems, best


def _other_terms(
    cands: Sequence[GraphCandidate],
    sems: Sequence[float],
    book: PreferenceBook,
    as_of: float,
    half_life_days: float,
    stale: frozenset[str],
) -> list[tuple[GraphCandidate, float, float, float, float]]:
    """(candidate, semantic, recency, salience, preference) of each candidate."""
    concept_types = {c.node.id: c.node.category for c in cands if c.node.kind is Kind.CONCEPT}
    concept, memory_unit = Kind.CONCEPT, Kind.MEMORY_UNIT
    mention_weight: dict[str, float] = {}  # per mentioned concept: its weight, -1.0 for none
    plain_mentions = not book.concepts and not book.concept_types  # no mention can carry a weight
    concept_weights, concept_type_weights, artifact_weights = book.concepts, book.concept_types, book.artifact_types
    neutral = book.neutral
    terms: list[tuple[GraphCandidate, float, float, float, float]] = []
    for c, sem in zip(cands, sems, strict=True):
        node = c.node
        kind = node.kind
        ts = c.last_mention_ts if kind is concept else node.ts
        if ts is None:
            rec = 0.5
        else:
            age = as_of - ts  # max(0.0, age) written out: the same float, no call
            rec = 0.5 ** (((age if age > 0.0 else 0.0) / SECONDS_PER_DAY) / half_life_days)
        if stale and node.id in stale:
            rec = 0.0
        sal = node.salience
        sal = 0.0 if sal < 0.0 else 1.0 if sal > 1.0 else sal
        if kind is memory_unit and plain_mentions:
            pref = book.source_types.get(node.category, book.neutral)
        elif kind is memory_unit:
            pref = _unit_preference(node, c.mentions, book, concept_types, mention_weight)
        elif kind is concept:
            own = concept_weights.get(node.id)
            pref = concept_type_weights.get(node.category, neutral) if own is None else own
        else:
            pref = artifact_weights.get(node.category, neutral)
        pref = 0.0 if pref < 0.0 else 1.0 if pref > 1.0 else pref
        terms.append((c, sem, rec, sal, pref))
    return terms


def _unit_preference(
    node: GraphNode,
    mentions: Iterable[str],
    book: PreferenceBook,
    concept_types: Mapping[str, str],
    mention_weight: dict[str, float],
) -> float:
    """:func:`preference_score` of a memory unit whose mentions may carry a weight, with each
    mentioned concept's weight memoised in ``mention_weight`` (-1.0: none)."""
    signals: list[float] = []
    if node.category in book.source_types:
        signals.append(book.source_types[node.category])
    strongest = -1.0
    for cid in mentions:
        w = mention_weight.get(cid)
        if w is None:
            w = mention_weight[cid] = book.concepts.get(cid, book.concept_types.get(concept_types.get(cid, ""), -1.0))
        if w >= 0.0 and w > strongest:
            strongest = w
    if strongest >= 0.0:
        signals.append(strongest)
    return sum(signals) / len(signals) if signals else book.neutral


def rank(
    terms: Sequence[tuple[GraphCandidate, float, float, float, float]],
    best: Mapping[Kind, float],
    weights: Weights,
    tau: float,
    sources: Mapping[int, str],
    stale: frozenset[str] = frozenset(),
    stale_factor: float = 1.0,
    successors: Mapping[str, tuple[str, ...]] | None = None,
) -> list[Scored]:
    """The final scores (:func:`relevance_factor` and :func:`combine` written out), best first,
    ties by id; a stale candidate's times ``stale_factor``, and after its successors."""
    after = successors or {}
    a, b, g, d = (
        weights.alpha_semantic_similarity,
        weights.beta_recency,
        weights.gamma_salience,
        weights.delta_user_preference,
    )
    # sorted by (-final, id, position): the position only orders a repeated id, so a Scored is never compared
    ranked: list[tuple[float, str, int, Scored]] = []
    for position, (c, sem, rec, sal, pref) in enumerate(terms):
        late = bool(stale) and c.node.id in stale
        if tau > 0.0:
            top = best.get(c.node.kind, sem)
            rel = 0.0 if top <= 0.0 else (sem / top - tau) / (1.0 - tau)
            rel = 0.0 if rel < 0.0 else 1.0 if rel > 1.0 else rel
            final = a * sem + rel * (b * rec + g * sal + d * pref)
        else:
            rel = 1.0
            final = a * sem + b * rec + g * sal + d * pref
        if late:
            final *= stale_factor
        follows = after.get(c.node.id, ()) if late else ()
        scored = make_scored(c, sem, rec, sal, pref, final, None, rel, sources.get(position), late, follows)
        ranked.append((-final, c.node.id, position, scored))
    ranked.sort()
    return after_successors([item for *_, item in ranked])


def after_successors(items: list[Scored]) -> list[Scored]:
    """``items`` (best first) with each fact that no longer holds moved to just after the last of
    its successors among them, when one of them ranks below it: what replaced a fact always comes
    before it, whatever their scores. Deterministic: the items are moved in their order."""
    if not any(s.after for s in items):
        return items
    out = list(items)
    for item in [s for s in items if s.after]:
        at = {s.id: i for i, s in enumerate(out)}
        last = max((at[a] for a in item.after if a in at), default=-1)
        if last > at[item.id]:
            out.pop(at[item.id])
            out.insert(last, item)
    return out


@dataclass(frozen=True, slots=True)
class Scores:
    """What the scoring stage provides: the evidence it scored with, and every candidate scored,
    best first."""

    evidence: Evidence
    scored: list[Scored]


async def scoring_stage(ctx: RequestContext, services: Services) -> str:
    """The scoring stage: every candidate validity kept, scored with the request's evidence (its
    configuration's rules, the reads expansion's prefetch made) and weights, best first."""
    intake, cfg, validity = ctx.intake, ctx.cfg, ctx.validity
    reads = await ctx.own_evidence
    book = PreferenceBook.build(ctx.grounded.preferences, cfg.scoring.neutral_preference)
    successors = {i: tuple(sorted(n.id for n in validity.successors.get(i, []))) for i in validity.stale}
    evidence = Evidence.of(cfg, reads.own, intake.windows, validity.stale, reads.passages, successors)
    scored = score_candidates(
        validity.candidates,
        ctx.grounded.grounding.similarity,
        book,
        intake.weights,
        intake.as_of.timestamp(),
        cfg.scoring.recency_half_life_days,
        evidence,
    )
    ctx.scores = Scores(evidence, scored)
    return "ok"
