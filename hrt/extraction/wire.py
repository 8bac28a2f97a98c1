"""A :class:`ConversationRequest` from the wire: the body of ``POST /v1/conversations`` and the
arguments of the MCP tool ``remember``, validated strictly (JSON's types as declared, as ingest
does) with every invalid field named as the caller wrote it: ``messages[2].content``."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from hrt.errors import InvalidInput, PayloadTooLarge
from hrt.extraction.messages import MAX_MESSAGES, ConversationRequest
from hrt.ingest import MAX_REPORTED_ERRORS, decode_json

# pydantic names the member of a union in an error's location; a caller wants the field
_TYPE_TAGS = frozenset({"str", "int", "float", "bool", "none", "list", "dict", "constrained-str"})


def field_path(loc: tuple[Any, ...]) -> str:
    """``("messages", 2, "content")`` -> ``messages[2].content``; the empty location is ``body``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part not in ("body",) and not ("[" in str(part) or part in _TYPE_TAGS):
            out += f".{part}" if out else str(part)
    return out or "body"


def conversation_request(value: Any) -> ConversationRequest:
    """``value`` (decoded JSON) as a request, or :class:`InvalidInput` naming every bad field (the
    first in ``field``); more than ``MAX_MESSAGES`` messages is :class:`PayloadTooLarge` (413, as
    an ingest of too many records is)."""
    if isinstance(value, dict) and isinstance(value.get("messages"), list) and len(value["messages"]) > MAX_MESSAGES:
        raise PayloadTooLarge(
            f"more than {MAX_MESSAGES} messages in one request: send them in several calls (each one transaction)",
            field="messages",
        )
    try:
        return ConversationRequest.model_validate_json(json.dumps(value), strict=True)
    except ValidationError as exc:
        errors = [(field_path(tuple(e["loc"])), e["msg"]) for e in exc.errors()[:MAX_REPORTED_ERRORS]]
        where, message = errors[0]
        raise InvalidInput(f"field '{where}': {message}", field=where, errors=errors) from None


def parse_conversation_body(raw: bytes) -> ConversationRequest:
    """The body of ``POST /v1/conversations``: strict JSON (400 otherwise), then the request."""
    return conversation_request(decode_json(raw, "body"))
