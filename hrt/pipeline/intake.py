"""Stage 1, intake: decide the key phrases and the effective parameters of one request.

Key phrases come from the request; else the ``query`` is the one phrase; else the contents of the
last three ``messages`` (seed 003's simple build, 200 characters each). Phrases are normalised
(NFKC, whitespace), de-duplicated case-insensitively keeping the first spelling, and capped.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from hrt.config import WEIGHT_PRESETS, RetrievalConfig, Weights
from hrt.contract import MAX_KEY_PHRASES, MAX_PHRASE_CHARS, Filters, Limits, RetrieveRequest, normalise_phrase
from hrt.errors import InvalidInput
from hrt.pipeline.temporal import TimeWindow, phrase_windows

MESSAGES_USED = 3
MESSAGE_CHARS = 200


@dataclass(frozen=True, slots=True)
class Intake:
    user_id: str
    phrases: tuple[str, ...]
    phrase_source: str  # key_phrases | query | messages | seed_ids (none: the named seeds alone)
    limits: Limits
    depth: int
    weights: Weights  # normalised to sum 1
    as_of: datetime
    filters: Filters
    rerank: bool
    windows: tuple[TimeWindow, ...] = ()  # dates the phrases name (hrt/pipeline/temporal.py)
    query: str | None = None  # the request's query, normalised: what a reranker judges against
    valid_at: datetime | None = None  # event time asked about (None: as_of)
    include_invalidated: bool = False
    seed_ids: tuple[str, ...] = ()  # entities the request named to walk from (hrt/pipeline/seeds.py)

    @property
    def event_time(self) -> datetime:
        """What was true when: the request's ``valid_at``, else its ``as_of``."""
        return self.as_of if self.valid_at is None else self.valid_at

    @property
    def validity_filter(self) -> float | None:
        """The event time search and the walk keep to (None: every interval, include_invalidated)."""
        return None if self.include_invalidated else self.event_time.timestamp()


def dedupe_phrases(raw: list[str]) -> tuple[str, ...]:
    seen: set[str] = set()
    out: list[str] = []
    for text in raw:
        phrase = normalise_phrase(text)[:MAX_PHRASE_CHARS].strip()
        key = phrase.casefold()
        if phrase and key not in seen:
            seen.add(key)
            out.append(phrase)
        if len(out) == MAX_KEY_PHRASES:
            break
    return tuple(out)


def run_intake(request: RetrieveRequest, cfg: RetrievalConfig, now: datetime) -> Intake:
    if request.key_phrases:
        phrases, source = dedupe_phrases(request.key_phrases), "key_phrases"
    elif request.query and normalise_phrase(request.query):
        phrases, source = dedupe_phrases([request.query]), "query"
    elif request.messages:
        recent = [m.content[:MESSAGE_CHARS] for m in (request.messages or [])][-MESSAGES_USED:]
        phrases, source = dedupe_phrases(recent), "messages"
    else:
        phrases, source = (), "seed_ids"
    if not phrases and not request.seed_ids:
        raise InvalidInput("no usable key phrase after normalisation", field="key_phrases")
    if request.weights is not None:
        weights = request.weights
    elif request.weights_preset is not None:
        weights = WEIGHT_PRESETS[request.weights_preset]
    else:
        weights = cfg.scoring.weights
    as_of = request.as_of or now
    return Intake(
        user_id=request.user_id,
        phrases=phrases,
        phrase_source=source,
        limits=request.limits,
        depth=cfg.expansion.default_depth if request.max_depth is None else request.max_depth,
        weights=weights.normalised(),
        as_of=as_of,
        filters=request.filters,
        rerank=request.rerank,
        windows=phrase_windows(phrases),
        query=normalise_phrase(request.query) or None if request.query else None,
        valid_at=request.valid_at or as_of,
        include_invalidated=request.include_invalidated,
        seed_ids=tuple(request.seed_ids or ()),
    )
