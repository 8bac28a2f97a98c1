"""The selection stage (with the filters expansion applies and the shortlist hydration reads).

- Filters drop candidates the request excludes (kinds, tags, agents, time range), before scoring.
- The shortlist keeps, per kind, the best ``limit x shortlist_factor`` by score then id: enough
  for near-duplicate removal and rerank to choose from, few enough to hydrate in one read.
- Near-duplicate removal: two items of one kind are duplicates when the Jaccard similarity of
  their word sets reaches ``dedup_jaccard`` and that of their word-bigram sets reaches
  ``dedup_jaccard - 0.1`` (same words, mostly in the same order). Seed 000 compared 200-character
  prefix hashes, which misses a changed first word and flags texts that merely open alike. The
  better scored item stays.
- The score floor (``min_score``, seed 003): items whose final score, rounded as the response
  shows it, is below it are left out (after rerank when reranking).
- Top-N per kind, ties broken by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from hrt.contract import Filters, Limits
from hrt.pipeline.scoring import Scored
from hrt.records import Kind, entity_body
from hrt.stores.base import GraphCandidate, GraphNode
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


def filter_candidates(candidates: list[GraphCandidate], filters: Filters) -> list[GraphCandidate]:
    """The candidates the request's filters keep, in their order; the list itself when it sets
    none (the common case: no check per candidate)."""
    if not (filters.kinds or filters.tags or filters.source_agent_ids or filters.time_range is not None):
        return candidates
    return [c for c in candidates if node_passes(c.node, filters)]


def order(items: Iterable[Scored]) -> list[Scored]:
    return sorted(items, key=lambda s: (-s.final, s.id))


def shortlist(scored: Sequence[Scored], limits: Limits, factor: int) -> dict[Kind, list[Scored]]:
    """Per kind the first ``limit x factor`` of ``scored``, which is best first, ties by id (as
    :func:`~hrt.pipeline.scoring.score_candidates` returns it)."""
    out: dict[Kind, list[Scored]] = {k: [] for k in Kind}
    room = {k: limit_for(limits, k) * factor for k in Kind}
    for item in scored:
        kind = item.candidate.node.kind
        if room[kind] > 0:
            room[kind] -= 1
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
) -> tuple[dict[Kind, list[Scored]], int]:
    """Per kind, the best items in order, skipping near-duplicates and items without a text
    (not hydrated); ``texts`` holds each item's body (content, or a concept's name and
    description). Returns the selection and how many near-duplicates were removed."""
    selected: dict[Kind, list[Scored]] = {}
    removed = 0
    for kind in Kind:
        keep: list[Scored] = []
        kept: list[Fingerprint] = []
        for item in order(shortlisted.get(kind, ())):
            if len(keep) >= limit_for(limits, kind):
                break
            text = texts.get(item.id)
            if text is None:
                continue
            fp = Fingerprint(text)
            if any(fp.near_duplicate(other, dedup_threshold) for other in kept):
                removed += 1
                continue
            keep.append(item)
            kept.append(fp)
        selected[kind] = keep
    return selected, removed


def above_floor(ranked: dict[Kind, list[Scored]], floor: float | None, places: int) -> Mapping[Kind, Sequence[Scored]]:
    """The items whose final score, rounded to ``places`` as the response shows it, reaches
    ``floor`` (None: all of them, unchanged)."""
    if floor is None:
        return ranked
    return {k: [x for x in v if round(x.final, places) >= floor] for k, v in ranked.items()}


async def selection_stage(ctx: RequestContext, services: Services) -> str:
    """The selection stage: the score floor, then per kind the best items without near-duplicates."""
    ac = ctx.cfg.assembly
    texts = {i: entity_body(e) for i, e in ctx.entities.items()}
    ranked = above_floor(ctx.rerank.items, ctx.request.min_score, ac.score_decimals)
    ctx.selected, ctx.near_duplicates_removed = select(ranked, texts, ctx.intake.limits, ac.dedup_jaccard)
    return "ok"
