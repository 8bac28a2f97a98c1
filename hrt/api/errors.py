"""Every error as an HTTP answer; the service layer raises HRT errors only, whose status
:func:`hrt.front.status_for` decides.

Every error, whoever raised it (HRT, request validation, routing, a bug), answers in one format:
``{"error": {"code", "message", "field"}}``, with ``errors`` (every invalid field, ``{"field",
"message"}``, up to a bound) inside ``error`` when a request has more than one. A store's failure
names the store and nothing else: hosts, ports and driver text go to the log.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from hrt.errors import HRTError, InvalidInput, RateLimited, StoreDown, StoreUnavailable, Unauthenticated
from hrt.front import INTERNAL_ERROR, error_dict, refusal_reason, status_for
from hrt.jsonbounds import field_name, schema_errors

log = logging.getLogger(__name__)

# nginx's status for a request its client closed before the answer: never seen by the client
CLIENT_CLOSED = 499


class FieldError(BaseModel):
    field: str
    message: str


class ErrorDetail(BaseModel):
    code: str
    message: str
    field: str | None = None
    errors: list[FieldError] | None = Field(
        None, description="every invalid field of the request (up to 100), the first being `field`'s"
    )


class ErrorBody(BaseModel):
    """Every error response: ``{"error": {"code", "message", "field"}}``."""

    error: ErrorDetail


def _described(text: str) -> dict[str, Any]:
    return {"model": ErrorBody, "description": text}


# the errors any route may answer, for the OpenAPI document (schemathesis checks them)
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: _described("malformed body: not JSON, not UTF-8"),
    401: _described("missing, unknown, expired or revoked API key (with WWW-Authenticate: Bearer)"),
    403: _described("the key lacks the route's scope, or may not act for the user"),
    404: _described("unknown user or entity"),
    405: _described("method not allowed"),
    408: _described("the body did not arrive within HRT_BODY_READ_TIMEOUT_S"),
    409: _described("an id already used by another kind of entity"),
    413: _described("body over the size limit, or more records than HRT_MAX_INGEST_RECORDS"),
    415: _described("the body is not sent as application/json"),
    422: _described("invalid input; field names it"),
    429: _described("over the key's request rate or concurrency, or the server's write bound (with Retry-After)"),
    503: _described("a store is unavailable or the request ran out of time (with Retry-After when known)"),
}


def error_headers(exc: HRTError) -> dict[str, str]:
    if isinstance(exc, Unauthenticated):
        if exc.reason == "missing":
            return {"WWW-Authenticate": 'Bearer realm="hrt"'}
        return {"WWW-Authenticate": 'Bearer realm="hrt", error="invalid_token"'}
    if isinstance(exc, RateLimited):
        return {"Retry-After": str(exc.retry_after_s)}
    if isinstance(exc, StoreUnavailable) and exc.retry_after_s is not None:
        return {"Retry-After": str(exc.retry_after_s)}
    return {}


def log_failure(request: Request, exc: HRTError) -> None:
    """A 5xx in the log: a store refused by its open circuit, not at all (the circuit logged its
    opening); another store that cannot be reached, one line; anything else with its cause."""
    if isinstance(exc, StoreDown):
        return
    if isinstance(exc, StoreUnavailable):
        log.warning("%s %s: %s", request.method, request.url.path, exc.message)
        return
    # the full message (driver text, host, port) and its cause, for the operator only
    log.error("%s %s failed: %s", request.method, request.url.path, exc.message, exc_info=exc.__cause__)


def _ctx_error(error: dict[str, Any]) -> str:
    ctx = error.get("ctx")
    return str(ctx.get("error", "")) if isinstance(ctx, dict) else ""


def _json(
    status: int, code: str, message: str, field: str | None, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(
        status_code=status, content={"error": {"code": code, "message": message, "field": field}}, headers=headers
    )


def install_error_handlers(app: FastAPI, count: Callable[[HRTError], None] | None = None) -> None:
    """``count`` sees every HRT error answered (the refusal metric)."""

    @app.exception_handler(HRTError)
    async def _hrt_error(request: Request, exc: HRTError) -> JSONResponse:
        code = status_for(exc)
        if code >= 500:
            log_failure(request, exc)
        reason = refusal_reason(exc)
        if reason is not None:  # the audit line's reason (hrt.api.guard)
            request.scope.setdefault("state", {})["refusal"] = reason
        if count is not None:
            count(exc)
        return JSONResponse(status_code=code, content={"error": error_dict(exc)}, headers=error_headers(exc))

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        # the client went away before its body arrived in full: nobody reads this answer, the audit
        # line and the metric count it as 499 (the client closed the request), not as a failure
        return _json(CLIENT_CLOSED, "client_closed_request", "the client closed the request", "body")

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors: list[dict[str, Any]] = [dict(e) for e in exc.errors()]
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request", "type": "invalid"}
        if first.get("type") == "json_invalid":
            message = f"the body is not valid JSON: {_ctx_error(first)}".strip().rstrip(":")
            return _json(400, "malformed_json", message, "body")
        if tuple(first.get("loc", ())) == ("body",) and isinstance(first.get("input"), bytes):
            # FastAPI reads a body as JSON only when its content-type says so
            got = request.headers.get("content-type") or "none"
            return _json(
                415, "unsupported_media_type", f"send the body as application/json (content-type: {got})", "body"
            )
        if any(e.get("type") == "string_unicode" for e in errors):
            # a lone surrogate (\ud800) went through JSON: no Unicode text, refused as a body that is
            # not UTF-8 is, as ingest's and conversations' own reading refuses it
            return _json(400, "malformed_body", "the body is not Unicode text (a lone surrogate escape)", "body")
        named = [(field_name(loc), msg) for loc, msg in schema_errors(errors[:100])]
        invalid = InvalidInput(f"field '{named[0][0]}': {named[0][1]}", field=named[0][0], errors=named)
        return JSONResponse(status_code=422, content={"error": invalid.to_dict()})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # routing (404, 405) and FastAPI's own body parsing (400): the same format as the rest
        if exc.status_code == 404:
            return _json(404, "not_found", f"no route {request.url.path}", None)
        if exc.status_code == 405:
            return _json(405, "method_not_allowed", f"{request.method} is not allowed on {request.url.path}", None)
        if exc.status_code == 400:
            return _json(400, "malformed_json", "the body is not valid JSON", "body")
        code = "http_error" if exc.status_code < 500 else "internal_error"
        return _json(exc.status_code, code, str(exc.detail) if exc.status_code < 500 else "internal error", None)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        # a 5xx is a bug: logged whole, answered without internals
        log.error("%s %s failed unexpectedly", request.method, request.url.path, exc_info=exc)
        return JSONResponse(status_code=500, content={"error": INTERNAL_ERROR})
