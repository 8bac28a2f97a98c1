"""One user's records read for an export from PostgreSQL (:class:`ExportReader`).

A connection of its own (not one of the request pool's: an export of a million entities streams
for minutes), in one ``REPEATABLE READ, READ ONLY`` transaction, so every chunk sees the state of
its first statement; each query is one server-side cursor fetched ``chunk`` rows at a time, so
neither side holds more than a chunk. Ids are ordered ``COLLATE "C"`` (byte-wise, as SQLite), so
the export's order, and bytes, are those of the embedded store whatever the database's locale.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any

import psycopg

from hrt.records import ENTITY_MODELS, EdgeType, Entity, Kind, Preference, Relation
from hrt.stores.postgres.errors import translate_errors
from hrt.stores.projection import RELATION_COLUMNS, relation_from_row

_CURSORS = itertools.count(1)


class PostgresExportReader:
    def __init__(self, conn: psycopg.AsyncConnection[Any], user_id: str) -> None:
        self._conn = conn
        self.user_id = user_id

    async def _rows(self, sql: str, params: tuple[Any, ...], chunk: int) -> AsyncIterator[list[Any]]:
        with translate_errors("export"):
            cursor = self._conn.cursor(name=f"hrt_export_{next(_CURSORS)}")
        try:
            with translate_errors("export"):
                await cursor.execute(sql, params)
            while True:
                with translate_errors("export"):
                    rows = await cursor.fetchmany(chunk)
                if not rows:
                    return
                yield rows
        finally:
            with translate_errors("export"):
                await cursor.close()

    async def entities(self, kind: Kind, chunk: int) -> AsyncIterator[list[Entity]]:
        model = ENTITY_MODELS[Kind(kind)]
        sql = 'SELECT data FROM hrt_entities WHERE user_id = %s AND kind = %s ORDER BY id COLLATE "C"'
        async for rows in self._rows(sql, (self.user_id, Kind(kind).value), chunk):
            yield [model.model_validate(data) for (data,) in rows]

    async def relations(self, chunk: int, type: EdgeType | None = None) -> AsyncIterator[list[Relation]]:
        where, params = ("AND type = %s", (self.user_id, type.value)) if type is not None else ("", (self.user_id,))
        sql = (
            f"SELECT {RELATION_COLUMNS} FROM hrt_relations WHERE user_id = %s {where} "
            'ORDER BY source COLLATE "C", target COLLATE "C", type COLLATE "C"'
        )
        async for rows in self._rows(sql, params, chunk):
            yield [relation_from_row(self.user_id, row) for row in rows]

    async def get_many(self, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]:
        if not ids:
            return {}
        model = ENTITY_MODELS[Kind(kind)]
        with translate_errors("export"):
            cur = await self._conn.execute(
                "SELECT id, data FROM hrt_entities WHERE user_id = %s AND kind = %s AND id = ANY(%s)",
                (self.user_id, Kind(kind).value, sorted(set(ids))),
            )
            rows = await cur.fetchall()
        return {ident: model.model_validate(data) for ident, data in rows}

    async def preferences(self) -> list[Preference]:
        sql = (
            "SELECT target_kind, target, weight FROM hrt_preferences WHERE user_id = %s "
            'ORDER BY target_kind COLLATE "C", target COLLATE "C"'
        )
        out: list[Preference] = []
        async for rows in self._rows(sql, (self.user_id,), 500):
            out += [Preference(user_id=self.user_id, target_kind=tk, target=t, weight=w) for tk, t, w in rows]
        return out


async def open_export_connection(dsn: str, timeout: float) -> psycopg.AsyncConnection[Any]:
    """A connection of the export's own, in its read-only snapshot transaction."""
    with translate_errors("export"):
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=False, connect_timeout=max(1, int(timeout)))
        try:
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        except BaseException:
            await conn.close()
            raise
    return conn
