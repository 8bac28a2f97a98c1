"""PostgreSQL API keys (:class:`PostgresKeys`): ``hrt_api_keys`` rows as :class:`~hrt.auth.KeyRecord`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from psycopg import errors as pg_errors

from hrt.auth import KeyRecord
from hrt.errors import Conflict, StoreError
from hrt.stores.postgres.db import PostgresDatabase

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


class PostgresKeys(PostgresDatabase):
    """The deployment's API keys (:class:`~hrt.auth.KeyStore`) in ``hrt_api_keys``."""

    # ---------------------------------------------------------------------------------------
    # API keys (KeyStore, hrt/auth/): the hrt_api_keys table of migration 0002
    # ---------------------------------------------------------------------------------------

    async def create_key(self, key: KeyRecord) -> None:
        with _keys_table():
            try:
                async with self.connection("create_key") as conn, conn.transaction():
                    await conn.execute(
                        "INSERT INTO hrt_api_keys (key_id, name, scopes, users, secret_hash, salt, created_at, "
                        "expires_at, revoked_at, last_used_at, rate_limit, max_concurrency, parent) VALUES (%s, %s, "
                        "%s, %s, %s, %s, to_timestamp(%s), to_timestamp(%s), to_timestamp(%s), to_timestamp(%s), "
                        "%s, %s, %s)",
                        key.columns(),
                    )
            except StoreError as exc:
                if isinstance(exc.__cause__, pg_errors.UniqueViolation):
                    raise Conflict(
                        f"a key named {key.name!r} exists; revoke it first or choose another name", field="name"
                    ) from exc
                raise

    async def keys(self) -> list[KeyRecord]:
        with _keys_table():
            async with self.reading("keys") as conn:
                cur = await conn.execute(f"SELECT {_KEY_COLUMNS} FROM hrt_api_keys ORDER BY created_at, name, key_id")
                rows = await cur.fetchall()
        return [_key(r) for r in rows]

    async def revoke_key(self, key_id: str, at: float) -> KeyRecord | None:
        with _keys_table():
            async with self.connection("revoke_key") as conn, conn.transaction():
                cur = await conn.execute(
                    f"UPDATE hrt_api_keys SET revoked_at = to_timestamp(%s) WHERE key_id = %s AND revoked_at IS NULL "
                    f"RETURNING {_KEY_COLUMNS}",
                    (at, key_id),
                )
                row = await cur.fetchone()
        return _key(row) if row is not None else None

    async def rehash_key(self, key_id: str, old_hash: bytes, new_hash: bytes) -> None:
        with _keys_table():
            async with self.connection("rehash_key") as conn, conn.transaction():
                await conn.execute(
                    "UPDATE hrt_api_keys SET secret_hash = %s, salt = %s WHERE key_id = %s AND secret_hash = %s",
                    (new_hash, b"", key_id, old_hash),
                )

    async def touch_keys(self, used: Mapping[str, float]) -> None:
        if not used:
            return
        items = sorted(used.items())
        with _keys_table():
            async with self.connection("touch_keys") as conn, conn.transaction():
                await conn.execute(
                    "UPDATE hrt_api_keys k SET last_used_at = greatest(k.last_used_at, to_timestamp(u.at)) "
                    "FROM unnest(%s::text[], %s::float8[]) AS u(key_id, at) WHERE k.key_id = u.key_id",
                    ([k for k, _ in items], [a for _, a in items]),
                )
