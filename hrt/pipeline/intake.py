"""The intake stage: decide the key phrases and the effective configuration of one request.

The configuration (:func:`applied_config`, :func:`configure`): the server's, then the request's
``preset`` (hrt.config.PRESETS), then its overrides (``RetrieveRequest.overrides``: ``config``,
then ``weights`` / ``weights_preset`` and ``max_depth``, older names of ``config.weights`` and
``config.default_depth``). The pipeline and ``hrt eval locomo`` build it with these functions alone.

Key phrases come from the request; else the ``query`` is the one phrase; else the contents of the
last three ``messages`` (the simple build, 200 characters each). Phrases are normalised
(NFKC, whitespace), de-duplicated case-insensitively keeping the first spelling, and capped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from hrt.config import RetrievalConfig, Weights
from hrt.contract import (
    MAX_KEY_PHRASES,
    MAX_PHRASE_CHARS,
    AppliedConfig,
    Filters,
    Limits,
    RetrieveRequest,
    normalise_phrase,
)
from hrt.errors import InvalidInput
from hrt.pipeline.context import settle
from hrt.pipeline.temporal import TimeWindow, phrase_windows

if TYPE_CHECKING:
    from hrt.pipeline.context import RequestContext, Services

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


def applied_config(request: RetrieveRequest) -> AppliedConfig | None:
    """What a request changes in the server's configuration: its preset and overrides, the aliases'
    included; None when it names none of preset, config, weights, weights_preset and max_depth."""
    overrides = request.overrides()
    if request.preset is None and request.config is None and not overrides:
        return None
    return AppliedConfig(preset=request.preset, overrides=overrides)


def configure(base: RetrievalConfig, applied: AppliedConfig | None) -> RetrievalConfig:
    """The configuration a request runs with: ``base`` (the server's), then ``applied``."""
    return base if applied is None else base.with_preset(applied.preset, applied.overrides)


def run_intake(request: RetrieveRequest, cfg: RetrievalConfig, now: datetime) -> Intake:
    """The request's phrases and parameters; ``cfg`` is its configuration (:func:`configure`)."""
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
    as_of = request.as_of or now
    return Intake(
        user_id=request.user_id,
        phrases=phrases,
        phrase_source=source,
        limits=request.limits,
        depth=cfg.expansion.default_depth,
        weights=cfg.scoring.weights.normalised(),
        as_of=as_of,
        filters=request.filters,
        rerank=request.rerank,
        windows=phrase_windows(phrases),
        query=normalise_phrase(request.query) or None if request.query else None,
        valid_at=request.valid_at or as_of,
        include_invalidated=request.include_invalidated,
        seed_ids=tuple(request.seed_ids or ()),
    )


async def intake_stage(ctx: RequestContext, services: Services) -> str:
    """The intake stage: the request's phrases and parameters, and the reads that need nothing
    else started. The embedding runs off the event loop (ONNX Runtime releases the GIL, so under
    concurrent requests it overlaps with other requests' Python work on the second core), and the
    record store's user check meanwhile. The runner then starts grounding's search
    (:func:`hrt.pipeline.grounding.start_search`, the intake stage's ``prefetch``) before the vectors
    are in. A user nothing was ever stored for (a new user's first turn) is no error:
    ``ctx.user_known`` is false, the embedding is cancelled, nothing is searched, and the pipeline
    answers an empty context."""
    intake = ctx.intake = run_intake(ctx.request, ctx.cfg, ctx.now)
    embedding = ctx.embedding = asyncio.ensure_future(
        asyncio.to_thread(services.embedder.embed_queries, list(intake.phrases))
    )
    ctx.searching = None
    try:
        if not await services.records.user_exists(intake.user_id):
            ctx.user_known = False
            await settle(embedding)
    except BaseException:
        await settle(embedding)
        raise
    return "ok"
