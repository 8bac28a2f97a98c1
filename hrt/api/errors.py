"""HTTP status codes are decided here, in one place; the service layer raises HRT errors only."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from hrt.errors import Conflict, HRTError, InvalidInput, NotFound, PayloadTooLarge, StoreUnavailable

log = logging.getLogger(__name__)

STATUS: list[tuple[type[HRTError], int]] = [
    (PayloadTooLarge, 413),
    (InvalidInput, 422),
    (NotFound, 404),
    (Conflict, 409),
    (StoreUnavailable, 503),
    (HRTError, 500),
]


def status_for(exc: HRTError) -> int:
    for cls, code in STATUS:
        if isinstance(exc, cls):
            return code
    return 500


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def _ctx_error(error: dict[str, Any]) -> str:
    ctx = error.get("ctx")
    return str(ctx.get("error", "")) if isinstance(ctx, dict) else ""


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(HRTError)
    async def _hrt_error(request: Request, exc: HRTError) -> JSONResponse:
        code = status_for(exc)
        if code >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc.message)
        return JSONResponse(status_code=code, content={"error": exc.to_dict()})

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors: list[dict[str, Any]] = [dict(e) for e in exc.errors()]
        first = errors[0] if errors else {"loc": ("body",), "msg": "invalid request", "type": "invalid"}
        body: dict[str, Any]
        if first.get("type") == "json_invalid":
            body = {
                "code": "malformed_json",
                "message": f"the body is not valid JSON: {_ctx_error(first)}".strip(),
                "field": "body",
            }
            return JSONResponse(status_code=400, content={"error": body})
        field = _field(tuple(first.get("loc", ())))
        detail = [{"field": _field(tuple(e.get("loc", ()))), "message": str(e.get("msg", ""))} for e in errors[:20]]
        body = {
            "code": "invalid_input",
            "message": f"field '{field}': {first.get('msg', 'invalid')}",
            "field": field,
            "errors": detail,
        }
        return JSONResponse(status_code=422, content={"error": body})
