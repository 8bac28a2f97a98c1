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
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from types import TracebackType
from typing import IO, Any, Self, TypeVar

import httpx

from hrt.auth import Scope as KeyScope  # noqa: F401  (the scopes create_key takes, importable here)
from hrt.browse import EntityPage, EntitySummary, EntityView
from hrt.client.attempts import (
    DEFAULT_URL,
    NO_RETRY,
    RetryPolicy,
    _Base,
    error_from_response,
    retry_after_seconds,
)
from hrt.client.calls import (
    LIST_FILTERS as LIST_FILTERS,
)
from hrt.client.calls import (
    EntityKind,
    _Call,
    _export_call,
    _export_cut,
    _ExportLines,
    _list_entities_call,
    _list_filters,
)
from hrt.client.routes import _Routes
from hrt.contract import (
    AugmentedMemoryContext as AugmentedMemoryContext,
)
from hrt.contract import (
    Health,
    KeyInfo,
    NewKey,
    Readiness,
    UserStats,
    WriteSummary,
)
from hrt.contract import (
    MergeResult as MergeResult,
)
from hrt.contract import (
    RetrieveRequest as RetrieveRequest,
)
from hrt.errors import (
    Conflict as Conflict,
)
from hrt.errors import (
    Forbidden as Forbidden,
)
from hrt.errors import (
    HRTError as HRTError,
)
from hrt.errors import (
    InvalidInput as InvalidInput,
)
from hrt.errors import (
    MalformedBody as MalformedBody,
)
from hrt.errors import (
    NotFound as NotFound,
)
from hrt.errors import (
    PayloadTooLarge as PayloadTooLarge,
)
from hrt.errors import (
    RateLimited as RateLimited,
)
from hrt.errors import (
    StoreUnavailable as StoreUnavailable,
)
from hrt.errors import (
    Unauthenticated as Unauthenticated,
)
from hrt.extraction.messages import ConversationResult
from hrt.extraction.messages import Message as Message

T = TypeVar("T")

DEFAULT_TIMEOUT = httpx.Timeout(45.0, connect=5.0)  # above the server's own 30 s request budget


class HRTClient(_Base, _Routes):
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


class AsyncHRTClient(_Base, _Routes, asynchronous=True):
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
