"""PostgreSQL API keys: ``hrt_api_keys`` rows as :class:`~hrt.auth.KeyRecord`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from psycopg import errors as pg_errors

from hrt.auth import KeyRecord
from hrt.errors import StoreError

# API keys: hrt_api_keys as a KeyRecord (timestamps as epoch seconds)
_KEY_COLUMNS = (
    "key_id, name, scopes, users, secret_hash, salt, extract(epoch FROM created_at), extract(epoch FROM expires_at), "
    "extract(epoch FROM revoked_at), extract(epoch FROM last_used_at), rate_limit, max_concurrency, parent"
)


def _key(row: Sequence[Any]) -> KeyRecord:
    def ts(v: Any) -> float | None:
        return float(v) if v is not None else None

    return KeyRecord(
        key_id=row[0],
        name=row[1],
        scopes=tuple(row[2]),
        users=tuple(row[3]) if row[3] is not None else None,
        secret_hash=bytes(row[4]),
        salt=bytes(row[5]),
        created_at=float(row[6]),
        expires_at=ts(row[7]),
        revoked_at=ts(row[8]),
        last_used_at=ts(row[9]),
        rate_limit=row[10],
        max_concurrency=row[11],
        parent=row[12],
    )


@contextmanager
def _keys_table() -> Iterator[None]:
    try:
        yield
    except StoreError as exc:
        if isinstance(exc.__cause__, pg_errors.UndefinedTable | pg_errors.UndefinedColumn):
            raise StoreError(
                "PostgreSQL's API key table is missing or older than this HRT: run `hrt migrate`",
                store="PostgreSQL",
                public="PostgreSQL's schema is not up to date (`hrt migrate`)",
            ) from exc
        raise
