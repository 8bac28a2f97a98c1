"""The selection stage (with the filters expansion applies and the shortlist hydration reads).

- Filters drop candidates the request excludes (kinds, tags, agents, time range), before scoring.
- The shortlist keeps, per kind, the best ``limit x shortlist_factor`` by score then id: enough
  for near-duplicate removal and rerank to choose from, few enough to hydrate in one read.
- Near-duplicate removal: two items of one kind are duplicates when the Jaccard similarity of
  their word sets reaches ``dedup_jaccard`` and that of their word-bigram sets reaches
  ``dedup_jaccard - 0.1`` (same words, mostly in the same order). Comparing 200-character
  prefix hashes would miss a changed first word and flag texts that merely open alike. The
  better scored item stays.
- The score floor (``min_score``): items whose final score, rounded as the response
  shows it, is below it are left out (after rerank when reranking).
- Top-N per kind, ties broken by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hrt.contract import Filters, Limits
from hrt.metadata_filter import parse_filter
from hrt.pipeline.scoring import Scored, after_successors
from hrt.records import Kind, entity_body
from hrt.stores.base import GraphCandidate, GraphNode, RecordStore
from hrt.text import words as tokenize

if TYPE_CHECKING:
    from hrt.pipeline.context import RequestContext, Services


def limit_for(limits: Limits, kind: Kind) -> int:
    return {Kind.MEMORY_UNIT: limits.memory_units, Kind.CONCEPT: limits.concepts, Kind.ARTIFACT: limits.artifacts}[kind]


def passes_filters(item: Scored, filters: Filters) -> bool:
    return node_passes(item.candidate.node, filters)


def node_passes(node: GraphNode, filters: Filters) -> bool:
    if filters.kinds and node.kind.value not in filters.kinds:
        return False
    if node.kind is Kind.MEMORY_UNIT:
        if filters.tags and not set(filters.tags) & set(node.tags):
            return False
        if filters.source_agent_ids and node.source_agent_id not in filters.source_agent_ids:
            return False
    if filters.time_range is not None and node.kind is not Kind.CONCEPT and node.ts is not None:
        start, end = filters.time_range.start, filters.time_range.end
        if start is not None and node.ts < start.timestamp():
            return False
        if end is not None and node.ts > end.timestamp():
            return False
    return True


async def filter_metadata(
    user_id: str, candidates: list[GraphCandidate], where: Mapping[str, object], records: RecordStore
) -> list[GraphCandidate]:
    """The memory units among ``candidates`` whose metadata the request's filter ``where`` matches
    (:mod:`hrt.metadata_filter`), in their order: the record store decides, in one read (SQLite's
    JSON functions, PostgreSQL's jsonb), so every deployment keeps the same ones. Concepts and
    artifacts carry no metadata: left out."""
    ids = [c.node.id for c in candidates if c.node.kind is Kind.MEMORY_UNIT]
    keep = await records.metadata_matches(user_id, ids, parse_filter(where)) if ids else set()
    return [c for c in candidates if c.node.kind is Kind.MEMORY_UNIT and c.node.id in keep]


def filter_candidates(candidates: list[GraphCandidate], filters: Filters) -> list[GraphCandidate]:
    """The candidates the request's filters keep, in their order; the list itself when it sets
    none (the common case: no check per candidate)."""
    if not (filters.kinds or filters.tags or filters.source_agent_ids or filters.time_range is not None):
        return candidates
    return [c for c in candidates if node_passes(c.node, filters)]


def order(items: Iterable[Scored]) -> list[Scored]:
    """Best first, ties by id; what no longer holds (include_invalidated) after what replaced it."""
    return after_successors(sorted(items, key=lambda s: (-s.final, s.id)))


def phrase_best(
    scored: Iterable[Scored], hit_phrases: Mapping[str, Sequence[str]], kind: Kind = Kind.MEMORY_UNIT
) -> dict[str, str]:
    """Per phrase, the id of its best candidate of ``kind`` among those its own search returned
    (``scored`` best first): what the phrase asked for, whatever the other phrases found."""
    out: dict[str, str] = {}
    for item in scored:
        if item.candidate.node.kind is kind and not item.stale:
            for phrase in hit_phrases.get(item.id, ()):
                out.setdefault(phrase, item.id)
    return out


def shortlist(
    scored: Sequence[Scored], limits: Limits, factor: int, keep: Iterable[str] = ()
) -> dict[Kind, list[Scored]]:
    """Per kind the first ``limit x factor`` of ``scored``, which is best first, ties by id (as
    :func:`~hrt.pipeline.scoring.score_candidates` returns it), and the ids of ``keep`` wherever
    they rank (each phrase's best hit: :func:`phrase_best`)."""
    out: dict[Kind, list[Scored]] = {k: [] for k in Kind}
    room = {k: limit_for(limits, k) * factor for k in Kind}
    wanted = set(keep)
    for item in scored:
        kind = item.candidate.node.kind
        if room[kind] > 0:
            room[kind] -= 1
            out[kind].append(item)
        elif item.id in wanted:
            out[kind].append(item)
    return out


def shingles(text: str, n: int) -> frozenset[str]:
    ws = tokenize(text)
    if len(ws) < n:
        return frozenset([" ".join(ws)])
    return frozenset(" ".join(ws[i : i + n]) for i in range(len(ws) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


class Fingerprint:
    __slots__ = ("bigrams", "words")

    def __init__(self, text: str) -> None:
        self.words = shingles(text, 1)
        self.bigrams = shingles(text, 2)

    def near_duplicate(self, other: Fingerprint, threshold: float) -> bool:
        return jaccard(self.words, other.words) >= threshold and jaccard(self.bigrams, other.bigrams) >= threshold - 0.1


def select(
    shortlisted: Mapping[Kind, Sequence[Scored]],
    texts: Mapping[str, str],
    limits: Limits,
    dedup_threshold: float,
    hit_phrases: Mapping[str, Sequence[str]] | None = None,
) -> tuple[dict[Kind, list[Scored]], int]:
    """Per kind, the best items in order, skipping near-duplicates and items without a text
    (not hydrated); ``texts`` holds each item's body (content, or a concept's name and
    description). Each phrase keeps its best memory unit (:func:`phrase_best` over
    ``hit_phrases``): one that ranks below the limit takes the place of the last item no phrase
    holds. Returns the selection and how many near-duplicates were removed."""
    selected: dict[Kind, list[Scored]] = {}
    removed = 0
    for kind in Kind:
        ordered = order(shortlisted.get(kind, ()))
        held = phrase_best(ordered, hit_phrases or {}) if kind is Kind.MEMORY_UNIT else {}
        keep, kept, duplicates = _fill(ordered, texts, limit_for(limits, kind), dedup_threshold)
        removed += duplicates
        if held:
            keep = _hold(keep, kept, ordered, texts, list(dict.fromkeys(held.values())), dedup_threshold)
        selected[kind] = keep
    return selected, removed


def _fill(
    ordered: Sequence[Scored], texts: Mapping[str, str], limit: int, threshold: float
) -> tuple[list[Scored], list[Fingerprint], int]:
    """The best ``limit`` items with a text and no near-duplicate before them; their fingerprints;
    the near-duplicates skipped."""
    keep: list[Scored] = []
    kept: list[Fingerprint] = []
    removed = 0
    for item in ordered:
        if len(keep) >= limit:
            break
        text = texts.get(item.id)
        if text is None:
            continue
        fp = Fingerprint(text)
        if any(fp.near_duplicate(other, threshold) for other in kept):
            removed += 1
            continue
        keep.append(item)
        kept.append(fp)
    return keep, kept, removed


def _hold(
    keep: list[Scored],
    kept: list[Fingerprint],
    ordered: Sequence[Scored],
    texts: Mapping[str, str],
    held: Sequence[str],
    threshold: float,
) -> list[Scored]:
    """``keep`` with each held id in it (phrase order): one missing replaces the last kept item
    that no phrase holds, unless it has no text or a kept item is its near-duplicate (the phrase
    is answered already). Returned in :func:`order`."""
    by_id = {s.id: s for s in ordered}
    holds = set(held)
    for ident in held:
        item = by_id.get(ident)
        text = texts.get(ident)
        if item is None or text is None or any(s.id == ident for s in keep):
            continue
        fp = Fingerprint(text)
        if any(fp.near_duplicate(other, threshold) for other in kept):
            continue
        free = [i for i, s in enumerate(keep) if s.id not in holds]
        if not free:
            break
        keep[free[-1]], kept[free[-1]] = item, fp
    return order(keep)


def above_floor(ranked: dict[Kind, list[Scored]], floor: float | None, places: int) -> Mapping[Kind, Sequence[Scored]]:
    """The items whose final score, rounded to ``places`` as the response shows it, reaches
    ``floor`` (None: all of them, unchanged)."""
    if floor is None:
        return ranked
    return {k: [x for x in v if round(x.final, places) >= floor] for k, v in ranked.items()}


@dataclass(frozen=True, slots=True)
class Selection:
    """What the selection stage provides: the items returned per kind, best first, and how many
    near-duplicates it left out."""

    selected: dict[Kind, list[Scored]]
    near_duplicates_removed: int


async def selection_stage(ctx: RequestContext, services: Services) -> str:
    """The selection stage: the score floor, then per kind the best items without near-duplicates."""
    ac = ctx.cfg.assembly
    texts = {i: entity_body(e) for i, e in ctx.hydrated.entities.items()}
    ranked = above_floor(ctx.reranked.items, ctx.request.min_score, ac.score_decimals)
    held = ctx.grounded.grounding.hit_phrases if ac.phrase_best else None
    ctx.selection = Selection(*select(ranked, texts, ctx.intake.limits, ac.dedup_jaccard, held))
    return "ok"
