"""The PostgreSQL record store's writes: a batch commits its records and one outbox row per
change in one transaction. Entity keys are written in sorted order so concurrent batches over
overlapping ids lock rows in the same order; a deadlock or serialisation failure retries the whole
batch. Every statement is parameterised and filters on ``user_id``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from hrt.errors import Conflict, InvalidInput, StoreError
from hrt.records import EDGE_ENDPOINTS, Deletion, Entity, Kind, Relation, entity_ts, title_key, valid_from
from hrt.stores.base import WriteBatch, WriteResult
from hrt.stores.postgres.db import PostgresDatabase
from hrt.stores.postgres.rows import _columns, _last_per_key
from hrt.stores.postgres.state import _check_state, _write_state
from hrt.stores.projection import passage_bytes, seconds, vector_bytes

log = logging.getLogger(__name__)

RETRIES = 5


class PostgresWrites(PostgresDatabase):
    # ---------------------------------------------------------------------------------------
    # writes
    # ---------------------------------------------------------------------------------------

    async def apply(self, batch: WriteBatch) -> WriteResult:
        """Records and outbox rows in one transaction; nothing of the batch on error."""
        for attempt in range(RETRIES):
            try:
                async with self.connection("write") as conn, conn.transaction():
                    return await self._apply(conn, batch)
            except StoreError as exc:
                cause = exc.__cause__
                if isinstance(cause, pg_errors.DeadlockDetected | pg_errors.SerializationFailure) and (
                    attempt < RETRIES - 1
                ):
                    log.info("write batch retried after %s", type(cause).__name__)
                    await asyncio.sleep(0.02 * (attempt + 1))
                    continue
                raise
        raise StoreError(
            "write batch failed after retries", store="PostgreSQL"
        )  # pragma: no cover - loop always returns/raises

    async def _apply(self, conn: psycopg.AsyncConnection[Any], batch: WriteBatch) -> WriteResult:
        """Set-based: one statement per kind of write and one for their outbox rows, whatever the
        batch size (a statement per record cost ~3 round trips each: 120k for 10k entities)."""
        # a statement may not touch a row twice, and the last write of a key in a batch wins, as it
        # would across batches (kinds are checked over every write: an id given as two kinds fails)
        await _check_state(conn, batch)
        await self._check_kinds(conn, batch.entities)
        entities = _last_per_key(batch.entities, lambda e: (e.user_id, e.id))
        versions = await self._upsert_entities(conn, entities, batch)
        relations = _last_per_key(batch.relations, lambda r: (r.user_id, r.source, r.target, r.type.value))
        await self._check_edges(conn, relations)
        await self._upsert_relations(conn, relations)
        upserted = len(entities) + len(batch.relations)
        if batch.preferences:
            prefs = _last_per_key(batch.preferences, lambda p: (p.user_id, p.target_kind, p.target))
            await conn.execute(
                "INSERT INTO hrt_preferences (user_id, target_kind, target, weight) "
                "SELECT * FROM unnest(%s::text[], %s::text[], %s::text[], %s::float8[]) "
                "ON CONFLICT (user_id, target_kind, target) DO UPDATE SET weight = excluded.weight",
                _columns(prefs, lambda p: (p.user_id, p.target_kind, p.target, p.weight), 4),
            )
            upserted += len(batch.preferences)
        deleted = 0
        for d in batch.deletions:
            deleted += await self._delete(conn, d)
        await _write_state(conn, batch)
        return WriteResult(upserted=upserted, deleted=deleted, versions=versions)

    async def _upsert_entities(
        self, conn: psycopg.AsyncConnection[Any], entities: Sequence[Entity], batch: WriteBatch
    ) -> dict[tuple[str, str], int]:
        """Insert or update ``entities`` (sorted by key, one per key) and announce each with its
        new version."""
        if not entities:
            return {}
        rows = []
        for e in entities:
            vec = batch.vectors.get((e.user_id, e.id))
            if vec is None:
                raise StoreError(f"no vector was computed for {e.user_id}/{e.id}")
            rows.append(
                (
                    e.user_id,
                    e.id,
                    e.kind,
                    Jsonb(e.model_dump(mode="json")),
                    vector_bytes(vec),
                    passage_bytes(batch.passages.get((e.user_id, e.id))),
                    seconds(entity_ts(e)),
                    seconds(valid_from(e)),  # as the projections see it: the record's, else its ts
                    seconds(e.valid_to),
                    title_key(e),
                )
            )
        # rows go in key order (ORDER BY ordinality), so concurrent batches lock in the same order;
        # the writer (key and time) is the batch's, the same for every row
        cur = await conn.execute(
            "INSERT INTO hrt_entities (user_id, id, kind, data, vector, passages, ts, valid_from, valid_to, "
            "title_key, written_at, written_by) "
            "SELECT u, i, k, d, v, p, t, vf, vt, tk, %s::float8, %s::text FROM unnest(%s::text[], %s::text[], "
            "%s::text[], %s::jsonb[], %s::bytea[], %s::bytea[], %s::float8[], %s::float8[], %s::float8[], %s::text[]) "
            "WITH ORDINALITY AS r(u, i, k, d, v, p, t, vf, vt, tk, n) "
            "ORDER BY n ON CONFLICT (user_id, id) DO UPDATE SET data = excluded.data, vector = excluded.vector, "
            "passages = excluded.passages, "
            "ts = excluded.ts, valid_from = excluded.valid_from, valid_to = excluded.valid_to, "
            "title_key = excluded.title_key, written_at = excluded.written_at, written_by = excluded.written_by, "
            "version = hrt_entities.version + 1, updated_at = now() RETURNING user_id, id, version",
            (batch.written_at, batch.written_by, *_columns(rows, lambda row: row, 10)),
        )
        versions = {(u, i): int(v) for u, i, v in await cur.fetchall()}
        await self._events(
            conn,
            [(e.user_id, "upsert_entity", {"id": e.id, "kind": e.kind}, versions[(e.user_id, e.id)]) for e in entities],
        )
        return versions

    async def _upsert_relations(self, conn: psycopg.AsyncConnection[Any], relations: Sequence[Relation]) -> None:
        """Insert or update ``relations`` (sorted by key, one per key) and announce each."""
        if not relations:
            return
        cur = await conn.execute(
            "INSERT INTO hrt_relations (user_id, source, target, type, weight, relation_type, valid_from, valid_to) "
            "SELECT u, s, t, y, w, rt, vf, vt FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], "
            "%s::float8[], %s::text[], %s::float8[], %s::float8[]) WITH ORDINALITY AS r(u, s, t, y, w, rt, vf, vt, n) "
            "ORDER BY n ON CONFLICT (user_id, source, target, type) DO UPDATE SET weight = excluded.weight, "
            "relation_type = excluded.relation_type, valid_from = excluded.valid_from, valid_to = excluded.valid_to, "
            "version = hrt_relations.version + 1, updated_at = now() RETURNING user_id, source, target, type, version",
            _columns(
                relations,
                lambda r: (
                    r.user_id,
                    r.source,
                    r.target,
                    r.type.value,
                    r.weight,
                    r.relation_type,
                    seconds(r.valid_from),
                    seconds(r.valid_to),
                ),
                8,
            ),
        )
        versions = {(u, s, t, y): int(v) for u, s, t, y, v in await cur.fetchall()}
        await self._events(
            conn,
            [
                (
                    r.user_id,
                    "upsert_relation",
                    {"source": r.source, "target": r.target, "type": r.type.value},
                    versions[(r.user_id, r.source, r.target, r.type.value)],
                )
                for r in relations
            ],
        )

    async def _event(
        self, conn: psycopg.AsyncConnection[Any], user_id: str, op: str, key: dict[str, str], version: int
    ) -> None:
        await self._events(conn, [(user_id, op, key, version)])

    async def _events(
        self, conn: psycopg.AsyncConnection[Any], events: Sequence[tuple[str, str, dict[str, str], int]]
    ) -> None:
        """Outbox rows, in the order given (their ``seq`` follows it)."""
        if not events:
            return
        await conn.execute(
            "INSERT INTO hrt_outbox (user_id, op, key, version, vector_done) "
            "SELECT u, o, k, v, r FROM unnest(%s::text[], %s::text[], %s::jsonb[], %s::bigint[], %s::bool[]) "
            "WITH ORDINALITY AS e(u, o, k, v, r, n) ORDER BY n",
            _columns(
                events,
                lambda e: (e[0], e[1], Jsonb(e[2]), e[3], e[1] in ("upsert_relation", "delete_relation")),
                5,
            ),
        )

    async def _check_kinds(self, conn: psycopg.AsyncConnection[Any], entities: Sequence[Entity]) -> None:
        seen: dict[tuple[str, str], str] = {}
        for e in entities:
            if seen.setdefault((e.user_id, e.id), e.kind) != e.kind:
                raise Conflict(f"id {e.id!r} is given as both {seen[(e.user_id, e.id)]} and {e.kind}", field="id")
        by_user: dict[str, list[str]] = {}
        for user_id, ident in seen:
            by_user.setdefault(user_id, []).append(ident)
        for user_id, ids in by_user.items():
            for ident, kind in (await _stored_kinds(conn, user_id, ids)).items():
                if kind != seen[(user_id, ident)]:
                    raise Conflict(f"id {ident!r} already names a {kind} of user {user_id!r}", field="id")

    async def _check_edges(self, conn: psycopg.AsyncConnection[Any], relations: Sequence[Relation]) -> None:
        """Both ends of every relation are entities of its user, of the kinds its type allows
        (read after the batch's entities are written: a relation may join two of them)."""
        ends: dict[str, set[str]] = {}
        for rel in relations:
            ends.setdefault(rel.user_id, set()).update((rel.source, rel.target))
        kinds: dict[tuple[str, str], Kind] = {}
        for user_id, ids in sorted(ends.items()):
            kinds.update({(user_id, i): Kind(k) for i, k in (await _stored_kinds(conn, user_id, sorted(ids))).items()})
        for rel in relations:
            allowed_src, allowed_dst = EDGE_ENDPOINTS[rel.type]
            for end, ident, allowed in (("source", rel.source, allowed_src), ("target", rel.target, allowed_dst)):
                kind = kinds.get((rel.user_id, ident))
                if kind is None:
                    raise InvalidInput(
                        f"{rel.type.value} {end} {ident!r} is not an entity of user {rel.user_id!r}", field=end
                    )
                if kind not in allowed:
                    raise InvalidInput(
                        f"{rel.type.value} {end} must be {' or '.join(sorted(allowed))}, but {ident!r} is a {kind}",
                        field=end,
                    )

    async def _delete(self, conn: psycopg.AsyncConnection[Any], d: Deletion) -> int:
        if d.kind in ("memory_unit", "concept", "artifact"):
            ident = d.entity_id()
            if ident is None:
                raise InvalidInput("a delete of an entity needs its id (muid for memory units)", field="id")
            cur = await conn.execute(
                "SELECT kind FROM hrt_entities WHERE user_id = %s AND id = %s FOR UPDATE", (d.user_id, ident)
            )
            row = await cur.fetchone()
            if row is None:
                return 0
            if row[0] != d.kind:
                raise Conflict(f"{ident!r} is a {row[0]}, not a {d.kind}", field="kind")
            await conn.execute("DELETE FROM hrt_entities WHERE user_id = %s AND id = %s", (d.user_id, ident))
            await conn.execute(
                "DELETE FROM hrt_relations WHERE user_id = %s AND (source = %s OR target = %s)",
                (d.user_id, ident, ident),
            )
            await self._event(conn, d.user_id, "delete_entity", {"id": ident, "kind": d.kind}, 0)
            return 1
        if d.kind == "relation":
            if d.type is None or d.source is None or d.target is None:
                raise InvalidInput("a delete of a relation needs type, source and target", field="type")
            cur = await conn.execute(
                "DELETE FROM hrt_relations WHERE user_id = %s AND source = %s AND target = %s AND type = %s",
                (d.user_id, d.source, d.target, d.type.value),
            )
            if cur.rowcount:
                await self._event(
                    conn,
                    d.user_id,
                    "delete_relation",
                    {"source": d.source, "target": d.target, "type": d.type.value},
                    0,
                )
            return cur.rowcount
        if d.target_kind is None or d.target is None:
            raise InvalidInput("a delete of a preference needs target_kind and target", field="target_kind")
        cur = await conn.execute(
            "DELETE FROM hrt_preferences WHERE user_id = %s AND target_kind = %s AND target = %s",
            (d.user_id, d.target_kind, d.target),
        )
        return cur.rowcount

    async def delete_user(self, user_id: str) -> int:
        async with self.connection("delete_user") as conn, conn.transaction():
            cur = await conn.execute("DELETE FROM hrt_entities WHERE user_id = %s", (user_id,))
            n = cur.rowcount
            await conn.execute("DELETE FROM hrt_relations WHERE user_id = %s", (user_id,))
            await conn.execute("DELETE FROM hrt_preferences WHERE user_id = %s", (user_id,))
            await conn.execute("DELETE FROM hrt_extraction_state WHERE user_id = %s", (user_id,))
            await self._event(conn, user_id, "delete_user", {}, 0)
        return int(n)


async def _stored_kinds(conn: psycopg.AsyncConnection[Any], user_id: str, ids: Sequence[str]) -> dict[str, str]:
    """id -> kind of those of ``ids`` that ``user_id`` has, as this transaction sees them."""
    cur = await conn.execute("SELECT id, kind FROM hrt_entities WHERE user_id = %s AND id = ANY(%s)", (user_id, ids))
    return {ident: kind for ident, kind in await cur.fetchall()}
