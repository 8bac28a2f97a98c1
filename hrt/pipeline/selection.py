"""Stage 6, selection (with the filters and the shortlist that feeds hydration and rerank).

- Filters drop candidates the request excludes (kinds, tags, agents, time range).
- The shortlist keeps, per kind, the best ``limit x shortlist_factor`` by score then id: enough
  for near-duplicate removal and rerank to choose from, few enough to hydrate in one read.
- Near-duplicate removal: two items of one kind are duplicates when the Jaccard similarity of
  their word 3-gram shingles reaches ``dedup_jaccard`` (seed 000 compared 200-character prefix
  hashes, which misses a changed first word and flags shared boilerplate openings). The better
  scored item stays.
- Top-N per kind, ties broken by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from hrt.contract import Filters, Limits
from hrt.pipeline.scoring import Scored
from hrt.records import Kind
from hrt.text import words as tokenize


def limit_for(limits: Limits, kind: Kind) -> int:
    return {Kind.MEMORY_UNIT: limits.memory_units, Kind.CONCEPT: limits.concepts, Kind.ARTIFACT: limits.artifacts}[kind]


def passes_filters(item: Scored, filters: Filters) -> bool:
    node = item.candidate.node
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


def order(items: Iterable[Scored]) -> list[Scored]:
    return sorted(items, key=lambda s: (-s.final, s.id))


def shortlist(scored: Sequence[Scored], limits: Limits, factor: int) -> dict[Kind, list[Scored]]:
    out: dict[Kind, list[Scored]] = {k: [] for k in Kind}
    for item in order(scored):
        bucket = out[item.kind]
        if len(bucket) < limit_for(limits, item.kind) * factor:
            bucket.append(item)
    return out


def shingles(text: str, n: int = 3) -> frozenset[str]:
    words = tokenize(text)
    if len(words) < n:
        return frozenset(words)
    return frozenset(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def select(
    shortlisted: Mapping[Kind, Sequence[Scored]],
    texts: Mapping[str, str],
    limits: Limits,
    dedup_threshold: float,
) -> tuple[dict[Kind, list[Scored]], int]:
    """Per kind, the best items in order, skipping near-duplicates and items without a text
    (not hydrated); returns the selection and how many near-duplicates were removed."""
    selected: dict[Kind, list[Scored]] = {}
    removed = 0
    for kind in Kind:
        keep: list[Scored] = []
        kept_shingles: list[frozenset[str]] = []
        for item in order(shortlisted.get(kind, ())):
            if len(keep) >= limit_for(limits, kind):
                break
            text = texts.get(item.id)
            if text is None:
                continue
            sh = shingles(text)
            if any(jaccard(sh, other) >= dedup_threshold for other in kept_shingles):
                removed += 1
                continue
            keep.append(item)
            kept_shingles.append(sh)
        selected[kind] = keep
    return selected, removed
