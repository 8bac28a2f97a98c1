"""Weaviate's failures as HRT's errors: the edge every adapter call runs under (:func:`guard`), and
which failures mean that Weaviate cannot be reached (:func:`_unavailable`)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from grpc import StatusCode
from grpc.aio import AioRpcError

from hrt.errors import HRTError, StoreError, StoreUnavailable
from weaviate.exceptions import (
    UnexpectedStatusCodeError,
    WeaviateBaseError,
    WeaviateClosedClientError,
    WeaviateConnectionError,
    WeaviateGRPCUnavailableError,
    WeaviateQueryError,
    WeaviateRetryError,
    WeaviateStartUpError,
    WeaviateTimeoutError,
)

# A node that has just started answers before it has loaded its schema ("could not find class")
# or, knowing the collection (its schema comes from Raft), before its database has loaded the
# collection's index ("non-existing index", Weaviate's adapters/repos/db/search.go): a search
# meanwhile fails with a gRPC UNKNOWN. Not a wrong request: the store is still starting.
_LOADING = re.compile(r"\bnon-existing index for\b|\bcould not find class \w+ in schema\b")


def _unavailable(exc: BaseException) -> bool:
    """True when the failure means Weaviate cannot be reached (or answered too late), walking the
    chain because the client re-raises gRPC errors as WeaviateQueryError inside ``except``."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(
            current,
            TimeoutError
            | ConnectionError
            | httpx.TransportError
            | WeaviateConnectionError
            | WeaviateTimeoutError
            | WeaviateGRPCUnavailableError
            | WeaviateClosedClientError
            | WeaviateStartUpError
            | WeaviateRetryError,
        ):
            return True
        if isinstance(current, AioRpcError) and current.code() in (
            StatusCode.UNAVAILABLE,
            StatusCode.DEADLINE_EXCEEDED,
        ):
            return True
        if isinstance(current, AioRpcError) and _LOADING.search(current.details() or ""):
            return True
        if isinstance(current, UnexpectedStatusCodeError) and current.status_code in (502, 503, 504):
            return True
        current = current.__cause__ or current.__context__
    return False


def _missing_tenant_candidate(exc: BaseException) -> bool:
    """A query error that may mean "this user has no tenant yet" (confirmed with one more call;
    the error's wording is not relied on)."""
    return isinstance(exc, WeaviateQueryError) and not _unavailable(exc)


@asynccontextmanager
async def guard(action: str, timeout: float) -> AsyncIterator[None]:
    """A deadline around one adapter call, and Weaviate's errors translated into HRT's."""
    try:
        async with asyncio.timeout(timeout):
            yield
    except HRTError:
        raise
    except (WeaviateBaseError, AioRpcError, httpx.HTTPError, OSError, TimeoutError) as exc:
        detail = str(exc)[:300] or type(exc).__name__
        if _unavailable(exc):
            raise StoreUnavailable(f"Weaviate unavailable during {action}: {detail}", store="Weaviate") from exc
        raise StoreError(f"Weaviate error during {action}: {detail}", store="Weaviate") from exc
