"""The MCP endpoint of ``hrt serve``: the tools of :mod:`hrt.mcp_server` over streamable HTTP at
``/mcp``, stateless, each call under the API key of its own HTTP request, every JSON-RPC error
answered in HRT's words (never the caller's input quoted back)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Match, Route

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class _Route(Route):
    """A route to an ASGI app that names itself in the scope as FastAPI's routes do (the request
    metric labels ``/mcp`` by it)."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child = super().matches(scope)
        if match is not Match.NONE:
            child["route"] = self
        return match, child


class MCPEndpoint:
    """The ASGI app of ``/mcp`` on ``hrt serve``: streamable HTTP, stateless (each POST carries one
    call under the key of its own HTTP request; nothing ties a session to a key), JSON answers.

    The SDK's Host/Origin check (DNS rebinding) is off: every call needs an API key in its
    ``Authorization`` header, which a page a browser was lured to cannot send, and the check would
    refuse ``hrt serve`` behind a TLS proxy that forwards its own Host. :meth:`running` (the app's
    lifespan) starts the session manager; before it, calls are answered 503."""

    def __init__(self, server: MCPServer[Any]) -> None:
        self.server = server
        self._handle: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        # a session manager runs once: each start of the app makes its own
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        manager = self.server.session_manager
        async with manager.run():
            self._handle = manager.handle_request
            try:
                yield
            finally:
                self._handle = None

    def route(self, path: str = "/mcp") -> Route:
        """The route to add to the app (any method: the SDK answers those it does not serve)."""
        return _Route(path, endpoint=self, include_in_schema=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handle = self._handle
        if handle is None:
            error = {"code": "unavailable", "message": "the MCP endpoint is not running", "field": None}
            body = json.dumps({"error": error}).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            return
        await handle(scope, receive, _without_internals(send))


# the SDK's transport answers a message it cannot parse or validate with pydantic's text, which
# quotes the caller's input and names pydantic's version: the envelope stays, the text is HRT's
_JSONRPC_MESSAGES = {
    -32700: "Parse error: the body is not JSON",
    -32600: "Invalid Request: not a JSON-RPC 2.0 message",
    -32601: "Method not found",
    -32602: "Invalid params: not a JSON-RPC 2.0 request, notification or response that MCP accepts",
    -32603: "Internal error",
}


# a JSON-RPC error answer is small: a larger answer is a result, passed on as it comes
_ERROR_MAX_BYTES = 65_536


def _without_internals(send: Send) -> Send:
    """``send`` with every JSON-RPC error rewritten: the code kept, the message one of HRT's, no
    ``data``. Refused HTTP requests (4xx/5xx) carry one, and so do answers of 200: the SDK's
    "Method not found" quotes the method the caller named in ``data``."""
    held: list[Message] = []
    judged = False

    async def flush(body: bytes | None) -> None:
        nonlocal judged
        judged = True
        start, *chunks = held
        held.clear()
        if body is None:
            for m in (start, *chunks):
                await send(m)
            return
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def wrapped(message: Message) -> None:
        if judged or message["type"] not in ("http.response.start", "http.response.body"):
            await send(message)
            return
        held.append(message)
        if message["type"] == "http.response.start":
            return
        refused = int(held[0]["status"]) >= 400
        size = sum(len(m.get("body", b"")) for m in held[1:])
        if not refused and size > _ERROR_MAX_BYTES and not _an_error(held[1].get("body", b"")[:_HEAD_BYTES]):
            await flush(None)
        elif not message.get("more_body", False):
            body = b"".join(m.get("body", b"") for m in held[1:])
            await flush(_rewritten(body) if refused or b'"error"' in body else None)

    return wrapped


# a JSON-RPC answer names its kind in its first members ({"jsonrpc":..,"id":..,"error"/"result":..});
# an error is held whole whatever its size (its echo of the caller's input is bounded by the
# request's, HRT_MAX_BODY_BYTES), a result passed on once past the small-error size
_HEAD_BYTES = 512


def _an_error(head: bytes) -> bool:
    error, result = head.find(b'"error"'), head.find(b'"result"')
    return error >= 0 and (result < 0 or error < result)


def _rewritten(body: bytes) -> bytes:
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    error = doc.get("error") if isinstance(doc, dict) and "jsonrpc" in doc else None
    if not isinstance(error, dict) or "code" not in error:
        return body
    code = error["code"]
    message = _JSONRPC_MESSAGES.get(code, "Invalid request") if isinstance(code, int) else "Invalid request"
    doc["error"] = {"code": code, "message": message}
    return json.dumps(doc, separators=(",", ":")).encode()
