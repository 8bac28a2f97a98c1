"""A typed Python client for ``hrt serve``: :class:`HRTClient` (blocking) and :class:`AsyncHRTClient`.

    from hrt.client import HRTClient

    with HRTClient("http://127.0.0.1:8080", api_key=KEY) as hrt:
        ctx = hrt.retrieve(user_id="u-maya", key_phrases=["Project Phoenix"], render={"max_tokens": 1500})
        print(ctx.retrieval_metadata.rendered.text)

Every route has a method returning the contract's pydantic models (``retrieve`` ->
:class:`~hrt.contract.AugmentedMemoryContext`). Errors are raised as HRT's own error types
(:mod:`hrt.errors`), carrying the server's ``code``, ``message`` and ``field`` from its
``{"error": {...}}`` body: 422 -> :class:`InvalidInput`, 400 -> :class:`MalformedBody`, 413 ->
:class:`PayloadTooLarge`, 401 -> :class:`Unauthenticated`, 403 -> :class:`Forbidden`, 429 ->
:class:`RateLimited` (``retry_after_s``), 404 -> :class:`NotFound`, 409 -> :class:`Conflict`, 503 ->
:class:`StoreUnavailable`; anything else -> :class:`HRTError` with the server's code.

Retries (:class:`RetryPolicy`): bounded in attempts and in total time, with exponential backoff and
jitter, waiting at least what ``Retry-After`` asks. Which failures are retried depends on whether a
second attempt could do harm:

- 429, and a connection that was never made (connect error or timeout, no free connection):
  nothing reached the routes, so every request is retried, key creation included.
- 503 and a connection lost after the request was sent (read or write error or timeout): the
  request may have been applied, so only idempotent requests are retried: the reads (retrieve,
  stats, keys list, health, metrics), ingest, the two deletes, and messages that each carry their
  ``index`` (or follow a ``start``): sent again they change nothing, while messages without a
  place would be added after the session's last one a second time, so they are retried only when
  nothing was sent. Ingest is idempotent by id (the
  same batch written twice leaves the same records: the last write wins) and a delete deletes
  nothing the second time, so these are retried too; the cost is that a retried write's counts
  describe the last attempt (a delete retried after it was applied reports 0), and that a batch
  replayed after another client rewrote the same ids overwrites that newer write. Set
  ``RetryPolicy(retry_writes=False)`` to retry writes only when nothing was sent. Creating and
  revoking keys are never retried then: a second creation would fail on the name (and the first
  secret would be lost), a second revocation answers 404.

Metadata filters (``filters={"metadata": ...}`` of ``retrieve``, ``metadata=`` of
``list_entities``) keep the memory units whose metadata matches, with operators, as in
docs/api.md ("Metadata filters")::

    hrt.retrieve(user_id="u-maya", query="launch risks",
                 filters={"metadata": {"and": [{"project": "apollo"}, {"priority": {"gte": 2}}]}})
    for unit in hrt.list_entities("u-maya", metadata={"labels": {"contains": "q3"}}): ...

``{field: value}`` is equality; ``{field: {op: value}}`` with op one of ``eq``, ``ne``, ``gt``,
``gte``, ``lt``, ``lte``, ``in``, ``nin``, ``contains``, ``exists``; ``and``/``or`` take lists,
``not`` one filter; a field is a key or a dotted path (``owner.team``). Types never mix (2 is not
"2"); an absent field satisfies nothing but ``{"exists": false}``. A bad filter is
:class:`InvalidInput` naming its position (field ``filters.metadata`` or ``metadata``).

The client never reads the environment: give ``base_url`` and ``api_key``, or call
``HRTClient.from_env(os.environ)`` (``HRT_URL``, default ``http://127.0.0.1:8080``, and
``HRT_API_KEY``).
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from types import TracebackType
from typing import IO, Any, Generic, Literal, Self, TypeVar
from urllib.parse import quote, urlencode

import httpx
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python

from hrt import __version__
from hrt.auth import Scope as KeyScope
from hrt.browse import EntityPage, EntitySummary, EntityView
from hrt.contract import (
    AugmentedMemoryContext,
    Health,
    KeyInfo,
    MergeResult,
    NewKey,
    Readiness,
    RetrieveRequest,
    UserStats,
    WriteSummary,
)
from hrt.errors import (
    Conflict,
    Forbidden,
    HRTError,
    InvalidInput,
    MalformedBody,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    StoreUnavailable,
    Unauthenticated,
)
from hrt.extraction.messages import ConversationResult, Message

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = httpx.Timeout(45.0, connect=5.0)  # above the server's own 30 s request budget

EntityKind = Literal["memory_unit", "concept", "artifact"]


# --------------------------------------------------------------------------------------------
# Retries
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """``max_attempts`` in all (1: no retry); waits of ``backoff_s`` doubling per attempt up to
    ``max_backoff_s`` (times a random factor in [0.5, 1] with ``jitter``), never less than the
    server's ``Retry-After``; no wait that would end past ``max_total_s`` after the first attempt
    began (then the last error is raised). ``retry_writes``: see the module's docstring."""

    max_attempts: int = 4
    backoff_s: float = 0.25
    max_backoff_s: float = 5.0
    max_total_s: float = 30.0
    jitter: bool = True
    retry_writes: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if min(self.backoff_s, self.max_backoff_s, self.max_total_s) < 0:
            raise ValueError("backoff_s, max_backoff_s and max_total_s must not be negative")


NO_RETRY = RetryPolicy(max_attempts=1)

# never reached the server: safe to send again whatever the request
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """``Retry-After`` as seconds from now: delay-seconds or an HTTP date; None when absent or unreadable."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------


def error_from_response(response: httpx.Response) -> HRTError:
    """The HRT error a response stands for, with the server's ``code``, ``message`` and ``field``."""
    status = response.status_code
    code, message, where = f"http_{status}", f"HTTP {status}", None
    try:
        body = response.json()
    except ValueError:
        body = None
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict):
        code = str(detail.get("code") or code)
        message = str(detail.get("message") or message)
        where = detail.get("field") if isinstance(detail.get("field"), str) else None
    elif response.text:
        message = f"HTTP {status}: {response.text[:200]}"
    exc: HRTError
    if status == 400:
        exc = MalformedBody(message, field=where)
    elif status == 413:
        exc = PayloadTooLarge(message, field=where)
    elif status in (415, 422):
        exc = InvalidInput(message, field=where)
    elif status == 401:
        exc = Unauthenticated(message, reason="unknown")
        exc.field = where
    elif status == 403:
        exc = Forbidden(message, reason="user" if where in ("user_id", "users") else "scope", field=where)
    elif status == 429:
        after = retry_after_seconds(response.headers.get("retry-after"))
        reason = "concurrency" if "concurren" in message else "rate"
        exc = RateLimited(message, retry_after_s=math.ceil(after) if after is not None else 1, reason=reason)
        exc.field = where
    elif status == 404:
        exc = NotFound(message, field=where)
    elif status == 409:
        exc = Conflict(message, field=where)
    elif status == 503:
        exc = StoreUnavailable(message, public=message, field=where)
    else:
        exc = HRTError(message, field=where)
    exc.code = code
    return exc


def _unreachable(base_url: str, exc: httpx.TransportError) -> StoreUnavailable:
    text = f"HRT at {base_url} could not be reached ({type(exc).__name__}: {exc})"
    error = StoreUnavailable(text, store="HRT", public=text)
    error.code = "unreachable"
    return error


# --------------------------------------------------------------------------------------------
# Calls: what each method sends and how it reads the answer, shared by both clients
# --------------------------------------------------------------------------------------------


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


def _ingest_call(records: Iterable[Mapping[str, Any] | BaseModel]) -> _Call[WriteSummary]:
    body = {"records": [_record_json(r) for r in records]}
    return _Call("POST", "/v1/ingest", _model(WriteSummary), idempotent=True, write=True, json_body=body)


def _ingest_jsonl_call(data: bytes | str) -> _Call[WriteSummary]:
    content = data.encode("utf-8") if isinstance(data, str) else data
    headers = {"content-type": "application/x-ndjson"}
    return _Call(
        "POST", "/v1/ingest", _model(WriteSummary), idempotent=True, write=True, content=content, headers=headers
    )


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


def _delete_entity_call(user_id: str, kind: EntityKind, entity_id: str) -> _Call[WriteSummary]:
    path = f"/v1/users/{_segment(user_id)}/entities/{_segment(kind)}/{_segment(entity_id)}"
    return _Call("DELETE", path, _model(WriteSummary), idempotent=True, write=True)


def _merge_concepts_call(user_id: str, target: str, ids: Sequence[str]) -> _Call[MergeResult]:
    # a merge sent twice changes nothing the second time (the merged concepts are gone)
    path = f"/v1/users/{_segment(user_id)}/concepts/{_segment(target)}/merge"
    return _Call("POST", path, _model(MergeResult), idempotent=True, write=True, json_body={"ids": list(ids)})


def _delete_user_call(user_id: str) -> _Call[WriteSummary]:
    return _Call("DELETE", f"/v1/users/{_segment(user_id)}", _model(WriteSummary), idempotent=True, write=True)


def _stats_call(user_id: str) -> _Call[UserStats]:
    return _Call("GET", f"/v1/users/{_segment(user_id)}/stats", _model(UserStats), idempotent=True)


def _healthz_call() -> _Call[Health]:
    return _Call("GET", "/healthz", _model(Health), idempotent=True)


def _readyz_call() -> _Call[Readiness]:
    # 503 here is an answer (not ready, with the reason), not an error to retry
    return _Call("GET", "/readyz", _model(Readiness), idempotent=True, accept=(200, 503))


def _metrics_call() -> _Call[str]:
    return _Call("GET", "/metrics", lambda r: r.text, idempotent=True)


def _list_keys_call() -> _Call[list[KeyInfo]]:
    return _Call("GET", "/v1/keys", _model(list[KeyInfo]), idempotent=True)


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


def _revoke_key_call(name: str) -> _Call[KeyInfo]:
    return _Call("DELETE", f"/v1/keys/{_segment(name)}", _model(KeyInfo), idempotent=False)


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


class _Base:
    def __init__(self, base_url: str, api_key: str | None, retry: RetryPolicy | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry if retry is not None else RetryPolicy()
        self._rng = random.Random()
        headers = {"user-agent": f"hrt-client/{__version__}", "accept": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._headers = headers

    def _may_resend(self, call: _Call[Any]) -> bool:
        """After the request may have been applied (a 503, a connection lost once it was sent)."""
        return call.idempotent and (self.retry.retry_writes or not call.write)

    def _backoff(self, attempt: int) -> float:
        wait = float(min(self.retry.max_backoff_s, self.retry.backoff_s * 2.0 ** (attempt - 1)))
        return wait * self._rng.uniform(0.5, 1.0) if self.retry.jitter else wait

    def _wait_before_retry(
        self, call: _Call[Any], attempt: int, started: float, outcome: httpx.Response | httpx.TransportError
    ) -> float | None:
        """Seconds to wait before attempt ``attempt + 1``, or None to give up with this outcome."""
        if attempt >= self.retry.max_attempts:
            return None
        wait = self._backoff(attempt)
        if isinstance(outcome, httpx.Response):
            if outcome.status_code == 429 or (outcome.status_code == 503 and self._may_resend(call)):
                after = retry_after_seconds(outcome.headers.get("retry-after"))
                wait = max(wait, after or 0.0)
            else:
                return None
        elif not (isinstance(outcome, _NOT_SENT) or self._may_resend(call)):
            return None
        if time.monotonic() + wait - started > self.retry.max_total_s:
            return None
        return wait

    def _send_args(self, call: _Call[Any]) -> dict[str, Any]:
        args: dict[str, Any] = {"headers": {**self._headers, **call.headers}}
        if call.content is not None:
            args["content"] = call.content
        elif call.json_body is not None:
            args["json"] = call.json_body
        return args

    def _result(self, call: _Call[T], outcome: httpx.Response | httpx.TransportError) -> T:
        if isinstance(outcome, httpx.TransportError):
            raise _unreachable(self.base_url, outcome) from outcome
        if outcome.status_code in call.accept:
            return call.parse(outcome)
        raise error_from_response(outcome)

    def _failure(self, outcome: httpx.Response | httpx.TransportError) -> HRTError:
        """The error an outcome that is not an answer stands for (a streamed response, read first)."""
        if isinstance(outcome, httpx.TransportError):
            return _unreachable(self.base_url, outcome)
        return error_from_response(outcome)


class HRTClient(_Base):
    """A blocking client of one ``hrt serve``. ``transport``: an httpx transport (tests use
    ``httpx.MockTransport``); ``sleep``: how to wait between attempts."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(base_url, api_key, retry)
        self._sleep = sleep
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **kwargs: Any) -> Self:
        """``HRT_URL`` (default ``http://127.0.0.1:8080``) and ``HRT_API_KEY`` from ``environ``
        (pass ``os.environ``); other arguments as the constructor's."""
        return cls(environ.get("HRT_URL", DEFAULT_URL), environ.get("HRT_API_KEY"), **kwargs)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _do(self, call: _Call[T]) -> T:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = self._http.request(call.method, call.path, **self._send_args(call))
            except httpx.TransportError as exc:
                outcome = exc
            if isinstance(outcome, httpx.Response) and outcome.status_code in call.accept:
                return call.parse(outcome)
            wait = self._wait_before_retry(call, attempt, started, outcome)
            if wait is None:
                return self._result(call, outcome)
            self._sleep(wait)

    def retrieve(
        self, request: RetrieveRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AugmentedMemoryContext:
        """``POST /v1/retrieve``: a :class:`RetrieveRequest`, a mapping, or its fields as keywords."""
        return self._do(_retrieve_call(request, fields, _context))

    def retrieve_json(self, request: RetrieveRequest | Mapping[str, Any] | None = None, /, **fields: Any) -> bytes:
        """The response's canonical JSON bytes, as the server sent them."""
        return self._do(_retrieve_call(request, fields, lambda r: r.content))

    def ingest(self, records: Iterable[Mapping[str, Any] | BaseModel]) -> WriteSummary:
        """``POST /v1/ingest``: records (dicts in the ingest format, or ``hrt.records`` models), one transaction."""
        return self._do(_ingest_call(records))

    def ingest_jsonl(self, data: bytes | str) -> WriteSummary:
        """``POST /v1/ingest`` of JSON Lines (a file's contents), one transaction."""
        return self._do(_ingest_jsonl_call(data))

    def add_messages(
        self,
        user_id: str,
        session_id: str,
        messages: Iterable[Mapping[str, Any] | Message],
        *,
        agent_id: str | None = None,
        start: int | None = None,
        user_name: str | None = None,
        agent_name: str | None = None,
    ) -> ConversationResult:
        """``POST /v1/conversations``: messages of one session (dicts ``{role, content, ...}`` or
        :class:`~hrt.extraction.messages.Message`), one transaction; each message's memory unit in
        the result. ``user_name`` and ``agent_name`` name the speakers of the user's and the
        assistant's messages that carry no ``name``."""
        return self._do(_conversation_call(user_id, session_id, messages, agent_id, start, (user_name, agent_name)))

    def delete_entity(self, user_id: str, kind: EntityKind, entity_id: str) -> WriteSummary:
        return self._do(_delete_entity_call(user_id, kind, entity_id))

    def delete_user(self, user_id: str) -> WriteSummary:
        return self._do(_delete_user_call(user_id))

    def merge_concepts(self, user_id: str, target: str, ids: Sequence[str]) -> MergeResult:
        """``POST /v1/users/{user_id}/concepts/{target}/merge``: ``ids`` merged into ``target``."""
        return self._do(_merge_concepts_call(user_id, target, ids))

    def stats(self, user_id: str) -> UserStats:
        return self._do(_stats_call(user_id))

    def healthz(self) -> Health:
        return self._do(_healthz_call())

    def readyz(self) -> Readiness:
        """The readiness report, whether the server is ready (200) or not (503)."""
        return self._do(_readyz_call())

    def metrics(self) -> str:
        return self._do(_metrics_call())

    def list_keys(self) -> list[KeyInfo]:
        return self._do(_list_keys_call())

    def create_key(
        self,
        name: str,
        scopes: Iterable[KeyScope],
        users: Iterable[str] | None,
        *,
        expires: str | None = None,
        rate_limit: float | None = None,
        max_concurrency: int | None = None,
    ) -> NewKey:
        """``POST /v1/keys``; ``users`` None: every user. The secret is in ``.key``, once."""
        return self._do(_create_key_call(name, scopes, users, expires, rate_limit, max_concurrency))

    def revoke_key(self, name: str) -> KeyInfo:
        return self._do(_revoke_key_call(name))

    def get_entity(
        self, user_id: str, kind: EntityKind, entity_id: str, *, relation_limit: int | None = None
    ) -> EntityView:
        """``GET /v1/users/{user_id}/entities/{kind}/{id}``: the record as ingested, its relations
        (at most ``relation_limit``, default 100), validity, supersession and writer; NotFound when absent."""
        return self._do(_get_entity_call(user_id, kind, entity_id, relation_limit))

    def list_entities(self, user_id: str, kind: EntityKind | None = None, **filters: Any) -> Iterator[EntitySummary]:
        """Every entity of the user that the filters let through, in id order, fetched a page at a
        time (``GET /v1/users/{user_id}/entities``): ``tags``, ``agent`` (lists), ``created_after``,
        ``created_before``, ``valid_at`` (ISO 8601 or datetimes), ``prefix``, ``include_invalidated``,
        ``limit`` (the page size, 1 to 500; a page may end sooner at the server's byte bound),
        ``metadata`` (a metadata filter, a mapping: memory units alone, see the module's docstring).
        Each entity's ``record`` is None unless the key has the ``read`` (or ``export``) scope."""
        sent = _list_filters(kind, filters)
        cursor: str | None = None
        while True:
            page = self._do(_list_entities_call(user_id, sent, cursor))
            yield from page.entities
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # --- export (GET /v1/users/{user_id}/export, scope export) --------------------------------

    def export(self, user_id: str) -> Iterator[dict[str, Any]]:
        """The user's records, one dict per NDJSON line of ``GET /v1/users/{user_id}/export``
        (the ingest format), as they stream in; the request is sent at the first ``next``. A
        stream cut short raises :class:`HRTError` ``export_incomplete``."""
        for line in self._export_lines(user_id):
            yield json.loads(line)

    def export_to(self, user_id: str, out: IO[bytes]) -> int:
        """Write the export's bytes, as the server sent them, to ``out``; returns the lines written.
        ``POST /v1/ingest`` of them (in consecutive batches of any size) rebuilds the user."""
        n = 0
        for line in self._export_lines(user_id):
            out.write(line + b"\n")
            n += 1
        return n

    def _export_lines(self, user_id: str) -> Iterator[bytes]:
        call = _export_call(user_id)
        started = time.monotonic()
        attempt = 0
        while True:  # retried as any read until the answer starts, never after a line
            attempt += 1
            outcome: httpx.Response | httpx.TransportError
            try:
                request = self._http.build_request(call.method, call.path, **self._send_args(call))
                outcome = self._http.send(request, stream=True)
            except httpx.TransportError as exc:
                outcome = exc
            if isinstance(outcome, httpx.Response):
                if outcome.status_code == 200:
                    break
                outcome.read()
                outcome.close()
            wait = self._wait_before_retry(call, attempt, started, outcome)
            if wait is None:
                raise self._failure(outcome)
            self._sleep(wait)
        lines = _ExportLines()
        try:
            for chunk in outcome.iter_bytes():
                yield from lines.feed(chunk)
        except httpx.TransportError as exc:
            raise _export_cut(self.base_url, exc) from exc
        finally:
            outcome.close()
        if not lines.finished():
            raise _export_cut(self.base_url, None)


class AsyncHRTClient(_Base):
    """The same client for asyncio: every method is a coroutine."""

    def __init__(
        self,
        base_url: str = DEFAULT_URL,
        api_key: str | None = None,
        *,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        super().__init__(base_url, api_key, retry)
        self._sleep = sleep
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **kwargs: Any) -> Self:
        """``HRT_URL`` (default ``http://127.0.0.1:8080``) and ``HRT_API_KEY`` from ``environ``
        (pass ``os.environ``); other arguments as the constructor's."""
        return cls(environ.get("HRT_URL", DEFAULT_URL), environ.get("HRT_API_KEY"), **kwargs)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _do(self, call: _Call[T]) -> T:
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            outcome: httpx.Response | httpx.TransportError
            try:
                outcome = await self._http.request(call.method, call.path, **self._send_args(call))
            except httpx.TransportError as exc:
                outcome = exc
            if isinstance(outcome, httpx.Response) and outcome.status_code in call.accept:
                return call.parse(outcome)
            wait = self._wait_before_retry(call, attempt, started, outcome)
            if wait is None:
                return self._result(call, outcome)
            await self._sleep(wait)

    async def retrieve(
        self, request: RetrieveRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> AugmentedMemoryContext:
        """``POST /v1/retrieve``: a :class:`RetrieveRequest`, a mapping, or its fields as keywords."""
        return await self._do(_retrieve_call(request, fields, _context))

    async def retrieve_json(
        self, request: RetrieveRequest | Mapping[str, Any] | None = None, /, **fields: Any
    ) -> bytes:
        """The response's canonical JSON bytes, as the server sent them."""
        return await self._do(_retrieve_call(request, fields, lambda r: r.content))

    async def ingest(self, records: Iterable[Mapping[str, Any] | BaseModel]) -> WriteSummary:
        """``POST /v1/ingest``: records (dicts in the ingest format, or ``hrt.records`` models), one transaction."""
        return await self._do(_ingest_call(records))

    async def ingest_jsonl(self, data: bytes | str) -> WriteSummary:
        """``POST /v1/ingest`` of JSON Lines (a file's contents), one transaction."""
        return await self._do(_ingest_jsonl_call(data))

    async def add_messages(
        self,
        user_id: str,
        session_id: str,
        messages: Iterable[Mapping[str, Any] | Message],
        *,
        agent_id: str | None = None,
        start: int | None = None,
        user_name: str | None = None,
        agent_name: str | None = None,
    ) -> ConversationResult:
        """``POST /v1/conversations``: messages of one session (dicts ``{role, content, ...}`` or
        :class:`~hrt.extraction.messages.Message`), one transaction; each message's memory unit in
        the result. ``user_name`` and ``agent_name`` name the speakers of the user's and the
        assistant's messages that carry no ``name``."""
        names = (user_name, agent_name)
        return await self._do(_conversation_call(user_id, session_id, messages, agent_id, start, names))

    async def delete_entity(self, user_id: str, kind: EntityKind, entity_id: str) -> WriteSummary:
        return await self._do(_delete_entity_call(user_id, kind, entity_id))

    async def delete_user(self, user_id: str) -> WriteSummary:
        return await self._do(_delete_user_call(user_id))

    async def merge_concepts(self, user_id: str, target: str, ids: Sequence[str]) -> MergeResult:
        """``POST /v1/users/{user_id}/concepts/{target}/merge``: ``ids`` merged into ``target``."""
        return await self._do(_merge_concepts_call(user_id, target, ids))

    async def stats(self, user_id: str) -> UserStats:
        return await self._do(_stats_call(user_id))

    async def healthz(self) -> Health:
        return await self._do(_healthz_call())

    async def readyz(self) -> Readiness:
        """The readiness report, whether the server is ready (200) or not (503)."""
        return await self._do(_readyz_call())

    async def metrics(self) -> str:
        return await self._do(_metrics_call())

    async def list_keys(self) -> list[KeyInfo]:
        return await self._do(_list_keys_call())

    async def create_key(
        self,
        name: str,
        scopes: Iterable[KeyScope],
        users: Iterable[str] | None,
        *,
        expires: str | None = None,
        rate_limit: float | None = None,
        max_concurrency: int | None = None,
    ) -> NewKey:
        """``POST /v1/keys``; ``users`` None: every user. The secret is in ``.key``, once."""
        return await self._do(_create_key_call(name, scopes, users, expires, rate_limit, max_concurrency))

    async def revoke_key(self, name: str) -> KeyInfo:
        return await self._do(_revoke_key_call(name))

    async def get_entity(
        self, user_id: str, kind: EntityKind, entity_id: str, *, relation_limit: int | None = None
    ) -> EntityView:
        """``GET /v1/users/{user_id}/entities/{kind}/{id}``: the record as ingested, its relations
        (at most ``relation_limit``, default 100), validity, supersession and writer; NotFound when absent."""
        return await self._do(_get_entity_call(user_id, kind, entity_id, relation_limit))

    async def list_entities(
        self, user_id: str, kind: EntityKind | None = None, **filters: Any
    ) -> AsyncIterator[EntitySummary]:
        """As :meth:`HRTClient.list_entities`: ``async for entity in client.list_entities(...)``."""
        sent = _list_filters(kind, filters)
        cursor: str | None = None
        while True:
            page = await self._do(_list_entities_call(user_id, sent, cursor))
            for entity in page.entities:
                yield entity
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    # --- export (GET /v1/users/{user_id}/export, scope export) --------------------------------

    async def export(self, user_id: str) -> AsyncIterator[dict[str, Any]]:
        """The user's records as they stream in (``async for``); as :meth:`HRTClient.export`."""
        async for line in self._export_lines(user_id):
            yield json.loads(line)

    async def export_to(self, user_id: str, out: IO[bytes]) -> int:
        """Write the export's bytes to ``out``; returns the lines written (:meth:`HRTClient.export_to`)."""
        n = 0
        async for line in self._export_lines(user_id):
            out.write(line + b"\n")
            n += 1
        return n

    async def _export_lines(self, user_id: str) -> AsyncIterator[bytes]:
        call = _export_call(user_id)
        started = time.monotonic()
        attempt = 0
        while True:  # retried as any read until the answer starts, never after a line
            attempt += 1
            outcome: httpx.Response | httpx.TransportError
            try:
                request = self._http.build_request(call.method, call.path, **self._send_args(call))
                outcome = await self._http.send(request, stream=True)
            except httpx.TransportError as exc:
                outcome = exc
            if isinstance(outcome, httpx.Response):
                if outcome.status_code == 200:
                    break
                await outcome.aread()
                await outcome.aclose()
            wait = self._wait_before_retry(call, attempt, started, outcome)
            if wait is None:
                raise self._failure(outcome)
            await self._sleep(wait)
        lines = _ExportLines()
        try:
            async for chunk in outcome.aiter_bytes():
                for line in lines.feed(chunk):
                    yield line
        except httpx.TransportError as exc:
            raise _export_cut(self.base_url, exc) from exc
        finally:
            await outcome.aclose()
        if not lines.finished():
            raise _export_cut(self.base_url, None)


__all__ = [
    "NO_RETRY",
    "AsyncHRTClient",
    "ConversationResult",
    "EntityPage",
    "EntitySummary",
    "EntityView",
    "HRTClient",
    "Health",
    "KeyInfo",
    "NewKey",
    "Readiness",
    "RetryPolicy",
    "UserStats",
    "WriteSummary",
    "error_from_response",
    "retry_after_seconds",
]
