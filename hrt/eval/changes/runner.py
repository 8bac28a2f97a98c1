"""The run (:func:`evaluate`): every conversation a fresh user of one fresh embedded store, its
messages sent to the conversation route as an agent would, then every question asked, pinned to a
day after the conversation's last message, with and without ``include_invalidated``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hrt.config import Settings
from hrt.contract import AugmentedMemoryContext, Limits, RetrieveRequest
from hrt.embedder import CachedEmbedder, Embedder
from hrt.eval.changes.data import CONTROL, ChangeConversation, ChangeQuestion
from hrt.eval.changes.metrics import Response, SupersessionScore, question_metrics, supersession_scores
from hrt.extraction.messages import ConversationRequest, Message
from hrt.records import Kind, MemoryUnit

if TYPE_CHECKING:
    from hrt.service import HRTService

PER_CALL = 4  # messages per conversation call: an agent writes back a turn or two at a time
MEMORY_UNITS = 10  # memory units a request asks for (recall@10 needs ten)
PHRASES, QUERY = "phrases", "query"
MODES = (PHRASES, QUERY)  # the key phrases an agent's first LLM call names; the question alone
ASK_AFTER = timedelta(days=1)  # as_of: a day after the conversation's last message


@dataclass(slots=True)
class ConversationRun:
    """One conversation after its run: its muids by message index, the supersessions its store
    holds, the memory units that carry a valid_to, and its questions' lines."""

    conversation: ChangeConversation
    muids: list[str]
    score: SupersessionScore
    ended: list[int]
    questions: list[dict[str, Any]] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)


async def evaluate(
    conversations: Sequence[ChangeConversation],
    embedder: Embedder,
    db_path: Path,
    *,
    per_call: int = PER_CALL,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[ConversationRun], dict[str, Any]]:
    """Every conversation through a fresh embedded store at ``db_path``: its runs, and what the run
    was (embedder, settings fingerprint, seconds)."""
    from hrt.service import HRTService

    say = progress or (lambda _msg: None)
    settings = Settings(db_path=db_path)
    service = HRTService(settings, embedder=_cached(embedder, settings))
    await service.start()
    t0 = time.perf_counter()
    try:
        runs = []
        for n, conv in enumerate(conversations, start=1):
            runs.append(await run_conversation(service, conv, per_call))
            say(f"{n}/{len(conversations)} {conv.id}: {len(conv.messages)} messages, {len(runs[-1].score.pairs)} pairs")
    finally:
        await service.close()
    meta = {
        "embedder": getattr(embedder, "name", type(embedder).__name__),
        "config_hash": settings.fingerprint(),
        "per_call": per_call,
        "memory_units_asked": MEMORY_UNITS,
        "ask_after_last_message": "P1D",
        "seconds": round(time.perf_counter() - t0, 2),
    }
    return runs, meta


async def run_conversation(service: HRTService, conv: ChangeConversation, per_call: int) -> ConversationRun:
    """Ingest the conversation, read the supersessions its store holds, ask its questions."""
    call_ms: list[float] = []
    muids = await ingest(service, conv, per_call, call_ms)
    pairs, ended = await supersessions(service, conv.user_id, muids)
    score = supersession_scores(pairs, conv.outdated, conv.reverted)
    run = ConversationRun(conv, muids, score, ended, call_ms=call_ms)
    as_of = _when(conv.messages[-1].timestamp) + ASK_AFTER
    for qi, question in enumerate(conv.questions):
        run.questions.append(await ask_question(service, run, qi, question, as_of))
    return run


async def ingest(service: HRTService, conv: ChangeConversation, per_call: int, call_ms: list[float]) -> list[str]:
    """The conversation's messages to the conversation route, session by session, ``per_call`` a
    call, appended (no index) as an agent sends them; each message's muid, by index."""
    muids = [""] * len(conv.messages)
    for number, indices in conv.sessions():
        for start in range(0, len(indices), per_call):
            part = indices[start : start + per_call]
            request = ConversationRequest(
                user_id=conv.user_id,
                session_id=f"{conv.id}-s{number}",
                messages=[
                    Message(
                        role="user" if conv.messages[i].role == "user" else "assistant",
                        name=conv.messages[i].name,
                        content=conv.messages[i].content,
                        timestamp=_when(conv.messages[i].timestamp),
                    )
                    for i in part
                ],
            )
            began = time.perf_counter()
            result = await service.add_messages(request)
            call_ms.append(1000 * (time.perf_counter() - began))
            for i, done in zip(part, result.messages, strict=True):
                muids[i] = done.muid
    return muids


async def supersessions(
    service: HRTService, user_id: str, muids: Sequence[str]
) -> tuple[list[tuple[int | None, int | None]], list[int]]:
    """The pairs (new -> old, as message indices; None: a memory unit that is no message) the
    user's memory units' ``supersedes`` lists hold, and the messages whose unit carries a
    ``valid_to`` (ended without a successor)."""
    index = {m: i for i, m in enumerate(muids)}
    ids = sorted(i for i, kind in (await service.records.ids(user_id)).items() if kind == Kind.MEMORY_UNIT.value)
    units = await service.records.get_many(user_id, Kind.MEMORY_UNIT, ids)
    pairs: list[tuple[int | None, int | None]] = []
    ended: list[int] = []
    for muid, unit in sorted(units.items()):
        if not isinstance(unit, MemoryUnit):
            continue
        pairs += [(index.get(muid), index.get(old)) for old in unit.supersedes]
        if unit.valid_to is not None and muid in index:
            ended.append(index[muid])
    return pairs, sorted(ended)


async def ask_question(
    service: HRTService, run: ConversationRun, qi: int, q: ChangeQuestion, as_of: datetime
) -> dict[str, Any]:
    """A question's line: in each mode, the default request and the one with
    ``include_invalidated``, as message indices, and the metrics."""
    conv = run.conversation
    index = {m: i for i, m in enumerate(run.muids)}
    control = bool(run.score.pairs or run.ended) if conv.kind == CONTROL else None
    line: dict[str, Any] = {
        "conversation": conv.id,
        "question_index": qi,
        "kind": q.kind,
        "conversation_kind": conv.kind,
        "question": q.question,
        "current": list(q.current),
        "outdated": list(q.outdated),
        "reverted": list(q.reverted),
        "modes": {},
    }
    for mode in MODES:
        default = view(await service.retrieve(request(conv, q, mode, as_of, invalidated=False)), index)
        invalidated = view(await service.retrieve(request(conv, q, mode, as_of, invalidated=True)), index)
        metrics = question_metrics(default, invalidated, q.current, q.outdated, control)
        line["modes"][mode] = {
            "default": response_json(default),
            "include_invalidated": response_json(invalidated),
            "metrics": metrics,
        }
    return line


def request(
    conv: ChangeConversation, q: ChangeQuestion, mode: str, as_of: datetime, *, invalidated: bool
) -> RetrieveRequest:
    """The request of a question in a mode: its key phrases (``phrases``) or its query alone
    (``query``), ten memory units, pinned ``as_of``; with ``include_invalidated`` or not."""
    return RetrieveRequest(
        user_id=conv.user_id,
        key_phrases=list(q.key_phrases) if mode == PHRASES else None,
        query=q.query if mode == QUERY else None,
        limits=Limits(memory_units=MEMORY_UNITS),
        as_of=as_of,
        include_invalidated=invalidated,
    )


def view(ctx: AugmentedMemoryContext, index: Mapping[str, int]) -> Response:
    """A response as message indices: the returned memory units best first, their validity,
    and the memory units set aside."""
    validity = ctx.retrieval_metadata.validity
    ranked = tuple(index.get(mu.muid) for mu in ctx.retrieved_memory_units)
    valid: dict[int, bool | None] = {}
    for mu in ctx.retrieved_memory_units:
        if mu.muid in index:
            interval = validity.intervals.get(mu.muid)
            valid[index[mu.muid]] = interval.valid if interval is not None else None
    return Response(ranked, valid, validity.suppressed.get(Kind.MEMORY_UNIT.value, 0))


def response_json(response: Response) -> dict[str, Any]:
    return {"ranked": list(response.ranked), "invalid": response.invalid, "suppressed": response.suppressed}


def _when(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def _cached(embedder: Embedder, settings: Settings) -> Embedder:
    if isinstance(embedder, CachedEmbedder):
        return embedder
    return CachedEmbedder(embedder, settings.embedding_cache_size)
