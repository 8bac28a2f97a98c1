"""One user's records read for an export from the embedded SQLite file (:class:`ExportReader`).

The reader has a connection of its own, read-only, inside one read transaction: WAL gives it the
state committed when its first statement ran, whatever is written meanwhile, and neither the
event loop's reader nor the write lock is held while the export streams. Each chunk is fetched in
a worker thread (one at a time: the connection is used by one thread at a time). An in-memory
store has one connection only: its rows are read under its lock, a chunk at a time by key.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from hrt.errors import StoreError, StoreUnavailable
from hrt.records import ENTITY_MODELS, EdgeType, Entity, Kind, Preference, Relation
from hrt.stores.embedded.schema import BUSY_TIMEOUT_MS, chunks
from hrt.stores.projection import RELATION_COLUMNS, relation_from_row

if TYPE_CHECKING:
    from hrt.stores.embedded.store import EmbeddedStore

_STORE = "the embedded store"


class EmbeddedExportReader:
    def __init__(self, store: EmbeddedStore, user_id: str) -> None:
        self._store = store
        self.user_id = user_id
        self._conn: sqlite3.Connection | None = None

    def begin(self) -> None:
        if self._store._in_memory:
            return
        try:
            conn = sqlite3.connect(str(self._store.path), check_same_thread=False, isolation_level=None)
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only=ON")
            conn.execute("BEGIN")
            # the snapshot starts at the first read: taken now, before the export's first chunk
            conn.execute("SELECT 1 FROM entities WHERE user_id = ? LIMIT 1", (self.user_id,)).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot read the embedded store for an export: {exc}", store=_STORE) from exc
        self._conn = conn

    def end(self) -> None:
        if self._conn is not None:
            try:
                self._conn.execute("COMMIT")
            finally:
                self._conn.close()
                self._conn = None

    def _fetch(self, cursor: sqlite3.Cursor, chunk: int) -> list[Any]:
        try:
            return cursor.fetchmany(chunk)
        except sqlite3.Error as exc:
            raise StoreError(f"embedded store export read failed: {exc}", store=_STORE) from exc

    async def _rows(self, sql: str, params: tuple[Any, ...], chunk: int) -> AsyncIterator[list[Any]]:
        """The rows of one ordered query, ``chunk`` at a time."""
        if self._conn is None:  # in memory: read whole under the store's lock (small by nature)
            with self._store.reading() as db:
                rows = db.execute(sql, params).fetchall()
            for i in range(0, len(rows), chunk):
                yield rows[i : i + chunk]
            return
        conn = self._conn
        cursor = await asyncio.to_thread(conn.execute, sql, params)
        try:
            while rows := await asyncio.to_thread(self._fetch, cursor, chunk):
                yield rows
        finally:
            cursor.close()

    async def entities(self, kind: Kind, chunk: int) -> AsyncIterator[list[Entity]]:
        model = ENTITY_MODELS[Kind(kind)]
        sql = "SELECT data FROM entities WHERE user_id = ? AND kind = ? ORDER BY id"
        async for rows in self._rows(sql, (self.user_id, Kind(kind).value), chunk):
            yield [model.model_validate_json(data) for (data,) in rows]

    async def relations(self, chunk: int, type: EdgeType | None = None) -> AsyncIterator[list[Relation]]:
        where, params = ("AND type = ?", (self.user_id, type.value)) if type is not None else ("", (self.user_id,))
        sql = f"SELECT {RELATION_COLUMNS} FROM edges WHERE user_id = ? {where} ORDER BY source, target, type"
        async for rows in self._rows(sql, params, chunk):
            yield [relation_from_row(self.user_id, row) for row in rows]

    async def get_many(self, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]:
        model = ENTITY_MODELS[Kind(kind)]
        out: dict[str, Entity] = {}
        for part in chunks(sorted(set(ids)), 500):
            marks = ",".join("?" * len(part))
            sql = f"SELECT id, data FROM entities WHERE user_id = ? AND kind = ? AND id IN ({marks})"
            async for rows in self._rows(sql, (self.user_id, Kind(kind).value, *part), 500):
                out.update((ident, model.model_validate_json(data)) for ident, data in rows)
        return out

    async def preferences(self) -> list[Preference]:
        sql = "SELECT target_kind, target, weight FROM preferences WHERE user_id = ? ORDER BY target_kind, target"
        out: list[Preference] = []
        async for rows in self._rows(sql, (self.user_id,), 500):
            out += [Preference(user_id=self.user_id, target_kind=tk, target=t, weight=w) for tk, t, w in rows]
        return out
