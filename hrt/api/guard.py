"""Who may call which route: a pure ASGI middleware in front of the application.

For every HTTP request but ``GET /healthz`` it authenticates the ``Authorization: Bearer`` key
(401), checks the route's scope (403), takes a place within the key's request rate and
concurrency (429), and only then lets the request reach the routes, which check the users the
key may act for. Nothing has read the body before that, so a refused request writes nothing
and costs nothing to parse. The routes that declare it (writes, the key routes, the export) are
audited here, one ``hrt.audit`` line each (:func:`hrt.front.audit`), whatever their outcome.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from starlette.routing import Match, Route

from hrt.api.errors import error_headers
from hrt.auth import UNAUTHENTICATED_DEV, KeyLimiter, KeyRing, Principal, is_loopback
from hrt.errors import HRTError, RateLimited, StoreDown, StoreUnavailable, Unauthenticated
from hrt.front import audit, error_dict, status_for
from hrt.shares import ByteRates, Tarpit

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# after a refusal of a request with a body, the body is never read: the connection closes
CLOSE = {"connection": "close"}

# a caller's X-Request-ID is kept when it looks like one; otherwise the server makes one
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


class StatusNote:
    """A ``send`` that notes the status of the response sent through it (500 until one starts: an
    exception escaping the app is answered 500 by the server)."""

    def __init__(self, send: Send) -> None:
        self.status = 500
        self._send = send

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = int(message["status"])
        await self._send(message)


async def send_error(send: Send, status: int, exc: HRTError, extra: Mapping[str, str] | None = None) -> None:
    body = json.dumps({"error": error_dict(exc)}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += _encoded({**error_headers(exc), **(extra or {})})
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """``scopes`` maps (method, route path) to the scope it needs; a route it does not list needs a
    valid key of any scope (the OpenAPI document, ``/mcp``, an unknown path answering 404).
    ``audited``: the routes whose every outcome is logged to ``hrt.audit``. ``open_paths``: the
    paths that need no key. All three come from the routes' declarations
    (:func:`hrt.api.access.route_rules`). ``keyring`` None: HRT_AUTH=off,
    every request acts with every scope for every user (``hrt serve`` allows it on loopback only).
    ``on_refusal`` sees every refusal (the metric). ``body_bytes``: each tenant's request-body
    bytes a second (every chunk received is charged; a tenant in debt is refused before its body is
    read, and its connection closed, so the unread body is never parsed). ``tarpit``: how long a
    429 to a tenant that came back before its last ``Retry-After`` is held (the Guard's refusals
    and the routes' alike). ``on_tenant`` sees the tenant of every authenticated request (who is
    active, :class:`hrt.shares.WriteTime`). With auth off, a request that reached the server on an
    address other than loopback is refused, whatever host the settings name."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Callable[[], list[Any]],
        scopes: Mapping[tuple[str, str], str],
        audited: frozenset[tuple[str, str]],
        open_paths: frozenset[str],
        keyring: Callable[[], KeyRing] | None,
        limiter: KeyLimiter,
        body_bytes: ByteRates | None = None,
        tarpit: Tarpit | None = None,
        on_tenant: Callable[[str], None] | None = None,
        on_refusal: Callable[[HRTError], None],
    ) -> None:
        self.app = app
        self.routes = routes
        self.scopes = scopes
        self.audited = audited
        self.open_paths = open_paths
        self.keyring = keyring
        self.limiter = limiter
        self.body_bytes = body_bytes
        self.tarpit = tarpit
        self.on_tenant = on_tenant
        self.on_refusal = on_refusal

    def _route(self, scope: Scope) -> tuple[str, str] | None:
        """(method, route path) of the route the request is for, or None (no such route/method)."""
        for route in self.routes():
            if isinstance(route, Route):
                match, _ = route.matches(scope)
                if match is Match.FULL:
                    return scope["method"], route.path
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        target = self._route(scope)
        audited = target in self.audited
        state = scope.setdefault("state", {})
        state["request_id"] = request_id(scope)
        started = time.perf_counter()
        status = 500
        principal: Principal | None = None

        async def noting_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                if status == 429 and principal is not None:  # the Guard's refusals and the routes'
                    extra = await self._held(principal.tenant, _retry_after(message))
                    if extra and not any(bytes(n).lower() == b"connection" for n, _ in message["headers"]):
                        message = {**message, "headers": [*message["headers"], *_encoded(extra)]}
            await send(message)

        try:
            try:
                principal = await self._authenticate(scope)
                if self.on_tenant is not None:
                    self.on_tenant(principal.tenant)
                needed = self.scopes.get(target) if target is not None else None
                if needed is not None:
                    principal.require_scope(needed)
                if self.body_bytes is not None:
                    self.body_bytes.check(principal.tenant, _owes_body_bytes)
                self.limiter.acquire(principal)
            except HRTError as exc:
                status = status_for(exc)
                if status < 500:
                    state["refusal"] = str(getattr(exc, "reason", None) or exc.code)
                    self.on_refusal(exc)
                else:
                    log_key_store_failure(exc)
                # a body left unread is never parsed: the connection closes with the refusal
                await send_error(noting_send, status, exc, CLOSE if has_body(scope) else None)
                return
            state["principal"] = principal
            try:
                await self.app(scope, self._charged(receive, principal.tenant), noting_send)
            finally:
                self.limiter.release(principal)
        finally:
            if audited:
                route = target[1] if target else scope["path"]
                seconds = time.perf_counter() - started
                write, reason = state.get("audit", {}), state.get("refusal")
                audit(scope, principal, scope["method"], route, status, write, reason=reason, seconds=seconds)

    async def _held(self, tenant: str, retry_after_s: float) -> Mapping[str, str] | None:
        """Hold a 429 to ``tenant`` as :attr:`tarpit` says; the headers to add (the connection
        closed when too many of the tenant's refusals are held already), or None."""
        if self.tarpit is None:
            return None
        delay = self.tarpit.hold(tenant, retry_after_s)
        if delay is None:
            return CLOSE
        if delay > 0:
            try:
                await asyncio.sleep(delay)
            finally:
                self.tarpit.release(tenant)
        return None

    def _charged(self, receive: Receive, tenant: str) -> Receive:
        """``receive``, each body chunk charged to ``tenant``'s bytes a second."""
        rates = self.body_bytes
        if rates is None or not rates.per_s:
            return receive

        async def charged() -> Message:
            message = await receive()
            if message["type"] == "http.request" and message.get("body"):
                rates.charge(tenant, len(message["body"]))
            return message

        return charged

    async def _authenticate(self, scope: Scope) -> Principal:
        if self.keyring is None:
            server = scope.get("server")
            if not server or not is_loopback(str(server[0])):
                # decided on the socket the request came in on, not on a configured host: a server
                # started some other way (uvicorn --host 0.0.0.0) answers no one off loopback
                raise Unauthenticated(
                    "HRT_AUTH=off answers only requests to a loopback address; this server needs API keys",
                    reason="auth_off",
                )
            return UNAUTHENTICATED_DEV
        ring = self.keyring()
        header: str | None = None
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                header = value.decode("latin-1")
                break
        return await ring.authenticate(header)


def _owes_body_bytes(seconds: float) -> RateLimited:
    return RateLimited(
        "this tenant's request bodies are past HRT_TENANT_BODY_BYTES_PER_S; retry later",
        retry_after_s=math.ceil(seconds),
        reason="body_rate",
    )


def _retry_after(start: Message) -> float:
    """The ``Retry-After`` seconds of a response's start message (1 when absent or not a number)."""
    for name, value in start.get("headers", []):
        if bytes(name).lower() == b"retry-after":
            try:
                return max(0.0, float(bytes(value)))
            except ValueError:
                break
    return 1.0


def _encoded(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in headers.items()]


def has_body(scope: Scope) -> bool:
    """Whether the request announces a body (a Content-Length above 0, or a chunked one)."""
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            return bytes(value).strip() not in (b"", b"0")
        if name == b"transfer-encoding":
            return True
    return False


def log_key_store_failure(exc: HRTError) -> None:
    """The keys could not be read: a record store refused by its open circuit, no line (the circuit
    logged its opening); one that cannot be reached, one line; any other failure whole."""
    if isinstance(exc, StoreDown):
        return
    if isinstance(exc, StoreUnavailable):
        log.warning("authenticating a request failed: %s", exc.message)
        return
    log.error("authenticating a request failed: %s", exc.message, exc_info=exc.__cause__)


def request_id(scope: Scope) -> str:
    """The request's id for the audit log: the caller's ``X-Request-ID`` when it is sane, else new."""
    for name, value in scope.get("headers", []):
        if name == b"x-request-id":
            text = bytes(value).decode("latin-1")
            if _REQUEST_ID.fullmatch(text):
                return text
    return uuid.uuid4().hex
