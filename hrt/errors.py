"""HRT's errors: one root, a shallow tree.

    HRTError
    ├── InvalidInput          bad request or ingest data; names the field (HTTP 422)
    │   └── PayloadTooLarge   body over the configured limit (HTTP 413)
    ├── NotFound              unknown user or entity (HTTP 404)
    ├── Conflict              an id already used by another kind of entity (HTTP 409)
    └── StoreError            a store failed
        └── StoreUnavailable  a store cannot be reached right now (HTTP 503)

Adapters translate third-party exceptions at their edge (``raise StoreUnavailable(...) from exc``);
the HTTP layer maps this tree to status codes in one handler. Service code never raises HTTP errors.
"""

from __future__ import annotations


class HRTError(Exception):
    """Root of every error HRT raises on purpose."""

    code = "hrt_error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"code": self.code, "message": self.message}
        if self.field is not None:
            out["field"] = self.field
        return out


class InvalidInput(HRTError):
    code = "invalid_input"


class PayloadTooLarge(InvalidInput):
    code = "payload_too_large"


class NotFound(HRTError):
    code = "not_found"


class Conflict(HRTError):
    code = "conflict"


class StoreError(HRTError):
    code = "store_error"


class StoreUnavailable(StoreError):
    code = "store_unavailable"
