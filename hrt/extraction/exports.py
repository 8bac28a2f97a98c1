"""Chat services' data exports as sessions (``hrt ingest --conversation conversations.json``).

Two exports, told apart by their conversations' shape (each a JSON list of conversations):

- **ChatGPT** (``conversations.json`` of a ChatGPT data export): each conversation a tree of
  messages (``mapping``: node id -> ``{message, parent, children}``) whose ``current_node`` is the
  last message the user saw. Only that branch is read, walking ``parent`` from ``current_node``; the
  edits and regenerations off it are counted (``other_branch``), not sent. A message's role is its
  ``author.role``; its text the string ``content.parts`` joined by a line break (an image, a file:
  ``non_text_part``); its time ``create_time`` (seconds since the epoch).
- **Claude** (``conversations.json`` of a Claude data export): each conversation ``{uuid, name,
  created_at, chat_messages}``, each message ``{uuid, sender: human | assistant, text, content,
  created_at}``; the text is its ``content``'s text parts (``{"type": "text", "text"}``) joined, or
  ``text`` when it has no content; other parts (tool use, tool results, thinking) are
  ``non_text_part``.

Each conversation is one session, ``chatgpt-<id>`` or ``claude-<uuid>``, so a second import of the
same export (or of a later one) sends the same messages at the same positions (``index``: the
position on the branch) and changes nothing. What is not sent is counted by reason:
``system`` and ``tool`` messages, ``hidden`` ones (ChatGPT's context messages the user never saw),
``tool_call`` (an assistant's message to a tool), ``empty`` (no text), ``non_text_content`` (code
runs, browsing results), ``attachment`` (a file attached to a Claude message). Conversations
without a message with text are counted (``empty``), not sessions.

Errors are :class:`~hrt.errors.InvalidInput` naming the file, the conversation (its position and id)
and the field: ``conversations.json: conversation [3] (id 'c-1'): mapping['n2'].message.create_time:
must be a number``. The whole file is read before anything is sent.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from hrt.errors import InvalidInput
from hrt.extraction.messages import PRINTABLE, Message
from hrt.extraction.wire import field_path

CHATGPT_ROLES = {"user": "user", "assistant": "assistant"}
CLAUDE_SENDERS = {"human": "user", "assistant": "assistant"}
MAX_BRANCH = 1_000_000  # a parent chain longer than the mapping is a cycle


@dataclass(frozen=True, slots=True)
class ExportSession:
    """One conversation's messages to send, and what was left out of it by reason."""

    session_id: str
    messages: list[Message]
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass(slots=True)
class ExportRead:
    """An export's conversations as sessions; ``empty``: conversations without a message to send;
    ``skipped``: the messages left out, by reason, over every conversation."""

    source: str  # "chatgpt" or "claude"
    sessions: list[ExportSession]
    conversations: int = 0
    empty: int = 0
    skipped: Counter[str] = field(default_factory=Counter)


class _Where:
    """Names a conversation in errors: the file, its position and its id."""

    def __init__(self, name: str, n: int, conversation_id: Any) -> None:
        cid = conversation_id if isinstance(conversation_id, str) and len(conversation_id) <= 128 else None
        self.head = f"{name}: conversation [{n}]" + (f" (id {cid!r})" if cid else "")
        self.n = n

    def error(self, field_name: str, message: str) -> InvalidInput:
        return InvalidInput(f"{self.head}: {field_name}: {message}", field=f"[{self.n}].{field_name}")


def export_kind(data: Any) -> str | None:
    """``chatgpt`` or ``claude`` when ``data`` (a decoded file) is a list of such conversations."""
    if not isinstance(data, list) or not data or not all(isinstance(c, Mapping) for c in data):
        return None
    if all("mapping" in c and "current_node" in c for c in data):
        return "chatgpt"
    if all("chat_messages" in c and "uuid" in c for c in data):
        return "claude"
    return None


def read_export(data: list[Mapping[str, Any]], kind: str, name: str) -> ExportRead:
    """The sessions of an export (``kind`` as :func:`export_kind` told), or :class:`InvalidInput`."""
    read = ExportRead(kind, [])
    parse = _chatgpt if kind == "chatgpt" else _claude
    for n, conversation in enumerate(data):
        read.conversations += 1
        cid = conversation.get("conversation_id") or conversation.get("id") if kind == "chatgpt" else None
        session = parse(conversation, _Where(name, n, cid or conversation.get("uuid")))
        read.skipped.update(session.skipped)
        if session.messages:
            read.sessions.append(session)
        else:
            read.empty += 1
    return read


def _session_id(prefix: str, value: Any, where: _Where, field_name: str) -> str:
    if not isinstance(value, str) or not value:
        raise where.error(field_name, "must be a non-empty string (the conversation's id)")
    session = f"{prefix}-{value}"
    if len(session) > 128 or not re.match(PRINTABLE, session):
        raise where.error(field_name, "must be at most 120 printable characters")
    return session


def _message(fields: dict[str, Any], where: _Where, at: str) -> Message:
    try:
        return Message.model_validate(fields)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise where.error(f"{at}.{field_path(tuple(first['loc']))}", first["msg"]) from None


def _epoch(value: Any, where: _Where, at: str) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise where.error(at, "must be a number (seconds since the epoch) or null")
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        raise where.error(at, "is out of range") from None


# ---------------------------------------------------------------------------------------------
# ChatGPT
# ---------------------------------------------------------------------------------------------


def _branch(mapping: Mapping[str, Any], current: Any, where: _Where) -> list[tuple[str, Mapping[str, Any]]]:
    """The nodes from the root to ``current``, in order."""
    if not isinstance(current, str) or current not in mapping:
        raise where.error("current_node", "must name a node of mapping")
    out: list[tuple[str, Mapping[str, Any]]] = []
    node_id: Any = current
    while node_id is not None:
        node = mapping.get(node_id) if isinstance(node_id, str) else None
        at = f"mapping[{node_id!r}]" if isinstance(node_id, str) and len(node_id) <= 64 else "mapping"
        if not isinstance(node, Mapping):
            raise where.error(f"{at}", "a parent that is no node of mapping")
        if len(out) > min(len(mapping), MAX_BRANCH):
            raise where.error("mapping", "its parents make a cycle")
        out.append((at, node))
        node_id = node.get("parent")
    return out[::-1]


def _chatgpt(conversation: Mapping[str, Any], where: _Where) -> ExportSession:
    session = _session_id(
        "chatgpt", conversation.get("conversation_id") or conversation.get("id"), where, "conversation_id"
    )
    mapping = conversation.get("mapping")
    if not isinstance(mapping, Mapping):
        raise where.error("mapping", "must be an object of nodes")
    skipped: Counter[str] = Counter()
    messages: list[Message] = []
    branch = _branch(mapping, conversation.get("current_node"), where)
    with_message = sum(1 for n in mapping.values() if isinstance(n, Mapping) and n.get("message") is not None)
    position = 0
    for at, node in branch:
        message = node.get("message")
        if message is None:
            continue  # the tree's root: no message
        if not isinstance(message, Mapping):
            raise where.error(f"{at}.message", "must be an object or null")
        kept = _chatgpt_message(message, where, f"{at}.message", position, skipped)
        position += 1
        with_message -= 1
        if kept is not None:
            messages.append(kept)
    skipped["other_branch"] += with_message
    return ExportSession(session, messages, +skipped)


def _chatgpt_message(
    message: Mapping[str, Any], where: _Where, at: str, position: int, skipped: Counter[str]
) -> Message | None:
    author = message.get("author")
    role = author.get("role") if isinstance(author, Mapping) else None
    if not isinstance(role, str):
        raise where.error(f"{at}.author.role", "must be a string")
    when = _epoch(message.get("create_time"), where, f"{at}.create_time")
    meta = message.get("metadata")
    if role not in CHATGPT_ROLES:
        skipped["tool" if role == "tool" else "system"] += 1
        return None
    if isinstance(meta, Mapping) and meta.get("is_visually_hidden_from_conversation"):
        skipped["hidden"] += 1
        return None
    if role == "assistant" and message.get("recipient", "all") != "all":
        skipped["tool_call"] += 1
        return None
    content = message.get("content")
    if not isinstance(content, Mapping):
        raise where.error(f"{at}.content", "must be an object")
    if content.get("content_type", "text") not in ("text", "multimodal_text"):
        skipped["non_text_content"] += 1
        return None
    parts = content.get("parts", [])
    if not isinstance(parts, list):
        raise where.error(f"{at}.content.parts", "must be a list")
    texts = [p for p in parts if isinstance(p, str)]
    skipped["non_text_part"] += len(parts) - len(texts)
    text = "\n".join(t for t in texts if t.strip())
    if not text.strip():
        skipped["empty"] += 1
        return None
    fields: dict[str, Any] = {"role": CHATGPT_ROLES[role], "content": text, "index": position, "timestamp": when}
    if isinstance(message.get("id"), str):
        fields["metadata"] = {"source": "chatgpt-export", "message_id": message["id"]}
    return _message(fields, where, at)


# ---------------------------------------------------------------------------------------------
# Claude
# ---------------------------------------------------------------------------------------------


def _iso(value: Any, where: _Where, at: str) -> Any:
    if value is not None and not isinstance(value, str):
        raise where.error(at, "must be an ISO 8601 date-time string or null")
    return value


def _claude(conversation: Mapping[str, Any], where: _Where) -> ExportSession:
    session = _session_id("claude", conversation.get("uuid"), where, "uuid")
    said = conversation.get("chat_messages")
    if not isinstance(said, list):
        raise where.error("chat_messages", "must be a list")
    skipped: Counter[str] = Counter()
    messages: list[Message] = []
    for i, message in enumerate(said):
        at = f"chat_messages[{i}]"
        if not isinstance(message, Mapping):
            raise where.error(at, "must be an object")
        sender = message.get("sender")
        if sender not in CLAUDE_SENDERS:
            raise where.error(f"{at}.sender", "must be human or assistant")
        text = _claude_text(message, where, at, skipped)
        for name in ("attachments", "files"):  # files the user attached: not messages, not sent
            attached = message.get(name)
            skipped["attachment"] += len(attached) if isinstance(attached, list) else 0
        when = _iso(message.get("created_at"), where, f"{at}.created_at")
        if not text.strip():
            skipped["empty"] += 1
            continue
        fields: dict[str, Any] = {"role": CLAUDE_SENDERS[sender], "content": text, "index": i, "timestamp": when}
        if isinstance(message.get("uuid"), str):
            fields["metadata"] = {"source": "claude-export", "message_id": message["uuid"]}
        messages.append(_message(fields, where, at))
    return ExportSession(session, messages, +skipped)


def _claude_text(message: Mapping[str, Any], where: _Where, at: str, skipped: Counter[str]) -> str:
    content = message.get("content")
    if content is None or content == []:
        text = message.get("text", "")
        if not isinstance(text, str):
            raise where.error(f"{at}.text", "must be a string")
        return text
    if not isinstance(content, list):
        raise where.error(f"{at}.content", "must be a list of content parts")
    texts: list[str] = []
    for k, part in enumerate(content):
        if not isinstance(part, Mapping):
            raise where.error(f"{at}.content[{k}]", "must be an object")
        if part.get("type") != "text":
            skipped["non_text_part"] += 1  # tool use, tool results, thinking
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
        else:
            raise where.error(f"{at}.content[{k}].text", "must be a string")
    return "\n".join(t for t in texts if t.strip())


__all__ = ["ExportRead", "ExportSession", "export_kind", "read_export"]
