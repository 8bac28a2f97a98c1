"""The data of ``hrt eval changes``: conversations in which facts change (or do not), and the
questions whose answers name the messages that state today's truth and those no longer true.

The file (``conversations.json``, shipped in the package; any other with ``--data``)::

    {"version": 1, "conversations": [
      {"id": "lisbon-trip-moved", "kind": "update", "user": "Maya", "assistant": "Assistant",
       "messages": [{"role": "user", "name": "Maya", "content": "...", "timestamp": "2025-02-03T19:05:00Z",
                     "session": 1}, ...],
       "questions": [{"kind": "update", "question": "Where is Maya travelling, and when?",
                      "key_phrases": ["Lisbon trip", "travel dates"], "query": "When is my Lisbon trip?",
                      "current": [7, 8], "outdated": [0, 1], "reverted": []}]}]}

Indices are 0-based over the conversation's messages. ``current``: the messages that state what is
true today; ``outdated``: those that stated something no longer true (none for a control);
``reverted`` (optional): messages that were overturned in between and whose content holds again
(the first plan of a revert): neither current nor outdated, so their rank is not scored, and a
supersession of them is not an error. :func:`problems` lists every rule a file breaks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

KINDS = ("update", "correction", "cancellation", "revert", "two_changes", "control")
CONTROL = "control"
MIN_MESSAGES, MAX_MESSAGES = 8, 40
MIN_QUESTIONS, MAX_QUESTIONS = 1, 4
MIN_PHRASES, MAX_PHRASES = 2, 3
ROLES = ("user", "assistant")
CONVERSATION_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
DEFAULT_DATA = Path(__file__).with_name("conversations.json")


class DataError(ValueError):
    """A data file that breaks the rules; ``problems`` lists every one."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{problems[0]}{more}" if problems else "invalid data")


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: str
    name: str
    content: str
    timestamp: str  # ISO-8601, UTC
    session: int  # 1-based


@dataclass(frozen=True, slots=True)
class ChangeQuestion:
    kind: str
    question: str
    key_phrases: tuple[str, ...]
    query: str
    current: tuple[int, ...]
    outdated: tuple[int, ...]
    reverted: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ChangeConversation:
    id: str
    kind: str
    user: str
    assistant: str
    messages: tuple[ChatMessage, ...]
    questions: tuple[ChangeQuestion, ...]

    @property
    def user_id(self) -> str:
        """The conversation's own HRT user: every conversation is a fresh user."""
        return f"changes-{self.id}"

    def sessions(self) -> list[tuple[int, list[int]]]:
        """(session number, its message indices in order), sessions in order."""
        out: dict[int, list[int]] = {}
        for i, m in enumerate(self.messages):
            out.setdefault(m.session, []).append(i)
        return sorted(out.items())

    @property
    def outdated(self) -> frozenset[int]:
        """Every message some question labels outdated."""
        return frozenset(i for q in self.questions for i in q.outdated)

    @property
    def reverted(self) -> frozenset[int]:
        return frozenset(i for q in self.questions for i in q.reverted)


def load(path: Path = DEFAULT_DATA) -> list[ChangeConversation]:
    """The conversations of a data file, checked (:class:`DataError` names what is wrong)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise DataError([f"{path}: {exc.strerror or exc}"]) from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError([f"{path}: not JSON ({exc})"]) from exc
    found = problems(doc)
    if found:
        raise DataError(found)
    return parse(doc)


def parse(doc: Mapping[str, Any]) -> list[ChangeConversation]:
    """The conversations of a checked document (:func:`problems` returned nothing)."""
    return [
        ChangeConversation(
            id=c["id"],
            kind=c["kind"],
            user=c["user"],
            assistant=c["assistant"],
            messages=tuple(
                ChatMessage(m["role"], m["name"], m["content"], m["timestamp"], int(m["session"]))
                for m in c["messages"]
            ),
            questions=tuple(
                ChangeQuestion(
                    kind=q["kind"],
                    question=q["question"],
                    key_phrases=tuple(q["key_phrases"]),
                    query=q["query"],
                    current=tuple(q["current"]),
                    outdated=tuple(q["outdated"]),
                    reverted=tuple(q.get("reverted", ())),
                )
                for q in c["questions"]
            ),
        )
        for c in doc["conversations"]
    ]


def problems(doc: Any) -> list[str]:
    """Every rule the document breaks, as ``where: what`` lines (empty: the document is valid)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("conversations"), list) or not doc["conversations"]:
        return ["the document must be an object with a non-empty list 'conversations'"]
    found: list[str] = []
    seen: set[str] = set()
    for n, conv in enumerate(doc["conversations"]):
        if not isinstance(conv, dict):
            found.append(f"conversations[{n}]: not an object")
            continue
        where = f"conversation {conv.get('id', n)!s}"
        if conv.get("id") in seen:
            found.append(f"{where}: the id is not unique")
        seen.add(str(conv.get("id")))
        found += [f"{where}: {p}" for p in conversation_problems(conv)]
    return found


def conversation_problems(conv: Mapping[str, Any]) -> list[str]:
    """What is wrong with one conversation: its fields, messages, then questions."""
    found: list[str] = []
    if not isinstance(conv.get("id"), str) or not CONVERSATION_ID.match(conv["id"]):
        found.append("id must be 1-63 chars of [a-z0-9-]")
    if conv.get("kind") not in KINDS:
        found.append(f"kind must be one of {', '.join(KINDS)}")
    for key in ("user", "assistant"):
        if not _text(conv.get(key)):
            found.append(f"{key} must be a non-empty string")
    messages = conv.get("messages")
    if not isinstance(messages, list) or not MIN_MESSAGES <= len(messages) <= MAX_MESSAGES:
        return [*found, f"messages must be a list of {MIN_MESSAGES} to {MAX_MESSAGES}"]
    found += message_problems(conv, messages)
    questions = conv.get("questions")
    if not isinstance(questions, list) or not MIN_QUESTIONS <= len(questions) <= MAX_QUESTIONS:
        return [*found, f"questions must be a list of {MIN_QUESTIONS} to {MAX_QUESTIONS}"]
    for i, q in enumerate(questions):
        found += [f"questions[{i}]: {p}" for p in question_problems(q, len(messages), conv.get("kind"))]
    kinds = {q.get("kind") for q in questions if isinstance(q, dict)}
    if conv.get("kind") in KINDS and conv.get("kind") not in kinds:
        found.append(f"no question is of the conversation's kind {conv.get('kind')}")
    if conv.get("kind") == "two_changes" and sum(1 for q in questions if isinstance(q, dict)) < 2:
        found.append("a two_changes conversation asks about both facts (at least two questions)")
    return found


def message_problems(conv: Mapping[str, Any], messages: Sequence[Any]) -> list[str]:
    """Roles, speakers, contents, timestamps strictly increasing, sessions 1, 2, ... in order."""
    found: list[str] = []
    last: datetime | None = None
    session = 1
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            found.append(f"{where}: not an object")
            continue
        if m.get("role") not in ROLES:
            found.append(f"{where}: role must be user or assistant")
        elif m.get("name") != conv.get(m["role"]):
            found.append(f"{where}: name must be the conversation's {m['role']}, {conv.get(m['role'])!r}")
        if not _text(m.get("content")):
            found.append(f"{where}: content must be a non-empty string")
        when = _timestamp(m.get("timestamp"))
        if when is None:
            found.append(f"{where}: timestamp must be ISO-8601 with a time zone")
        elif last is not None and when <= last:
            found.append(f"{where}: timestamp must be after the previous message's")
        last = when or last
        number = m.get("session")
        if not isinstance(number, int) or isinstance(number, bool) or number not in (session, session + 1):
            found.append(f"{where}: session must be the previous message's or the next one (starting at 1)")
        elif i == 0 and number != 1:
            found.append(f"{where}: the first session is 1")
        else:
            session = number
    return found


def question_problems(q: Any, n_messages: int, conversation_kind: Any) -> list[str]:
    """The fields of a question, its indices in range and disjoint, its kind against its labels."""
    if not isinstance(q, dict):
        return ["not an object"]
    found: list[str] = []
    kind = q.get("kind")
    if kind not in KINDS:
        found.append(f"kind must be one of {', '.join(KINDS)}")
    elif (kind == CONTROL) != (conversation_kind == CONTROL):
        found.append("control questions belong to control conversations, and only they")
    for key in ("question", "query"):
        if not _text(q.get(key)):
            found.append(f"{key} must be a non-empty string")
    phrases = q.get("key_phrases")
    if not isinstance(phrases, list) or not MIN_PHRASES <= len(phrases) <= MAX_PHRASES:
        found.append(f"key_phrases must be a list of {MIN_PHRASES} to {MAX_PHRASES}")
    elif not all(_text(p) for p in phrases):
        found.append("key_phrases must be non-empty strings")
    labels = {key: q.get(key, []) for key in ("current", "outdated", "reverted")}
    for key, value in labels.items():
        if not isinstance(value, list) or not all(_index(i, n_messages) for i in value) or len(set(value)) < len(value):
            found.append(f"{key} must be distinct message indices in 0..{n_messages - 1}")
            return found
    current, outdated, reverted = (set(labels[k]) for k in ("current", "outdated", "reverted"))
    if not current:
        found.append("current must name at least one message")
    if current & outdated or current & reverted or outdated & reverted:
        found.append("current, outdated and reverted must be disjoint")
    if kind in KINDS and (kind == CONTROL) == bool(outdated):
        found.append("a control question has no outdated message, any other question at least one")
    if (reverted and kind != "revert") or (kind == "revert" and not reverted):
        found.append("reverted belongs to revert questions, each of which names the messages it reverts to")
    if current and outdated and max(current) < max(outdated):
        found.append("the latest current message must come after every outdated one")
    return found


def composition(conversations: Sequence[ChangeConversation]) -> dict[str, dict[str, int]]:
    """Conversations and questions per kind (a conversation's kind; each question's own)."""
    convs = {k: sum(1 for c in conversations if c.kind == k) for k in KINDS}
    questions = {k: sum(1 for c in conversations for q in c.questions if q.kind == k) for k in KINDS}
    messages = {k: sum(len(c.messages) for c in conversations if c.kind == k) for k in KINDS}
    return {"conversations": convs, "questions": questions, "messages": messages}


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _index(value: Any, n: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None
