"""What HRT's two front doors, the HTTP API (:mod:`hrt.api`) and the MCP server
(:mod:`hrt.mcp_server`), share: the id check, an error's status and public body, the refusal
reason of the ``hrt_auth_refusals_total`` metric, and the ``hrt.audit`` log line.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from hrt.errors import (
    Conflict,
    Forbidden,
    HRTError,
    InvalidInput,
    MalformedBody,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RequestTimeout,
    StoreError,
    StoreUnavailable,
    Unauthenticated,
)

if TYPE_CHECKING:
    from hrt.metrics import Metrics

audit_log = logging.getLogger("hrt.audit")

STATUS: list[tuple[type[HRTError], int]] = [
    (PayloadTooLarge, 413),
    (MalformedBody, 400),
    (InvalidInput, 422),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (RateLimited, 429),
    (NotFound, 404),
    (Conflict, 409),
    (StoreUnavailable, 503),
    (RequestTimeout, 408),
    (HRTError, 500),
]


def status_for(exc: HRTError) -> int:
    """The HTTP status of an HRT error (an MCP tool error reports it in its audit line)."""
    for cls, code in STATUS:
        if isinstance(exc, cls):
            return code
    return 500


def error_dict(exc: HRTError) -> dict[str, object]:
    """What a caller sees: a store error's public message, every other error's own."""
    if isinstance(exc, StoreError):
        return exc.public_dict()
    return exc.to_dict()


# the body of an error no one raised on purpose (a bug): logged whole, answered without internals
INTERNAL_ERROR: dict[str, object] = {
    "code": "internal_error",
    "message": "internal error; the server log has the details",
    "field": None,
}


def refusal_reason(exc: HRTError) -> str | None:
    """The ``hrt_auth_refusals_total`` label of an authentication or authorisation refusal."""
    if isinstance(exc, Unauthenticated | Forbidden | RateLimited):
        return exc.reason
    return None


def count_refusal(exc: HRTError, metrics: Callable[[], Metrics | None]) -> str | None:
    """Count a refusal in ``hrt_auth_refusals_total`` (``metrics()`` None: no service to count in);
    its reason, None when ``exc`` is no refusal. Counting never fails the answer."""
    reason = refusal_reason(exc)
    if reason is not None:
        with contextlib.suppress(Exception):
            found = metrics()
            if found is not None:
                found.auth_refusals.labels(reason=reason).inc()
    return reason


def _outcome(status: int) -> str:
    if status < 300:
        return "ok"
    if status in (401, 403, 429):
        return "refused"
    if status == 499:
        return "aborted"
    return "rejected" if status < 500 else "failed"


def audit_line(
    scope: Mapping[str, Any] | None,
    principal: Any,
    method: str,
    route: str,
    status: int,
    write: Mapping[str, Any],
) -> dict[str, Any]:
    """One ``hrt.audit`` line: when, which request from which address (``scope``, the ASGI scope, None
    over stdio), which key (``principal``, a :class:`hrt.auth.Principal` or None; its id, as names
    are not unique across owners), what it asked, how it ended and what it wrote."""
    state: Mapping[str, Any] = scope.get("state", {}) if scope is not None else {}
    client = scope.get("client") if scope is not None else None
    line: dict[str, Any] = {
        "event": "write",
        "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "request_id": state.get("request_id"),
        "client": client[0] if client else None,
        "key_id": principal.key_id if principal is not None else None,
        "key": principal.name if principal is not None else None,
        "method": method,
        "route": route,
        "status": status,
        "outcome": _outcome(status),
        "users": write.get("users", []),
        "records": write.get("records", 0),
        "upserted": write.get("upserted", 0),
        "deleted": write.get("deleted", 0),
    }
    if "target_key" in write:  # the key a key route created or revoked
        line["target_key"] = write["target_key"]
    if "messages" in write:  # a conversation's messages (records: the same count, what was asked)
        line["messages"] = write["messages"]
    if "target_concept" in write:  # the concept a merge merged into (records: the ids it named)
        line["target_concept"] = write["target_concept"]
    if method == "GET":  # the one audited read, an export: records are the lines sent, and did the last go out
        line["event"] = "export"
        line["complete"] = bool(write.get("complete", False))
        if status < 300 and not line["complete"]:  # begun with a 200, ended before its last line
            line["outcome"] = "cut"
    return line


def audit(
    scope: Mapping[str, Any] | None,
    principal: Any,
    method: str,
    route: str,
    status: int,
    write: Mapping[str, Any],
    *,
    reason: str | None,
    seconds: float,
) -> None:
    """Log one :func:`audit_line` to ``hrt.audit``, with the refusal ``reason`` and the time taken."""
    line = audit_line(scope, principal, method, route, status, write)
    if reason is not None:
        line["reason"] = reason
    line["ms"] = round(seconds * 1000, 1)
    audit_log.info("%s", json.dumps(line, separators=(",", ":")))
