"""RecordStore over PostgreSQL (psycopg 3, async pool): the source of truth of the services
deployment, with the transactional outbox that feeds the graph and vector projections.

A write batch commits its records and one outbox row per change in one transaction. Entity keys
are written in sorted order so concurrent batches over overlapping ids lock rows in the same
order; a deadlock or serialisation failure retries the whole batch. Every statement is
parameterised and filters on ``user_id``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext, suppress
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from hrt.auth import KeyRecord
from hrt.errors import Conflict, InvalidInput, StoreError, StoreUnavailable
from hrt.metadata_filter import Tree as MetadataTree
from hrt.metadata_filter import postgres_where
from hrt.records import (
    EDGE_ENDPOINTS,
    ENTITY_MODELS,
    Deletion,
    Entity,
    Kind,
    Preference,
    Relation,
    entity_ts,
    title_key,
    valid_from,
)
from hrt.stores.base import WARM_UP_USER, BrowseFilter, EntityDetail, EntityRow, StoredEntity, WriteBatch, WriteResult
from hrt.stores.postgres import browse as postgres_browse
from hrt.stores.postgres import reembed as postgres_reembed
from hrt.stores.postgres.errors import translate_errors
from hrt.stores.postgres.keys import _KEY_COLUMNS, _key, _keys_table
from hrt.stores.postgres.outbox import LEASE_CLASS, LEASE_KEYS, PostgresOutboxLease
from hrt.stores.postgres.rows import _columns, _entity_rows, _last_per_key, _relation_rows
from hrt.stores.postgres.state import _check_state, _write_state
from hrt.stores.projection import (
    RELATION_COLUMNS,
    passage_bytes,
    relation_from_row,
    seconds,
    vector_bytes,
)

if TYPE_CHECKING:
    from hrt.stores.circuit import StoreCircuit
    from hrt.stores.postgres.export import PostgresExportReader

log = logging.getLogger(__name__)

RETRIES = 5


class _PoolReconnects(logging.Filter):
    """psycopg's pool logs a warning per failed reconnection attempt (and per dead connection it
    drops) while PostgreSQL is down; behind a circuit, the circuit's two lines (opened, closed) say
    it instead."""

    NOISE = ("error connecting in ", "discarding closed connection")

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.WARNING and str(record.msg).startswith(self.NOISE))


_POOL_RECONNECTS = _PoolReconnects()


def quiet_pool_reconnects() -> None:
    """Install :class:`_PoolReconnects` on psycopg's pool logger (once; a server's stores)."""
    logger = logging.getLogger("psycopg.pool")
    if _POOL_RECONNECTS not in logger.filters:
        logger.addFilter(_POOL_RECONNECTS)


class PostgresRecordStore:
    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 4,
        timeout: float = 10.0,
        embedder: tuple[int, str] | None = None,
    ) -> None:
        """``embedder``: the (dimension, model id) of the vectors this process writes and reads;
        the store refuses another model's (:mod:`hrt.stores.vector_meta`), checked by ``apply_schema``."""
        self._dsn = dsn
        self._embedder = embedder
        self._timeout = timeout
        self._connecting = False  # open(keep_trying=True) failed: the pool connects in the background
        self._sizes = (min_size, max_size)
        # set by the composition root for a server (hrt.stores.factory): every connection's block
        # runs under it, so a PostgreSQL that is down is refused at once (503), not after the pool's timeout
        self.circuit: StoreCircuit | None = None
        self.pool = self._request_pool()
        # a lease holds its connection across the projector's write to Neo4j or Weaviate: the
        # leases get connections of their own (one per target, one more for `hrt doctor --repair`),
        # so a slow target never holds the connections that requests read with; none until used
        self.lease_pool = self._lease_pool()
        self._renewing: set[asyncio.Future[None]] = set()
        self._swap: asyncio.Future[None] | None = None  # the pools being renewed (_renew_pools)
        self._stale_pools: list[AsyncConnectionPool] = []  # replaced by _renew_pools, closed after

    def attach(self, circuit: StoreCircuit) -> None:
        """Run every connection's block under ``circuit``; when it closes, renew the pools."""
        self.circuit = circuit
        circuit.on_close.append(self._renew_soon)

    def _renew_soon(self) -> None:
        self._swap = self._in_background(self._renew_pools())

    def _in_background(self, work: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
        """A task held until it ends (and cancelled by :meth:`close`)."""
        task = asyncio.ensure_future(work)
        self._renewing.add(task)
        task.add_done_callback(self._renewing.discard)
        return task

    async def _renew_pools(self) -> None:
        """PostgreSQL answers again: fresh pools, connecting now. The old ones retry with a growing
        backoff (up to seconds after an outage of ten) during which a request would wait for
        them: a request that comes once the circuit has closed waits for this swap (it only starts
        the new pools' connections, :meth:`_current_pools`); one that took an old pool before
        the circuit closed keeps it (its pool's timeout still bounds it), and the old pools are
        closed after that timeout."""
        if self.pool.closed:  # not opened yet, or closing: nothing to renew
            return
        pool, lease_pool = self._request_pool(), self._lease_pool()
        await pool.open(wait=False)
        await lease_pool.open(wait=False)
        self._stale_pools += [self.pool, self.lease_pool]
        self.pool, self.lease_pool = pool, lease_pool
        self._in_background(self._close_stale_later())

    async def _close_stale_later(self) -> None:
        await asyncio.sleep(self._timeout)
        await self._close_stale_pools()

    async def _current_pools(self) -> None:
        """Wait for a pool swap in progress (the circuit has just closed): never take a pool
        that is being replaced."""
        swap = self._swap
        if swap is not None and not swap.done():
            with suppress(Exception):
                await asyncio.shield(swap)

    async def _close_stale_pools(self) -> None:
        stale, self._stale_pools = self._stale_pools, []
        for pool in stale:
            with suppress(Exception):
                await pool.close(timeout=1.0)

    def _lease_pool(self) -> AsyncConnectionPool:
        return AsyncConnectionPool(
            self._dsn,
            min_size=0,
            max_size=3,
            open=False,
            timeout=self._timeout,
            kwargs={"autocommit": False},
            check=AsyncConnectionPool.check_connection,
            name="hrt-outbox-leases",
        )

    def _request_pool(self) -> AsyncConnectionPool:
        return AsyncConnectionPool(
            self._dsn,
            min_size=self._sizes[0],
            max_size=self._sizes[1],
            open=False,
            timeout=self._timeout,
            kwargs={"autocommit": False},
            check=AsyncConnectionPool.check_connection,
            name="hrt-records",
        )

    async def open(self, *, keep_trying: bool = False) -> None:
        """Open the pools, waiting until PostgreSQL answers (StoreUnavailable after the timeout).
        ``keep_trying`` (a server starting while PostgreSQL is down): the pool stays open after
        that error and keeps connecting in the background, so the store serves once PostgreSQL is
        back, without a restart; until then every call fails as StoreUnavailable, and so does
        ``open`` again, which succeeds once PostgreSQL answers."""
        try:
            await self._open(keep_trying)
        except StoreUnavailable as exc:  # not raced by the circuit: a pool's open must end by itself
            if self.circuit is not None and exc.store == self.circuit.store:
                self.circuit.trip(exc.message)
            raise

    async def _open(self, keep_trying: bool) -> None:
        if self._connecting:  # a pool left connecting in the background by an earlier open
            await self.ping()
            self._connecting = False
            await self._warn_if_superuser()
            return
        try:
            with translate_errors("connect"):
                await self.pool.open(wait=True, timeout=self._timeout)
        except StoreUnavailable:
            if keep_trying:  # a pool that timed out is closed for good: a new one, not waited for
                self.pool = self._request_pool()
                await self.pool.open(wait=False)
                await self.lease_pool.open(wait=False)
                self._connecting = True
            raise
        await self.lease_pool.open(wait=False)
        await self._warn_if_superuser()

    async def _warn_if_superuser(self) -> None:
        """A warning, not a refusal (deployments made that way keep working): HRT needs a role
        that owns its database, nothing more, and a superuser's DSN hands whoever gets it (a flaw
        in HRT, a leaked setting) the whole server, its files and programs included
        (docs/security.md)."""
        async with self.reading("role check") as conn:
            cur = await conn.execute("SELECT current_user, rolsuper FROM pg_roles WHERE rolname = current_user")
            row = await cur.fetchone()
        if row is not None and row[1]:
            log.warning(
                "HRT_POSTGRES_DSN connects as %s, a PostgreSQL superuser: connect as a role that owns HRT's "
                "database and nothing more (docs/deployment.md, 'The PostgreSQL role')",
                row[0],
            )

    async def close(self) -> None:
        if self.circuit is not None:
            await self.circuit.close()
        for task in list(self._renewing):
            task.cancel()
            with suppress(BaseException):
                await task
        await self._close_stale_pools()
        await self.lease_pool.close()
        await self.pool.close()

    async def ping(self) -> None:
        """Raise StoreUnavailable unless PostgreSQL answers a read of the records (a user no
        record can carry: it finds nothing)."""
        await self.user_exists(WARM_UP_USER)

    async def probe(self) -> None:
        """The circuit's probe: one connection of its own (never the pool's, which waits for its
        timeout while PostgreSQL is down) and ``SELECT 1``; StoreUnavailable when refused."""
        with translate_errors("ping"):
            conn = await psycopg.AsyncConnection.connect(self._dsn, connect_timeout=max(1, int(self._timeout)))
            try:
                await conn.execute("SELECT 1")
            finally:
                await conn.close()

    def _guarded(self, *, gate: bool = True) -> AbstractAsyncContextManager[None]:
        return self.circuit.guarding(gate=gate) if self.circuit is not None else nullcontext()

    async def apply_schema(self) -> None:
        """Nothing to migrate on start (``hrt migrate`` does, :mod:`hrt.stores.postgres.migrate`,
        under its own lock, before servers start); checks that the store's vectors are the embedder's."""
        if self._embedder is not None and self._embedder[1]:
            await postgres_reembed.check_store(self, *self._embedder)

    async def warm(self) -> None:
        """Nothing to prepare: PostgreSQL plans each statement as it comes."""

    @property
    def outbox(self) -> PostgresRecordStore:
        """Writes commit outbox rows with the records: this store is the projections' outbox."""
        return self

    @asynccontextmanager
    async def connection(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._guarded():
            await self._current_pools()
            with translate_errors(action):
                async with self.pool.connection() as conn:
                    yield conn

    @asynccontextmanager
    async def _leased_connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        async with self._guarded():
            await self._current_pools()
            with translate_errors("outbox lease"):
                async with self.lease_pool.connection() as conn:
                    yield conn

    @asynccontextmanager
    async def reading(self, action: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection for one read statement, in autocommit: no BEGIN and COMMIT round
        trips around it (a single SELECT is atomic either way). The pool's connections are
        transactional; the setting is a client-side flag, restored before the connection goes back."""
        async with self.connection(action) as conn:
            await conn.set_autocommit(True)
            try:
                yield conn
            finally:
                # fails only on a connection the pool then discards (closed, or mid-statement)
                with suppress(psycopg.Error):
                    await conn.set_autocommit(False)

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

    # ---------------------------------------------------------------------------------------
    # API keys (KeyStore, hrt/auth.py): the hrt_api_keys table of migration 0002
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


async def _stored_kinds(conn: psycopg.AsyncConnection[Any], user_id: str, ids: Sequence[str]) -> dict[str, str]:
    """id -> kind of those of ``ids`` that ``user_id`` has, as this transaction sees them."""
    cur = await conn.execute("SELECT id, kind FROM hrt_entities WHERE user_id = %s AND id = ANY(%s)", (user_id, ids))
    return {ident: kind for ident, kind in await cur.fetchall()}
