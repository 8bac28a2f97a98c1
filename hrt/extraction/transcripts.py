"""Transcript files as sessions of :class:`~hrt.extraction.messages.Message` (``hrt ingest --conversation``).

Two formats, told apart by their shape:

- **OpenAI-style chat**: a JSON list of messages ``{role, content, name?}``, an object
  ``{"messages": [...]}``, or JSON Lines of messages; one session, named by the caller (the file's
  stem by default). ``content`` is a string or OpenAI's list of parts, whose text parts
  (``{"type": "text", "text": ...}``) are joined by a line break; a message with no text (a tool
  call, an image alone) is skipped. ``developer`` is taken as ``system`` and ``function`` as
  ``tool``; a ``timestamp`` and ``metadata`` are kept, other members (``tool_calls``, ...) are
  not. A message's index is its position in the file, so reading the file again after it grew
  sends its old messages unchanged and adds the new ones.
- **LoCoMo**: a sample ``{"conversation": {"session_N": [...], "session_N_date_time": ...}}`` or a
  list of them (:func:`hrt.extraction.locomo.parse_sessions`). One session per LoCoMo session
  (``session-N``); a turn's speaker is the message's name, its time the session's start plus
  (turn - 1) seconds (as :mod:`hrt.eval.locomo.importer` dates turns), its ``dia_id`` in metadata,
  an image's caption appended as `` [image: caption]``. Each sample suggests its own user
  (``locomo-<sample_id>``).

- **ChatGPT and Claude data exports** (their ``conversations.json``): one session per conversation
  (:mod:`hrt.extraction.exports`).

Errors are :class:`~hrt.errors.InvalidInput` naming the file and the position (``line 3``,
``messages[2].content``, ``conversation.session_4[7]``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hrt.errors import InvalidInput, MalformedBody
from hrt.extraction.exports import ExportRead, export_kind, read_export
from hrt.extraction.locomo import parse_sessions, user_id_for
from hrt.extraction.messages import ROLES, ContentError, Message, content_text
from hrt.extraction.wire import field_path
from hrt.ingest import decode_json

# the members of an OpenAI-style message kept; others (tool_calls, refusal, audio, ...) are not
KEPT = ("name", "timestamp", "metadata")
MAX_SESSION_CHARS = 128


@dataclass(frozen=True, slots=True)
class TranscriptSession:
    """One session's messages, in order. ``user_id``: the user the transcript names (a LoCoMo
    sample's ``locomo-<sample_id>``), None when the caller must say whose it is."""

    session_id: str
    messages: list[Message]
    user_id: str | None = None
    skipped: int = 0  # messages without text, not sent
    reasons: Mapping[str, int] = field(default_factory=dict)  # an export's skipped messages, by reason


@dataclass(frozen=True, slots=True)
class Transcript:
    """A file's sessions; ``source``: its format (chat, locomo, chatgpt, claude); ``conversations``:
    the conversations it holds, ``empty`` of which had no message to send (an export's)."""

    source: str
    sessions: list[TranscriptSession]
    conversations: int
    empty: int = 0
    skipped: Mapping[str, int] = field(default_factory=dict)  # an export's, by reason, empty conversations too


def read_transcript(path: Path, session_id: str | None = None) -> list[TranscriptSession]:
    """The sessions of a transcript file; ``session_id`` names an OpenAI-style file's one session
    (default: the file's stem)."""
    return read_transcript_file(path, session_id).sessions


def read_transcript_file(path: Path, session_id: str | None = None) -> Transcript:
    """A transcript file's sessions and what it held (:class:`Transcript`)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: cannot be read ({exc.strerror})", field="file") from exc
    return parse_transcript_file(raw, path.name, session_id, default_session=path.stem[:MAX_SESSION_CHARS])


def parse_transcript(
    raw: bytes, name: str, session_id: str | None = None, *, default_session: str = "transcript"
) -> list[TranscriptSession]:
    """``raw`` (a file's bytes; ``name`` names it in errors) as sessions: an OpenAI-style file's one
    session is ``session_id``, else ``default_session``; a LoCoMo file or an export names its own."""
    return parse_transcript_file(raw, name, session_id, default_session=default_session).sessions


def parse_transcript_file(
    raw: bytes, name: str, session_id: str | None = None, *, default_session: str = "transcript"
) -> Transcript:
    """As :func:`parse_transcript`, with what the file held."""
    sessions = _parse(raw, name, session_id, default_session)
    if isinstance(sessions, Transcript):
        return sessions
    source = "locomo" if sessions and sessions[0].user_id is not None else "chat"
    return Transcript(source, sessions, len(sessions))


def _parse(raw: bytes, name: str, session_id: str | None, default_session: str) -> list[TranscriptSession] | Transcript:
    chat_session = session_id or default_session or "transcript"
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"{name}: not UTF-8 (byte {exc.start})", field="file") from exc
    if not text.strip():
        raise InvalidInput(f"{name}: the file is empty", field="file")
    try:
        data = decode_json(text, name)
    except MalformedBody as exc:
        first = text.strip().splitlines()[0]
        if not (first.startswith("{") and _decodes(first)):
            raise MalformedBody(exc.message, field="file") from exc
        # not one JSON value, but its first line is: JSON Lines of messages, each line on its own
        return [_chat_session(chat_session, list(_json_lines(text, name)), name)]
    kind = export_kind(data)
    if kind is not None:
        if session_id is not None:
            raise InvalidInput(f"{name}: a {kind} export names its own sessions ({kind}-<id>)", field="session_id")
        return _export(read_export(data, kind, name), name)
    if _is_locomo(data):
        if session_id is not None:
            raise InvalidInput(f"{name}: a LoCoMo file names its own sessions (session-N)", field="session_id")
        samples = data if isinstance(data, list) else [data]
        return [s for i, sample in enumerate(samples) for s in _locomo_sessions(sample, i, len(samples) > 1, name)]
    if isinstance(data, Mapping) and isinstance(data.get("messages"), list):
        return [_chat_session(chat_session, [(f"messages[{i}]", m) for i, m in enumerate(data["messages"])], name)]
    if isinstance(data, list):
        return [_chat_session(chat_session, [(f"[{i}]", m) for i, m in enumerate(data)], name)]
    if isinstance(data, Mapping) and ("role" in data or "content" in data):
        return [_chat_session(chat_session, [("line 1", data)], name)]  # JSON Lines of one message
    raise InvalidInput(
        f"{name}: neither a chat transcript (a list of messages, {{'messages': [...]}}, JSON Lines) nor LoCoMo",
        field="file",
    )


def _export(read: ExportRead, name: str) -> Transcript:
    sessions = [
        TranscriptSession(s.session_id, s.messages, None, sum(s.skipped.values()), dict(sorted(s.skipped.items())))
        for s in read.sessions
    ]
    if not sessions:
        raise InvalidInput(f"{name}: no conversation of the {read.source} export has a message with text", field="file")
    return Transcript(read.source, sessions, read.conversations, read.empty, dict(sorted(read.skipped.items())))


def _decodes(line: str) -> bool:
    try:
        decode_json(line, "line")
    except MalformedBody:
        return False
    return True


def _json_lines(text: str, name: str) -> Iterator[tuple[str, Any]]:
    for n, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                yield f"line {n}", decode_json(line, f"line {n}")
            except MalformedBody as exc:
                raise MalformedBody(f"{name}: {exc.message}", field=f"line {n}") from exc


def _is_locomo(data: Any) -> bool:
    items = data if isinstance(data, list) else [data]
    return bool(items) and all(isinstance(s, Mapping) and isinstance(s.get("conversation"), Mapping) for s in items)


def _message(fields: dict[str, Any], where: str, name: str) -> Message:
    try:
        return Message.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(tuple(first["loc"]))
        raise InvalidInput(f"{name}: {where}.{field}: {first['msg']}", field=f"{where}.{field}") from None


# ---------------------------------------------------------------------------------------------
# OpenAI-style chat
# ---------------------------------------------------------------------------------------------


def _chat_session(session_id: str, items: list[tuple[str, Any]], name: str) -> TranscriptSession:
    messages: list[Message] = []
    skipped = 0
    for position, (where, item) in enumerate(items):
        if not isinstance(item, Mapping):
            raise InvalidInput(f"{name}: {where}: a message must be a JSON object", field=where)
        role = item.get("role", "user")
        if role not in ROLES:
            raise InvalidInput(
                f"{name}: {where}.role: {role!r} is not one of {', '.join(sorted(ROLES))}", field=f"{where}.role"
            )
        content = _text(item.get("content"), where, name)
        if not content.strip():
            skipped += 1
            continue
        fields: dict[str, Any] = {"role": ROLES[role], "content": content, "index": position}
        fields.update({k: item[k] for k in KEPT if item.get(k) is not None})
        messages.append(_message(fields, where, name))
    if not messages:
        raise InvalidInput(f"{name}: no message with text", field="messages")
    return TranscriptSession(session_id, messages, None, skipped)


def _text(content: Any, where: str, name: str) -> str:
    """A message's text, read as every entry point reads it (:func:`content_text`)."""
    try:
        text = content_text(content)
    except ContentError as exc:
        raise InvalidInput(
            f"{name}: {where}.content{exc.where}: {exc.message}", field=f"{where}.content{exc.where}"
        ) from None
    if text is None or isinstance(text, str):
        return text or ""
    raise InvalidInput(
        f"{name}: {where}.content: must be a string or a list of content parts", field=f"{where}.content"
    )


# ---------------------------------------------------------------------------------------------
# LoCoMo
# ---------------------------------------------------------------------------------------------


def _locomo_sessions(sample: Mapping[str, Any], i: int, several: bool, name: str) -> list[TranscriptSession]:
    prefix = f"[{i}]." if several else ""
    user = user_id_for(str(sample.get("sample_id") or "conversation"))
    out: list[TranscriptSession] = []
    last: datetime | None = None
    for session in parse_sessions(sample["conversation"]):
        messages: list[Message] = []
        for turn in session.turns:
            ts = session.start + timedelta(seconds=turn.index - 1)
            if last is not None and ts <= last:  # sessions sharing a date: turns stay in order
                ts = last + timedelta(seconds=1)
            last = ts
            parts = [turn.text] if turn.text else []
            if turn.caption:
                parts.append(f"[image: {turn.caption}]")
            fields = {
                "role": "user",
                "name": turn.speaker,
                "content": " ".join(parts),
                "timestamp": ts,
                "index": turn.index - 1,
                "metadata": {"dia_id": turn.dia_id},
            }
            where = f"{prefix}conversation.session_{session.number}[{turn.index - 1}]"
            messages.append(_message(fields, where, name))
        if messages:
            out.append(TranscriptSession(f"session-{session.number}", messages, user))
    if not out:
        raise InvalidInput(f"{name}: {prefix}conversation holds no session with turns", field=f"{prefix}conversation")
    return out


__all__ = [
    "Transcript",
    "TranscriptSession",
    "parse_transcript",
    "parse_transcript_file",
    "read_transcript",
    "read_transcript_file",
]
