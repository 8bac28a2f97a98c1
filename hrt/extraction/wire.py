"""A :class:`ConversationRequest` from the wire: the body of ``POST /v1/conversations`` and the
arguments of the MCP tool ``remember``, validated strictly (JSON's types as declared, as ingest
does) with every invalid field named as the schema names it: ``messages[2].content``.

The body is read as ingest reads its own (:mod:`hrt.jsonbounds`): each message measured in the text,
decoded (to check it) and validated alone from its own text, every other member a short value, a
member that is no field refused unread, so memory holds validated messages, never a tree of the
whole body."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from hrt.errors import InvalidInput, PayloadTooLarge
from hrt.extraction.messages import MAX_MESSAGES, ConversationRequest, Message
from hrt.ingest import MAX_REPORTED_ERRORS
from hrt.jsonbounds import RECORD, SCALAR, TYPE_TAGS, Cursor, decode_text, schema_errors, unknown_member
from hrt.records import valid_id

_FIELDS = ", ".join(ConversationRequest.model_fields)


def field_path(loc: tuple[Any, ...]) -> str:
    """``("messages", 2, "content")`` -> ``messages[2].content``; the empty location is ``body``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("body",) and not ("[" in str(part) or part in TYPE_TAGS):
            out += f".{part}" if out else str(part)
    return out or "body"


def _named(exc: ValidationError, prefix: tuple[Any, ...] = ()) -> list[tuple[str, str]]:
    return [(field_path(prefix + loc), msg) for loc, msg in schema_errors(exc.errors()[:MAX_REPORTED_ERRORS])]


class _Messages:
    """Messages validated one at a time as they are read; their errors kept, up to the bound."""

    def __init__(self) -> None:
        self.valid: list[Message] = []
        self.errors: list[tuple[str, str]] = []

    def add(self, n: int, value: Any, text: str | None = None) -> bool:
        """Validate the ``n``-th message, from its ``text`` in the body when it came in one (the
        value was decoded only to check it), else from ``value``; False once the errors reported
        are at their bound."""
        if n >= MAX_MESSAGES:
            raise PayloadTooLarge(
                f"more than {MAX_MESSAGES} messages in one request: send them in several calls (each one transaction)",
                field="messages",
            )
        try:
            # strictly, from JSON, as ingest validates a record (hrt.ingest.parse_record)
            self.valid.append(Message.model_validate_json(json.dumps(value) if text is None else text, strict=True))
        except ValidationError as exc:
            self.errors.extend(_named(exc, ("messages", n)))
        return len(self.errors) < MAX_REPORTED_ERRORS

    def read(self, items: Iterable[tuple[int, Any]], cur: Cursor | None = None) -> _Messages:
        """Each item validated, from its text in ``cur`` when the items are that cursor's elements."""
        for n, value in items:
            if not self.add(n, value, cur.text[cur.last[0] : cur.last[1]] if cur is not None else None):
                break
        return self


def _request(top: dict[str, Any], messages: _Messages | None) -> ConversationRequest:
    """The request from its short members (decoded JSON) and its messages (validated), or one
    :class:`InvalidInput` naming every bad field, the first in ``field``."""
    errors = list(messages.errors) if messages is not None else []
    fields = dict(top)
    if messages is not None:
        fields["messages"] = messages.valid
    try:
        # the short members strictly from JSON (strings and integers: python mode is the same); the
        # messages are validated already
        request = ConversationRequest.model_validate(fields, strict=True)
    except ValidationError as exc:
        # with invalid messages, the list of the valid ones may be short or empty: not an error of its own
        errors += [e for e in _named(exc) if not (errors and e[0].startswith("messages"))]
    if errors:
        where, message = errors[0]
        raise InvalidInput(f"field '{where}': {message}", field=where, errors=errors[:MAX_REPORTED_ERRORS])
    return request


def conversation_request(value: Any) -> ConversationRequest:
    """``value`` (decoded JSON: the MCP tool's arguments) as a request, or :class:`InvalidInput`
    naming every bad field (the first in ``field``); more than ``MAX_MESSAGES`` messages is
    :class:`PayloadTooLarge` (413, as an ingest of too many records is)."""
    if not isinstance(value, dict):
        raise InvalidInput("field 'body': must be a JSON object", field="body")
    for n, name in enumerate(value):
        if name not in ConversationRequest.model_fields:
            raise unknown_member(n, _FIELDS)
    top = {k: v for k, v in value.items() if k != "messages"}
    said = value.get("messages")
    if not isinstance(said, list):
        return _request({**top, "messages": said} if "messages" in value else top, None)
    return _request(top, _Messages().read(enumerate(said)))


def parse_conversation_body(raw: bytes, users: set[str] | None = None) -> ConversationRequest:
    """The body of ``POST /v1/conversations``: strict JSON (400 otherwise), read within bounds
    (413 over them, :mod:`hrt.jsonbounds`), then the request. ``users`` gets its user id when it
    is one, also when the request is refused (for the audit line)."""
    cur = Cursor(decode_text(raw))
    if not cur.skip().at("{"):
        return conversation_request(cur.value(RECORD, "body"))
    top: dict[str, Any] = {}
    try:
        return _read_conversation(cur, top)
    finally:
        user = top.get("user_id")
        if users is not None and isinstance(user, str) and valid_id(user):
            users.add(user)


def _read_conversation(cur: Cursor, top: dict[str, Any]) -> ConversationRequest:
    """The members of the body at ``cur``; the short ones in ``top`` as they come."""
    messages: _Messages | None = None
    for name, n in cur.members():
        if name not in ConversationRequest.model_fields:
            raise unknown_member(n, _FIELDS)
        if name in top or (name == "messages" and messages is not None):
            raise InvalidInput(f"{name} is given twice", field=name)
        if name == "messages" and cur.skip().at("["):
            messages = _Messages().read(cur.elements(RECORD, "messages"), cur)
            if len(messages.errors) >= MAX_REPORTED_ERRORS:
                break  # parsing stops at the bound, as ingest's does
        else:
            top[name] = cur.value(SCALAR, name)
    return _request(top, messages)
