"""psycopg's errors as HRT's, at the PostgreSQL adapter's edge."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from hrt.errors import StoreError, StoreUnavailable


@contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """psycopg errors become HRT errors at this edge."""
    try:
        yield
    except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
        raise StoreUnavailable(f"PostgreSQL unavailable during {action}: {str(exc)[:300]}", store="PostgreSQL") from exc
    except psycopg.Error as exc:
        raise StoreError(f"PostgreSQL error during {action}: {str(exc)[:300]}", store="PostgreSQL") from exc
