"""Conversation (extraction) statistics in ``hrt_extraction_state``: checked and written in the
record store's write transaction, read by :class:`PostgresState`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from hrt.errors import StateChanged
from hrt.stores.base import WriteBatch
from hrt.stores.postgres.db import PostgresDatabase
from hrt.stores.postgres.rows import _columns

# the advisory lock class of one user's conversation writes (the second key: hashtext of the user id)
STATE_LOCK = 0x4852_5431  # "HRT1"


async def _check_state(conn: psycopg.AsyncConnection[Any], batch: WriteBatch) -> None:
    """:attr:`WriteBatch.state_expect` holds, rows locked until the commit, or StateChanged."""
    if not batch.state_expect:
        return
    expect = sorted(batch.state_expect.items())
    users = sorted({u for (u, _, _), _ in expect})
    # one user's writers serialise on a lock of their own for the transaction: an absent row can't be locked
    for user in users:
        await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (STATE_LOCK, user))
    cur = await conn.execute(
        "SELECT s.u, s.n, s.k, e.value FROM unnest(%s::text[], %s::text[], %s::text[]) AS s(u, n, k) "
        "LEFT JOIN hrt_extraction_state e ON e.user_id = s.u AND e.ns = s.n AND e.key = s.k",
        _columns([k for k, _ in expect], lambda k: k, 3),
    )
    found = {(u, n, k): v for u, n, k, v in await cur.fetchall()}
    for key, expected in expect:
        if found.get(key) != expected:
            raise StateChanged(f"the extraction statistics of user {key[0]!r} changed meanwhile", field="user_id")


async def _write_state(conn: psycopg.AsyncConnection[Any], batch: WriteBatch) -> None:
    rows = sorted(batch.state.items())
    gone = [k for k, v in rows if v is None]
    kept = [(*k, v) for k, v in rows if v is not None]
    if gone:
        await conn.execute(
            "DELETE FROM hrt_extraction_state e USING unnest(%s::text[], %s::text[], %s::text[]) AS s(u, n, k) "
            "WHERE e.user_id = s.u AND e.ns = s.n AND e.key = s.k",
            _columns(gone, lambda k: k, 3),
        )
    if kept:
        await conn.execute(
            "INSERT INTO hrt_extraction_state (user_id, ns, key, value) "
            "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[]) "
            "ON CONFLICT (user_id, ns, key) DO UPDATE SET value = excluded.value",
            _columns(kept, lambda r: r, 4),
        )


class PostgresState(PostgresDatabase):
    """The users' conversation state (:class:`~hrt.stores.base.StateStore`)."""

    # ---------------------------------------------------------------------------------------
    # reads (RecordStore port)
    # ---------------------------------------------------------------------------------------

    async def state_get(self, user_id: str, ns: str, keys: Sequence[str]) -> dict[str, str]:
        if not keys:
            return {}
        async with self.reading("state_get") as conn:
            cur = await conn.execute(
                "SELECT key, value FROM hrt_extraction_state WHERE user_id = %s AND ns = %s AND key = ANY(%s)",
                (user_id, ns, sorted(set(keys))),
            )
            return dict(await cur.fetchall())

    async def state_scan(self, user_id: str, ns: str, prefix: str) -> dict[str, str]:
        async with self.reading("state_scan") as conn:
            # key is COLLATE "C": byte order, so a prefix is one index range
            cur = await conn.execute(
                "SELECT key, value FROM hrt_extraction_state WHERE user_id = %s AND ns = %s "
                "AND key >= %s AND key < %s ORDER BY key",
                (user_id, ns, prefix, prefix + "\U0010ffff"),
            )
            return dict(await cur.fetchall())

    async def state_read(
        self, user_id: str, keys: Mapping[str, Sequence[str]], prefixes: Mapping[str, Sequence[str]]
    ) -> dict[str, dict[str, str]]:
        """One statement: the keys asked for, and each prefix's range (``key`` is ``COLLATE "C"``,
        so a prefix is one index range)."""
        wanted = sorted({(ns, k) for ns, ks in keys.items() for k in ks})
        ranges = sorted({(ns, p, p + "\U0010ffff") for ns, ps in prefixes.items() for p in ps})
        if not wanted and not ranges:
            return {}
        async with self.reading("state_read") as conn:
            cur = await conn.execute(
                "SELECT e.ns, e.key, e.value FROM unnest(%s::text[], %s::text[]) AS s(n, k) "
                "JOIN hrt_extraction_state e ON e.user_id = %s AND e.ns = s.n AND e.key = s.k "
                "UNION ALL SELECT e.ns, e.key, e.value FROM unnest(%s::text[], %s::text[], %s::text[]) AS r(n, lo, hi) "
                "JOIN hrt_extraction_state e ON e.user_id = %s AND e.ns = r.n AND e.key >= r.lo AND e.key < r.hi",
                (*_columns(wanted, lambda r: r, 2), user_id, *_columns(ranges, lambda r: r, 3), user_id),
            )
            out: dict[str, dict[str, str]] = {}
            for ns, key, value in await cur.fetchall():
                out.setdefault(ns, {})[key] = value
            return out
