"""The PostgreSQL outbox: the port (:class:`PostgresOutbox`: leases, head, figures, dead letters)
and a lease (:class:`PostgresOutboxLease`: one projection target's outbox, read and marked inside
the transaction that holds the target's advisory lock)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from hrt.records import Relation
from hrt.stores.base import EntityRow
from hrt.stores.postgres.db import PostgresDatabase
from hrt.stores.postgres.errors import translate_errors
from hrt.stores.postgres.rows import _entity_rows, _relation_rows


def _done_column(target: str) -> str:
    if target == "graph":
        return "graph_done"
    if target == "vector":
        return "vector_done"
    raise ValueError(f"unknown projection target {target!r}")


def _attempts_column(target: str) -> str:
    return {"graph_done": "graph_attempts", "vector_done": "vector_attempts"}[_done_column(target)]


# The outbox lease: one advisory lock per projection target, in a key space of its own (two int4
# keys; the migration runner's lock is a single bigint key).
LEASE_CLASS = 0x4852_5431  # "HRT1"
LEASE_KEYS = {"graph": 1, "vector": 2}


class PostgresOutboxLease:
    """One target's outbox, read and marked inside the transaction that holds the target's lease
    (:meth:`PostgresRecordStore.outbox_lease`). The projector reads the records it delivers through
    it too: the read, the write to the target and the mark that says so belong to one holder."""

    def __init__(self, conn: psycopg.AsyncConnection[Any], target: str) -> None:
        self.conn = conn
        self.target = target
        self._done = _done_column(target)
        self._attempts = _attempts_column(target)

    async def pending(self, limit: int, upto: int | None = None) -> list[dict[str, Any]]:
        """The target's next events in outbox order (none after ``upto`` when given)."""
        with translate_errors("outbox read"):
            cur = await self.conn.execute(
                f"SELECT seq, user_id, op, key, version, {self._attempts} FROM hrt_outbox "
                f"WHERE NOT {self._done} AND seq <= %s ORDER BY seq LIMIT %s",
                (upto if upto is not None else 2**62, limit),
            )
            rows = await cur.fetchall()
        return [{"seq": s, "user_id": u, "op": op, "key": k, "version": v, "attempts": a} for s, u, op, k, v, a in rows]

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]:
        with translate_errors("entity_rows"):
            return await _entity_rows(self.conn, user_id, ids)

    async def relation_rows(
        self, user_id: str, keys: Sequence[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Relation]:
        with translate_errors("relation_rows"):
            return await _relation_rows(self.conn, user_id, keys)

    async def mark_done(self, seqs: Sequence[int]) -> None:
        if not seqs:
            return
        with translate_errors("outbox mark"):
            # rows locked in seq order: the other target's lease holder marks the same rows
            await self.conn.execute(
                f"UPDATE hrt_outbox SET {self._done} = true WHERE seq IN "
                "(SELECT seq FROM hrt_outbox WHERE seq = ANY(%s) ORDER BY seq FOR UPDATE)",
                (list(seqs),),
            )
            await self.conn.execute(
                "DELETE FROM hrt_outbox WHERE graph_done AND vector_done AND seq = ANY(%s)", (list(seqs),)
            )

    async def failed(self, seq: int, error: str, *, count: bool) -> int:
        """Note a failed delivery; ``count``: it counts towards the dead letter (a target that is
        down does not). Returns this target's counted attempts of the event so far."""
        with translate_errors("outbox fail"):
            cur = await self.conn.execute(
                f"UPDATE hrt_outbox SET {self._attempts} = {self._attempts} + %s, attempts = attempts + 1, "
                f"last_error = %s WHERE seq = %s RETURNING {self._attempts}",
                (1 if count else 0, error[:500], seq),
            )
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def dead_letter(self, seq: int, error: str) -> None:
        """Set the event aside for this target (a row of ``hrt_outbox_dead``) and mark it done, so
        the target moves on."""
        with translate_errors("outbox dead letter"):
            await self.conn.execute(
                f"INSERT INTO hrt_outbox_dead (seq, target, user_id, op, key, version, attempts, last_error, "
                f"created_at) SELECT seq, %s, user_id, op, key, version, {self._attempts}, %s, created_at "
                "FROM hrt_outbox WHERE seq = %s ON CONFLICT (seq, target) DO NOTHING",
                (self.target, error[:500], seq),
            )
        await self.mark_done([seq])


class PostgresOutbox(PostgresDatabase):
    """The outbox as a port (:class:`~hrt.stores.base.Outbox`): leases per target, the head, what
    passed, the figures and the dead letters."""

    # ---------------------------------------------------------------------------------------
    # outbox access for the projector
    # ---------------------------------------------------------------------------------------

    @asynccontextmanager
    async def outbox_lease(self, target: str, *, wait: bool = False) -> AsyncIterator[PostgresOutboxLease | None]:
        """A transaction holding ``target``'s delivery lease, or None when another process (or
        another drain of this one) holds it; ``wait``: wait for it instead (``hrt doctor
        --repair``). The lease ends with the transaction: at the end of the block (committed; rolled
        back when the block raises), or when the connection is lost (a crashed holder frees it)."""
        async with self._leased_connection() as conn, conn.transaction():
            with translate_errors("outbox lease"):
                fn = "pg_advisory_xact_lock" if wait else "pg_try_advisory_xact_lock"
                row = await (await conn.execute(f"SELECT {fn}(%s, %s)", (LEASE_CLASS, LEASE_KEYS[target]))).fetchone()
            yield PostgresOutboxLease(conn, target) if wait or (row is not None and row[0]) else None

    async def outbox_head(self) -> int | None:
        """The newest event's seq (None with an empty outbox): a writer's events are at most this
        once its transaction has committed."""
        async with self.reading("outbox head") as conn:
            row = await (await conn.execute("SELECT max(seq) FROM hrt_outbox")).fetchone()
        return int(row[0]) if row and row[0] is not None else None

    async def outbox_passed(self, upto: int) -> dict[str, bool]:
        """Per target: does it have every event up to ``upto`` (delivered, or set aside as dead)?"""
        async with self.reading("outbox passed") as conn:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE NOT graph_done), count(*) FILTER (WHERE NOT vector_done) "
                "FROM hrt_outbox WHERE seq <= %s AND NOT (graph_done AND vector_done)",
                (upto,),
            )
            row = await cur.fetchone()
        graph, vector = (int(row[0]), int(row[1])) if row else (0, 0)
        return {"graph": graph == 0, "vector": vector == 0}

    async def outbox_stats(self) -> dict[str, dict[str, float]]:
        """Per target: events pending (``lag``), age in seconds of the oldest pending one
        (``oldest_s``, 0 without one) and events set aside as dead (``dead``)."""
        async with self.reading("outbox stats") as conn:
            cur = await conn.execute(
                "SELECT count(*) FILTER (WHERE NOT graph_done), count(*) FILTER (WHERE NOT vector_done), "
                "coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE NOT graph_done)), 0), "
                "coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE NOT vector_done)), 0) "
                "FROM hrt_outbox WHERE NOT (graph_done AND vector_done)"
            )
            row = await cur.fetchone()
            cur = await conn.execute("SELECT target, count(*) FROM hrt_outbox_dead GROUP BY target")
            dead = {t: int(n) for t, n in await cur.fetchall()}
        g, v, og, ov = row if row else (0, 0, 0, 0)
        return {
            "graph": {"lag": float(g), "oldest_s": float(og), "dead": float(dead.get("graph", 0))},
            "vector": {"lag": float(v), "oldest_s": float(ov), "dead": float(dead.get("vector", 0))},
        }

    async def dead_letters(self, users: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Events set aside as dead, oldest first (of ``users`` when given)."""
        selected = sorted(set(users)) if users else None
        async with self.reading("dead letters") as conn:
            cur = await conn.execute(
                "SELECT seq, target, user_id, op, key, version, attempts, last_error FROM hrt_outbox_dead "
                "WHERE %s::text[] IS NULL OR user_id = ANY(%s) ORDER BY seq, target",
                (selected, selected),
            )
            rows = await cur.fetchall()
        names = ("seq", "target", "user_id", "op", "key", "version", "attempts", "last_error")
        return [dict(zip(names, r, strict=True)) for r in rows]

    async def clear_dead_letters(self, user_id: str, upto: int) -> int:
        """Forget a user's dead events up to ``upto`` (the user's projections were rebuilt since)."""
        async with self.connection("clear dead letters") as conn, conn.transaction():
            cur = await conn.execute("DELETE FROM hrt_outbox_dead WHERE user_id = %s AND seq <= %s", (user_id, upto))
            return int(cur.rowcount)
