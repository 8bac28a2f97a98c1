"""HRT's errors: one root, a shallow tree.

    HRTError
    ├── InvalidInput          bad request or ingest data; names the field (HTTP 422)
    │   ├── MalformedBody     the body is not JSON, or not UTF-8 (HTTP 400)
    │   └── PayloadTooLarge   body over the configured limit (HTTP 413)
    ├── RequestTimeout        the body did not arrive within HRT_BODY_READ_TIMEOUT_S (HTTP 408)
    ├── Unauthenticated       no API key, or one that is unknown, expired or revoked (HTTP 401)
    ├── Forbidden             a valid key outside its scopes or users (HTTP 403)
    ├── RateLimited           a key over its request rate or concurrency (HTTP 429)
    ├── NotFound              unknown user or entity (HTTP 404)
    ├── Conflict              an id already used by another kind of entity (HTTP 409)
    └── StoreError            a store failed
        └── StoreUnavailable  a store cannot be reached right now (HTTP 503, Retry-After)
            └── StoreDown     its circuit is open: refused at once, without a call

Adapters translate third-party exceptions at their edge (``raise StoreUnavailable(...) from exc``);
the HTTP layer maps this tree to status codes in one handler. Service code never raises HTTP errors.

A store error's ``message`` is for the log (it may quote the driver, a host or a port); what a
caller sees is its ``public_message``, which names the store and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence


class HRTError(Exception):
    """Root of every error HRT raises on purpose."""

    code = "hrt_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.message, "field": self.field}


class InvalidInput(HRTError):
    """``errors``: every invalid field found, (field, message), the first one being ``field``'s;
    answered as the error's ``errors`` list."""

    code = "invalid_input"

    def __init__(
        self, message: str, *, field: str | None = None, errors: Sequence[tuple[str, str]] | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.errors = list(errors or [])

    def to_dict(self) -> dict[str, object]:
        out = super().to_dict()
        if self.errors:
            out["errors"] = [{"field": f, "message": m} for f, m in self.errors]
        return out


class PayloadTooLarge(InvalidInput):
    code = "payload_too_large"


class MalformedBody(InvalidInput):
    code = "malformed_body"


class RequestTimeout(HRTError):
    code = "request_timeout"


class Unauthenticated(HRTError):
    """``reason`` (a metric label): missing, malformed, unknown, revoked or expired."""

    code = "unauthenticated"

    def __init__(self, message: str, *, reason: str = "unknown") -> None:
        super().__init__(message)
        self.reason = reason


class Forbidden(HRTError):
    """``reason`` (a metric label): scope or user."""

    code = "forbidden"

    def __init__(self, message: str, *, reason: str, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.reason = reason


class RateLimited(HRTError):
    """``reason`` (a metric label): rate or concurrency."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int, reason: str) -> None:
        super().__init__(message)
        self.retry_after_s = max(1, int(retry_after_s))
        self.reason = reason


class NotFound(HRTError):
    code = "not_found"


class Conflict(HRTError):
    code = "conflict"


class StateChanged(Conflict):
    """A write's expected extraction statistics changed under it (another writer of the same user
    committed first): nothing was written, and the write may be planned again."""


class StoreError(HRTError):
    """``store`` names the store for callers ("PostgreSQL", "Neo4j", ...); ``message`` is the log's.
    ``public`` replaces the caller's message when the default would say too little."""

    code = "store_error"

    def __init__(
        self, message: str, *, store: str | None = None, public: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message, field=field)
        self.store = store
        self._public = public

    @property
    def public_message(self) -> str:
        return self._public or f"{self.store or 'a store'} failed; the server log has the details"

    def public_dict(self) -> dict[str, object]:
        return {"code": self.code, "message": self.public_message, "field": self.field}


class StoreUnavailable(StoreError):
    """``retry_after_s``: when a retry may succeed (the ``Retry-After`` of the 503), when known."""

    code = "store_unavailable"

    def __init__(
        self,
        message: str,
        *,
        store: str | None = None,
        public: str | None = None,
        field: str | None = None,
        retry_after_s: int | None = None,
    ) -> None:
        super().__init__(message, store=store, public=public, field=field)
        self.retry_after_s = retry_after_s

    @property
    def public_message(self) -> str:
        return self._public or f"{self.store or 'a store'} is unavailable; retry later"


class StoreDown(StoreUnavailable):
    """A store whose circuit is open (:mod:`hrt.stores.circuit`): refused without a call, at once.
    Its opening was logged once; each refusal is not."""

    code = "store_unavailable"
