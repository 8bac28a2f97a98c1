"""One call's attempts, shared by both clients: the retry policy (:class:`RetryPolicy`), when and
how long to wait before trying again, what each attempt sends, and the HRT error a failed answer
stands for (:func:`error_from_response`)."""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Self, TypeVar

import httpx

from hrt import __version__
from hrt.client.calls import _Call
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

T = TypeVar("T")

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


DEFAULT_URL = "http://127.0.0.1:8080"


class _Base:
    """What both clients share: the base URL, the headers, the retry policy and its decisions."""

    def __init__(self, base_url: str, api_key: str | None, retry: RetryPolicy | None) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry if retry is not None else RetryPolicy()
        self._rng = random.Random()
        headers = {"user-agent": f"hrt-client/{__version__}", "accept": "application/json"}
        if api_key:
            headers["authorization"] = f"Bearer {api_key}"
        self._headers = headers

    @classmethod
    def from_env(cls, environ: Mapping[str, str], **kwargs: Any) -> Self:
        """``HRT_URL`` (default ``http://127.0.0.1:8080``) and ``HRT_API_KEY`` from ``environ``
        (pass ``os.environ``); other arguments as the constructor's."""
        return cls(environ.get("HRT_URL", DEFAULT_URL), environ.get("HRT_API_KEY"), **kwargs)

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
