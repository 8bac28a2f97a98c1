"""What each call of the client sends and how it reads the answer (:class:`_Call`), and the
request builders with more to them than a path: retrieve's body, a session's messages, a new key,
an entity, a page of entities, the export and its lines."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote, urlencode

import httpx
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python

from hrt.auth import Scope as KeyScope
from hrt.browse import EntityPage, EntityView
from hrt.contract import AugmentedMemoryContext, NewKey, RetrieveRequest
from hrt.errors import HRTError
from hrt.extraction.messages import ConversationResult, Message

T = TypeVar("T")

EntityKind = Literal["memory_unit", "concept", "artifact"]


@dataclass
class _Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    idempotent: bool  # may it be sent again after it may have been applied
    write: bool = False  # subject to RetryPolicy.retry_writes
    json_body: Any = None
    content: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    accept: tuple[int, ...] = (200,)  # statuses answered with a body to parse, not an error


def _model(cls: type[T]) -> Callable[[httpx.Response], T]:
    adapter = TypeAdapter(cls)
    return lambda response: adapter.validate_json(response.content)


def _context(response: httpx.Response) -> AugmentedMemoryContext:
    return AugmentedMemoryContext.model_validate_json(response.content)


def _segment(value: str) -> str:
    return quote(value, safe="")


def _retrieve_body(request: RetrieveRequest | Mapping[str, Any] | None, fields: Mapping[str, Any]) -> Any:
    if request is not None and fields:
        raise TypeError("give a request or keyword fields, not both")
    if isinstance(request, RetrieveRequest):
        return request.model_dump(mode="json", exclude_unset=True, exclude_none=True)
    # sent as given: the server validates it and names any bad field (the one source of truth)
    return to_jsonable_python(dict(request) if request is not None else dict(fields))


def _record_json(record: Mapping[str, Any] | BaseModel) -> Any:
    if isinstance(record, BaseModel):
        return record.model_dump(mode="json", exclude_none=True)
    return to_jsonable_python(dict(record))


def _retrieve_call(
    request: RetrieveRequest | Mapping[str, Any] | None, fields: Mapping[str, Any], parse: Callable[[httpx.Response], T]
) -> _Call[T]:
    return _Call("POST", "/v1/retrieve", parse, idempotent=True, json_body=_retrieve_body(request, fields))


def _conversation_call(
    user_id: str,
    session_id: str,
    messages: Iterable[Mapping[str, Any] | Message],
    agent_id: str | None,
    start: int | None,
    names: tuple[str | None, str | None] = (None, None),
) -> _Call[ConversationResult]:
    sent = [_record_json(m) for m in messages]
    body: dict[str, Any] = {"user_id": user_id, "session_id": session_id, "messages": sent}
    given = {"agent_id": agent_id, "start": start, "user_name": names[0], "agent_name": names[1]}
    body.update({k: v for k, v in given.items() if v is not None})
    # placed messages (an index each, or a start) sent twice change nothing; unplaced ones would go
    # after the session's last message a second time
    placed = start is not None or all(isinstance(m, dict) and m.get("index") is not None for m in sent)
    return _Call("POST", "/v1/conversations", _model(ConversationResult), idempotent=placed, write=True, json_body=body)


def _create_key_call(
    name: str,
    scopes: Iterable[KeyScope],
    users: Iterable[str] | None,
    expires: str | None,
    rate_limit: float | None,
    max_concurrency: int | None,
) -> _Call[NewKey]:
    body: dict[str, Any] = {"name": name, "scopes": list(scopes), "users": None if users is None else list(users)}
    for key, value in (("expires", expires), ("rate_limit", rate_limit), ("max_concurrency", max_concurrency)):
        if value is not None:
            body[key] = value
    return _Call("POST", "/v1/keys", _model(NewKey), idempotent=False, json_body=body, accept=(201,))


def _get_entity_call(user_id: str, kind: EntityKind, entity_id: str, relation_limit: int | None) -> _Call[EntityView]:
    path = f"/v1/users/{_segment(user_id)}/entities/{_segment(kind)}/{_segment(entity_id)}"
    if relation_limit is not None:
        path += "?" + urlencode({"relation_limit": relation_limit})
    return _Call("GET", path, _model(EntityView), idempotent=True)


def _list_entities_call(user_id: str, filters: Mapping[str, Any], cursor: str | None) -> _Call[EntityPage]:
    """One page of ``GET /v1/users/{user_id}/entities``; the filters as its query parameters (a
    sequence repeats one: ``tags=a&tags=b``; datetimes as ISO 8601)."""
    query: list[tuple[str, str]] = []
    for name, value in sorted({**filters, "cursor": cursor}.items()):
        if isinstance(value, Mapping):  # a metadata filter: one parameter holding its JSON
            query.append((name, json.dumps(value, separators=(",", ":"))))
            continue
        values = list(value) if isinstance(value, list | tuple) else [value]
        for v in values:
            if v is None:
                continue
            text = "true" if v is True else "false" if v is False else v.isoformat() if hasattr(v, "isoformat") else v
            query.append((name, str(text)))
    path = f"/v1/users/{_segment(user_id)}/entities"
    return _Call("GET", f"{path}?{urlencode(query)}" if query else path, _model(EntityPage), idempotent=True)


LIST_FILTERS = frozenset(
    {
        "kind",
        "tags",
        "agent",
        "created_after",
        "created_before",
        "valid_at",
        "prefix",
        "include_invalidated",
        "limit",
        "metadata",
    }
)


def _list_filters(kind: EntityKind | None, filters: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(filters) - LIST_FILTERS)
    if unknown:
        raise TypeError(f"list_entities got unknown filters {unknown}; known: {sorted(LIST_FILTERS)}")
    return {**filters, "kind": kind}


def _export_call(user_id: str) -> _Call[None]:
    path = f"/v1/users/{_segment(user_id)}/export"
    return _Call("GET", path, lambda r: None, idempotent=True, headers={"accept": "application/x-ndjson"})


def _export_cut(base_url: str, exc: Exception | None) -> HRTError:
    """The export's stream ended before its last line (the server cut it, or the connection broke)."""
    detail = f" ({type(exc).__name__}: {exc})" if exc is not None else ""
    error = HRTError(f"the export from {base_url} ended before its last line{detail}: export again")
    error.code = "export_incomplete"
    return error


class _ExportLines:
    """Whole lines from the export's byte chunks; a stream that ends inside a line was cut."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        *lines, self._rest = (self._rest + chunk).split(b"\n")
        return [line for line in lines if line]

    def finished(self) -> bool:
        return not self._rest
