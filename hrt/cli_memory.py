"""What the commands over a user's memory do in process: ``hrt ingest`` (a file of records, or a
transcript sent as conversation messages, through the use cases of :mod:`hrt.usecases` as the
operator), ``hrt export`` (a user's records as NDJSON) and ``hrt query``'s text output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from hrt.config import Settings
from hrt.contract import AugmentedMemoryContext
from hrt.errors import HRTError
from hrt.ingest import parse_jsonl

if TYPE_CHECKING:
    from hrt.extraction.messages import ConversationRequest
    from hrt.extraction.transcripts import Transcript, TranscriptSession
    from hrt.service import HRTService


async def ingest_file(
    service: HRTService, path: Path, batch_size: int | None, progress: bool = False
) -> tuple[int, int]:
    """Validate the whole file first, then write it (one transaction per ``batch_size`` lines); the
    bar on stderr shows on a terminal, or always with ``progress``."""
    from tqdm import tqdm

    from hrt import usecases

    with path.open(encoding="utf-8") as fh:
        records = parse_jsonl(fh)
    upserted = deleted = 0
    size = batch_size or max(1, len(records))
    shown = False if progress else None  # None: tqdm shows it on a terminal only
    with tqdm(total=len(records), desc=f"ingest {path.name}", unit="rec", file=sys.stderr, disable=shown) as bar:
        for i in range(0, len(records), size):
            part = records[i : i + size]
            result = await usecases.ingest_records(service, None, part, {})
            upserted += result.upserted
            deleted += result.deleted
            bar.update(len(part))
    return upserted, deleted


async def ingest_conversation(
    service: HRTService,
    path: Path,
    user: str | None,
    session: str | None,
    agent: str | None,
    batch: int,
    progress: bool = False,
    names: tuple[str | None, str | None] = (None, None),
) -> list[dict[str, Any]]:
    """A transcript file (:mod:`hrt.extraction.transcripts`) through ``add_messages``, ``batch``
    messages per call (each one transaction); read whole first, so a bad file sends nothing. One
    summary per session; an export's last line sums the export up (conversations read, sessions
    sent, messages left out by reason)."""
    from tqdm import tqdm

    from hrt import usecases
    from hrt.extraction.transcripts import read_transcript_file

    transcript = read_transcript_file(path, session)
    sessions = transcript.sessions
    users = {s.user_id for s in sessions}
    if user is not None and len(users - {None}) > 1:
        raise HRTError(f"{path.name} holds {len(users)} users' conversations: leave out --user to keep them apart")
    if user is None and None in users:
        raise HRTError(f"{path.name} does not say whose conversation it is: give --user")
    calls = _conversation_calls(transcript, user, agent, batch, names)
    summaries: dict[tuple[str, str], dict[str, Any]] = {}
    total = sum(len(s.messages) for s in sessions)
    with tqdm(
        total=total, desc=f"ingest {path.name}", unit="msg", file=sys.stderr, disable=False if progress else None
    ) as bar:
        for s, request in calls:
            result = await usecases.add_messages(service, None, request, {})
            line = summaries.setdefault(
                (request.user_id, s.session_id),
                {"user_id": request.user_id, "session_id": s.session_id, "messages": 0, "skipped": s.skipped}
                | ({"skipped_why": dict(s.reasons)} if s.reasons else {})
                | dict.fromkeys(("added", "unchanged", "replaced", "concepts_linked", "relations"), 0),
            )
            line["messages"] += len(result.messages)
            for m in result.messages:
                line[m.status] += 1
            line["concepts_linked"] += result.concepts_linked
            line["relations"] += result.relations
            bar.update(len(request.messages))
    lines = list(summaries.values())
    if transcript.source in ("chatgpt", "claude"):
        lines.append(_export_summary(transcript, lines))
    return lines


def _conversation_calls(
    transcript: Transcript, user: str | None, agent: str | None, batch: int, names: tuple[str | None, str | None]
) -> list[tuple[TranscriptSession, ConversationRequest]]:
    """Every request of the transcript, ``batch`` messages each, made before the first is sent: an
    invalid user or session id sends nothing."""
    from hrt.extraction.messages import ConversationRequest

    return [
        (
            s,
            ConversationRequest(
                user_id=user or s.user_id,
                session_id=s.session_id,
                agent_id=agent,
                user_name=names[0],
                agent_name=names[1],
                messages=part,
            ),
        )
        for s in transcript.sessions
        for part in (s.messages[i : i + batch] for i in range(0, len(s.messages), batch))
    ]


def _export_summary(transcript: Transcript, lines: list[dict[str, Any]]) -> dict[str, Any]:
    """An export's last summary line: what was read, sent and left out (and why, over every
    conversation, the empty ones too)."""
    sums = {k: sum(line[k] for line in lines) for k in ("messages", "added", "unchanged", "replaced")}
    return {
        "export": transcript.source,
        "conversations": transcript.conversations,
        "sessions": len(lines),
        "empty_conversations": transcript.empty,
        **sums,
        "skipped": sum(transcript.skipped.values()),
        "skipped_why": dict(transcript.skipped),
    }


async def export_user(settings: Settings, user: str, out: BinaryIO, progress: bool = False) -> int:
    """``hrt export``: one user's records as NDJSON in the ingest format (hrt/export.py) to
    ``out``, from the configured record store, in process; returns the lines written. The bar on
    stderr shows on a terminal, or always with ``progress``."""
    from tqdm import tqdm

    from hrt.export import check_exportable, export_lines
    from hrt.stores.factory import open_record_store

    async with open_record_store(settings) as records:
        await check_exportable(records, user)
        total = sum((await records.counts(user)).values())  # implied SUPERSEDES lines are fewer
        counted: dict[str, Any] = {}
        shown = False if progress else None
        with tqdm(total=total, desc=f"export {user}", unit="rec", file=sys.stderr, disable=shown) as bar:
            async with records.export_reader(user) as reader:
                async for chunk in export_lines(reader, counted):
                    out.write(chunk)
                    bar.update(counted["records"] - bar.n)
            bar.total = bar.n
            bar.refresh()
    out.flush()
    return int(counted["records"])


def render_text(result: AugmentedMemoryContext) -> str:
    """``hrt query``'s human output: the summary, then each item with how it was found."""
    from hrt.pipeline.render import how_found

    provenance = result.retrieval_metadata.provenance
    lines = [result.retrieval_summary, ""]
    if result.retrieval_metadata.user_known is False:
        lines.append(f"  nothing is stored for user {result.retrieval_metadata.user_id} yet")

    def how(ident: str) -> str:
        p = provenance.get(ident)
        return f"\n            {how_found(p, markdown=False)}" if p is not None else ""

    for mu in result.retrieved_memory_units:
        lines.append(
            f"  memory  {mu.final_retrieval_score:.4f}  {mu.creation_ts[:10]}  {mu.muid}  {mu.title}{how(mu.muid)}"
        )
    for c in result.retrieved_concepts:
        lines.append(f"  concept {c.final_retrieval_score:.4f}  {c.type:<10}  {c.id}  {c.name}{how(c.id)}")
    for a in result.retrieved_artifacts:
        lines.append(f"  artifact {a.final_retrieval_score:.4f} {a.artifact_type}  {a.id}  {a.title}{how(a.id)}")
    validity = result.retrieval_metadata.validity
    stale = sorted(i for i, v in validity.intervals.items() if not v.valid)
    if stale:
        lines.append(f"  no longer true on {validity.valid_at[:10]}: {', '.join(stale)}")
    counted = ", ".join(f"{n} {kind}" for kind, n in validity.suppressed.items() if n)
    if counted:
        lines.append(f"  set aside as not true on {validity.valid_at[:10]}: {counted}")
    return "\n".join(lines)
