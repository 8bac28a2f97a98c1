"""RecordStore over PostgreSQL (psycopg 3, async pool): the source of truth of the services
deployment, with the transactional outbox that feeds the graph and vector projections.

:class:`PostgresRecordStore` is its concerns put together: the connections (:mod:`.db`), the writes
(:mod:`.writes`), the outbox (:mod:`.outbox`), the keys (:mod:`.keys`) and the conversation state
(:mod:`.state`), with the reads here. Every statement is parameterised and filters on ``user_id``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from typing import TYPE_CHECKING

import psycopg

from hrt.metadata_filter import Tree as MetadataTree
from hrt.metadata_filter import postgres_where
from hrt.records import ENTITY_MODELS, Entity, Kind, Preference, Relation
from hrt.stores.base import WARM_UP_USER, BrowseFilter, EntityDetail, EntityRow, StoredEntity
from hrt.stores.postgres import browse as postgres_browse
from hrt.stores.postgres import reembed as postgres_reembed
from hrt.stores.postgres.db import quiet_pool_reconnects
from hrt.stores.postgres.keys import PostgresKeys
from hrt.stores.postgres.outbox import PostgresOutbox, PostgresOutboxLease
from hrt.stores.postgres.rows import _entity_rows, _relation_rows
from hrt.stores.postgres.state import PostgresState
from hrt.stores.postgres.writes import PostgresWrites
from hrt.stores.projection import RELATION_COLUMNS, relation_from_row

if TYPE_CHECKING:
    from hrt.stores.postgres.export import PostgresExportReader

__all__ = ["PostgresOutboxLease", "PostgresRecordStore", "quiet_pool_reconnects"]


class PostgresRecordStore(PostgresWrites, PostgresOutbox, PostgresKeys, PostgresState):
    """The record store over PostgreSQL: its writes, outbox, keys and state (each a class of its
    own over :class:`~hrt.stores.postgres.db.PostgresDatabase`), and the reads."""

    async def ping(self) -> None:
        """Raise StoreUnavailable unless PostgreSQL answers a read of the records (a user no
        record can carry: it finds nothing)."""
        await self.user_exists(WARM_UP_USER)

    async def apply_schema(self) -> None:
        """Nothing to migrate on start (``hrt migrate`` does, :mod:`hrt.stores.postgres.migrate`,
        under its own lock, before servers start); checks that the store's vectors are the embedder's."""
        if self._embedder is not None and self._embedder[1]:
            await postgres_reembed.check_store(self, *self._embedder)

    @property
    def outbox(self) -> PostgresRecordStore:
        """Writes commit outbox rows with the records: this store is the projections' outbox."""
        return self

    async def get_many(self, user_id: str, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]:
        kind = Kind(kind)
        model = ENTITY_MODELS[kind]
        if not ids:
            return {}
        async with self.reading("get_many") as conn:
            cur = await conn.execute(
                "SELECT id, data FROM hrt_entities WHERE user_id = %s AND kind = %s AND id = ANY(%s)",
                (user_id, kind.value, sorted(set(ids))),
            )
            rows = await cur.fetchall()
        return {ident: model.model_validate(data) for ident, data in rows}

    async def preferences(self, user_id: str) -> list[Preference]:
        async with self.reading("preferences") as conn:
            cur = await conn.execute(
                "SELECT target_kind, target, weight FROM hrt_preferences WHERE user_id = %s "
                "ORDER BY target_kind, target",
                (user_id,),
            )
            rows = await cur.fetchall()
        return [Preference(user_id=user_id, target_kind=tk, target=t, weight=w) for tk, t, w in rows]

    async def user_exists(self, user_id: str) -> bool:
        async with self.reading("user_exists") as conn:
            cur = await conn.execute("SELECT 1 FROM hrt_entities WHERE user_id = %s LIMIT 1", (user_id,))
            return await cur.fetchone() is not None

    async def counts(self, user_id: str) -> dict[str, int]:
        async with self.connection("counts") as conn:
            cur = await conn.execute(
                "SELECT kind, count(*) FROM hrt_entities WHERE user_id = %s GROUP BY kind", (user_id,)
            )
            rows = await cur.fetchall()
            rel = await (
                await conn.execute("SELECT count(*) FROM hrt_relations WHERE user_id = %s", (user_id,))
            ).fetchone()
            pref = await (
                await conn.execute("SELECT count(*) FROM hrt_preferences WHERE user_id = %s", (user_id,))
            ).fetchone()
        out = {k.value: 0 for k in Kind}
        out.update({kind: int(n) for kind, n in rows})
        out["relation"] = int(rel[0]) if rel else 0
        out["preference"] = int(pref[0]) if pref else 0
        return out

    async def entity_detail(self, user_id: str, kind: Kind, ident: str, relation_limit: int) -> EntityDetail | None:
        async with self.connection("entity_detail") as conn, conn.transaction():
            # one snapshot for the record, its links and their count
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            return await postgres_browse.entity_detail(conn, user_id, Kind(kind), ident, relation_limit)

    async def browse(self, user_id: str, where: BrowseFilter) -> list[StoredEntity]:
        async with self.reading("browse") as conn:
            return await postgres_browse.browse(conn, user_id, where)

    async def metadata_matches(self, user_id: str, ids: Sequence[str], where: MetadataTree) -> set[str]:
        if not ids:
            return set()
        cond, args = postgres_where(where, "data")
        async with self.reading("metadata_matches") as conn:
            cur = await conn.execute(
                f"SELECT id FROM hrt_entities WHERE user_id = %s AND kind = 'memory_unit' AND id = ANY(%s) AND {cond}",
                (user_id, sorted(set(ids)), *args),
            )
            return {r[0] for r in await cur.fetchall()}

    async def ids(self, user_id: str) -> dict[str, str]:
        """id -> kind of every entity of a user (for drift checks)."""
        async with self.connection("ids") as conn:
            cur = await conn.execute("SELECT id, kind FROM hrt_entities WHERE user_id = %s", (user_id,))
            return {i: k for i, k in await cur.fetchall()}

    async def users(self) -> list[str]:
        async with self.connection("users") as conn:
            cur = await conn.execute("SELECT DISTINCT user_id FROM hrt_entities ORDER BY user_id")
            return [r[0] for r in await cur.fetchall()]

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]:
        """Current entity, vector and version for the projector."""
        async with self.connection("entity_rows") as conn:
            return await _entity_rows(conn, user_id, ids)

    async def all_relations(self, user_id: str) -> list[Relation]:
        async with self.connection("all_relations") as conn:
            cur = await conn.execute(
                f"SELECT {RELATION_COLUMNS} FROM hrt_relations WHERE user_id = %s ORDER BY source, target, type",
                (user_id,),
            )
            rows = await cur.fetchall()
        return [relation_from_row(user_id, row) for row in rows]

    async def relations_of(self, user_id: str, ids: Sequence[str]) -> list[Relation]:
        if not ids:
            return []
        async with self.connection("relations_of") as conn:
            cur = await conn.execute(
                f"SELECT {RELATION_COLUMNS} FROM hrt_relations WHERE user_id = %s AND source = ANY(%s) "
                f"UNION SELECT {RELATION_COLUMNS} FROM hrt_relations WHERE user_id = %s AND target = ANY(%s) "
                "ORDER BY source, target, type",
                (user_id, list(ids), user_id, list(ids)),
            )
            rows = await cur.fetchall()
        return [relation_from_row(user_id, row) for row in rows]

    async def text_candidates(
        self, user_id: str, queries: Sequence[Sequence[str]], limit: int
    ) -> list[list[EntityRow]]:
        """Per query (its words), the user's best ``limit`` entities by PostgreSQL's full-text
        rank, then id, in one round trip (:mod:`hrt.stores.postgres.fallback`): retrieval's
        seeds while the vector index is down."""
        from hrt.stores.postgres.fallback import text_candidates

        async with self.reading("text search") as conn:
            return await text_candidates(conn, user_id, queries, limit)

    # ---------------------------------------------------------------------------------------
    # export (hrt.export, hrt.stores.postgres.export)
    # ---------------------------------------------------------------------------------------

    @asynccontextmanager
    async def export_reader(self, user_id: str) -> AsyncIterator[PostgresExportReader]:
        from hrt.stores.postgres.export import PostgresExportReader, open_export_connection

        if self.circuit is not None:
            self.circuit.check()
        conn = await open_export_connection(self._dsn, self._timeout)
        try:
            yield PostgresExportReader(conn, user_id)
        finally:
            with suppress(psycopg.Error):
                await conn.rollback()  # read only: nothing to commit
            await conn.close()

    async def relation_rows(
        self, user_id: str, keys: Sequence[tuple[str, str, str]]
    ) -> dict[tuple[str, str, str], Relation]:
        """Current relations by (source, target, type) for the projector."""
        if not keys:
            return {}
        async with self.connection("relation_rows") as conn:
            return await _relation_rows(conn, user_id, keys)
