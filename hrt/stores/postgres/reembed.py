"""``hrt reembed`` over PostgreSQL (:class:`~hrt.stores.base.VectorRewriter`), and the check that
the store's vectors are the embedder's, when a server opens it.

The vectors of record are ``hrt_entities.vector`` and ``passages``; Weaviate holds a projection.
Each page is rewritten in one transaction with the re-embedding's cursor and an ``upsert_entity``
outbox event per entity for the vector index only (its graph mark is set: Neo4j holds no vectors),
so the projector delivers the new vectors as it delivers any write; ``finish`` drains the outbox.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors

from hrt.errors import StoreError
from hrt.records import ENTITY_MODELS, Entity, Kind
from hrt.stores import vector_meta
from hrt.stores.base import Vector
from hrt.stores.projection import passage_bytes, vector_bytes

if TYPE_CHECKING:
    from hrt.stores.postgres.records import PostgresRecordStore

# ids and user ids compare byte-wise, as in the embedded store (and the export's order)
_ORDER = 'ORDER BY user_id COLLATE "C", id COLLATE "C"'
_AFTER = 'WHERE user_id COLLATE "C" > %s OR (user_id = %s AND id COLLATE "C" > %s)'


async def read_meta(conn: psycopg.AsyncConnection[Any]) -> dict[str, str]:
    try:
        cur = await conn.execute("SELECT key, value FROM hrt_meta WHERE key = ANY(%s)", (list(vector_meta.KEYS),))
    except pg_errors.UndefinedTable as exc:
        raise StoreError("PostgreSQL's schema is behind this HRT: run `hrt migrate`", store="PostgreSQL") from exc
    return {k: v for k, v in await cur.fetchall()}


async def write_meta(conn: psycopg.AsyncConnection[Any], values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            await conn.execute("DELETE FROM hrt_meta WHERE key = %s", (key,))
        else:
            await conn.execute(
                "INSERT INTO hrt_meta (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )


async def check_store(pg: PostgresRecordStore, dim: int, model_id: str) -> None:
    """Refuse a store whose vectors are another model's (:func:`vector_meta.check`); record this
    model in a store that records none."""
    async with pg.connection("embedding model check") as conn, conn.transaction():
        cur = await conn.execute("SELECT EXISTS (SELECT 1 FROM hrt_entities)")
        row = await cur.fetchone()
        has_vectors = bool(row and row[0])
        record = vector_meta.check(await read_meta(conn), dim, model_id, "the PostgreSQL record store", has_vectors)
        await write_meta(conn, record)


class PostgresVectorRewriter:
    def __init__(self, pg: PostgresRecordStore, drain: Any = None) -> None:
        """``drain``: an async callable that delivers the outbox (the service's projector)."""
        self._pg = pg
        self._drain = drain

    async def vector_meta(self) -> dict[str, str]:
        async with self._pg.connection("reembed") as conn:
            return await read_meta(conn)

    async def set_vector_meta(self, values: Mapping[str, str | None]) -> None:
        async with self._pg.connection("reembed") as conn, conn.transaction():
            await write_meta(conn, values)

    async def count_entities(self, after: tuple[str, str] | None = None) -> int:
        where, params = (_AFTER, (after[0], after[0], after[1])) if after else ("", ())
        async with self._pg.reading("reembed") as conn:
            cur = await conn.execute(f"SELECT count(*) FROM hrt_entities {where}", params)
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def entity_page(self, after: tuple[str, str] | None, limit: int) -> list[Entity]:
        where, params = (_AFTER, (after[0], after[0], after[1])) if after else ("", ())
        async with self._pg.reading("reembed") as conn:
            cur = await conn.execute(f"SELECT kind, data FROM hrt_entities {where} {_ORDER} LIMIT %s", (*params, limit))
            rows = await cur.fetchall()
        return [ENTITY_MODELS[Kind(kind)].model_validate(data) for kind, data in rows]

    async def rewrite_vectors(
        self,
        vectors: Mapping[tuple[str, str], Vector],
        passages: Mapping[tuple[str, str], Vector],
        meta: Mapping[str, str | None],
    ) -> None:
        keys = list(vectors)
        users, ids = [k[0] for k in keys], [k[1] for k in keys]
        vecs = [vector_bytes(vectors[k]) for k in keys]
        rows = [passage_bytes(passages.get(k)) for k in keys]
        async with self._pg.connection("reembed") as conn, conn.transaction():
            await conn.execute(
                "UPDATE hrt_entities e SET vector = u.vec, passages = u.pas "
                "FROM unnest(%s::text[], %s::text[], %s::bytea[], %s::bytea[]) AS u(uid, eid, vec, pas) "
                "WHERE e.user_id = u.uid AND e.id = u.eid",
                (users, ids, vecs, rows),
            )
            # one event per entity, for the vector index only, in key order
            await conn.execute(
                "INSERT INTO hrt_outbox (user_id, op, key, version, graph_done) "
                "SELECT e.user_id, 'upsert_entity', jsonb_build_object('id', e.id, 'kind', e.kind), e.version, true "
                "FROM hrt_entities e JOIN unnest(%s::text[], %s::text[]) WITH ORDINALITY AS u(uid, eid, n) "
                "ON e.user_id = u.uid AND e.id = u.eid ORDER BY u.n",
                (users, ids),
            )
            await write_meta(conn, meta)

    async def finish(self) -> None:
        if self._drain is not None:
            await self._drain()
