"""The PostgreSQL outbox lease: one projection target's outbox, read and marked inside the
transaction that holds the target's advisory lock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from hrt.records import Relation
from hrt.stores.base import EntityRow
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
