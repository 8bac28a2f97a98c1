"""The embedded deployment: one SQLite file holding records, the graph projection and the lexical
index, with vectors stored as BLOBs and served from an in-memory numpy matrix per user.

Everything a write touches (records, nodes, edges, vectors, FTS rows) commits in one SQLite
transaction, so the three embedded "stores" can never drift apart. In-memory caches (adjacency
lists, vector matrices) are per user; after a write commits, still under the write lock, the loaded
caches of the users it touched take what it changed (a new snapshot from the previous one, in time
proportional to the write) before the write returns, and are built afresh in the background once
they gathered many writes (:mod:`hrt.stores.user_cache`).

One connection writes, under :attr:`EmbeddedStore.lock`; reads go through :meth:`EmbeddedStore.reading`,
a connection per thread (WAL lets them read beside the writer), so a read on the event loop never
waits for a write transaction or for a worker thread streaming a user's rows.

Schema changes are numbered below and applied by :meth:`EmbeddedStore.migrate` (``hrt migrate``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from hrt.errors import Conflict, InvalidInput, StateChanged, StoreError, StoreUnavailable
from hrt.records import (
    EDGE_ENDPOINTS,
    Entity,
    Kind,
    title_key,
)
from hrt.stores import vector_meta
from hrt.stores.ann import AnnConfig
from hrt.stores.base import WriteBatch, WriteResult
from hrt.stores.embedded.graph import EmbeddedGraphStore
from hrt.stores.embedded.lock import StoreClaim
from hrt.stores.embedded.records import EmbeddedRecordStore
from hrt.stores.embedded.schema import (
    BUSY_TIMEOUT_MS,
    EDGE_COLUMNS,
    NODE_COLUMNS,
    SCHEMA,
    Changes,
    edge_row,
    node_row,
    write_doc,
)
from hrt.stores.embedded.vectors import EmbeddedVectorIndex
from hrt.stores.projection import graph_edge, graph_node, vector_doc

log = logging.getLogger(__name__)


def private_files(path: Path) -> None:
    """The store holds every memory and the key table: its file is made 0600 (SQLite gives its -wal
    and -shm the file's mode) and ``<db>.ann/`` 0700, before SQLite would make them with the umask's
    0644. A file that exists already keeps its mode, with a warning when other users may read it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    ann = path.with_name(path.name + ".ann")
    for existing in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm"), ann):
        try:
            mode = existing.stat().st_mode
        except FileNotFoundError:
            continue
        if mode & 0o077:
            log.warning(
                "%s is readable by other local users (mode %o): it holds every memory and the API keys; "
                "`chmod go-rwx` it",
                existing,
                mode & 0o777,
            )
    if not path.exists():
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
    ann.mkdir(mode=0o700, exist_ok=True)


class EmbeddedStore:
    """Owns the SQLite connection; its three adapters implement the ports over it."""

    def __init__(
        self, path: Path | str, dim: int | None, ann: AnnConfig | None = None, model_id: str | None = None
    ) -> None:
        """``dim`` and ``model_id`` are the embedder's (:mod:`hrt.stores.vector_meta`: the store
        refuses another model's); ``dim`` None opens the store for schema work only, ``model_id``
        None checks the dimension alone. ``ann`` configures the approximate vector search of large
        users (:mod:`hrt.stores.ann`)."""
        self.path = Path(path)
        self.dim = dim or 0
        self.lock = threading.RLock()  # the write connection's, held by writes and transactions
        self._in_memory = str(path) == ":memory:"  # one connection only: reads share the writer's
        self._local = threading.local()
        self._readers: list[tuple[sqlite3.Connection, threading.RLock]] = []  # per thread, with its in-use lock
        self._readers_lock = threading.Lock()
        self._closed = False
        self._claim: StoreClaim | None = None  # this process's claim to write the file
        try:
            if not self._in_memory:
                private_files(self.path)
            self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=OFF")
            self.db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        except (sqlite3.Error, OSError) as exc:
            raise StoreUnavailable(
                f"cannot open the embedded store at {path}: {exc}", store="the embedded store"
            ) from exc
        self.applied_on_open = self.migrate()
        if dim is not None:
            self._check_vectors(model_id)
        self.records = EmbeddedRecordStore(self)
        self.graph = EmbeddedGraphStore(self)
        self.vectors = EmbeddedVectorIndex(self, ann)

    # ---------------------------------------------------------------------------------------
    # schema
    # ---------------------------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply pending schema steps; returns the versions applied (none when up to date)."""
        with self.lock:
            self.db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT)"
            )
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            done = {row[0] for row in self.db.execute("SELECT version FROM schema_migrations")}
            applied = []
            for version, sql in SCHEMA:
                if version in done:
                    continue
                with self.transaction():
                    for statement in sql.split(";"):
                        if statement.strip():
                            self.db.execute(statement)
                    self.db.execute("INSERT INTO schema_migrations VALUES (?, datetime('now'))", (version,))
                applied.append(version)
            return applied

    def schema_versions(self) -> list[int]:
        """The schema steps applied to the file, in order (``hrt migrate`` reports them)."""
        with self.lock:
            return [r[0] for r in self.db.execute("SELECT version FROM schema_migrations ORDER BY version")]

    def largest_users(self, limit: int) -> list[str]:
        """The users with the most entities (graph nodes), most first, then by id."""
        with self.reading() as db:
            rows = db.execute(
                "SELECT user_id FROM nodes GROUP BY user_id ORDER BY count(*) DESC, user_id LIMIT ?", (limit,)
            ).fetchall()
        return [r[0] for r in rows]

    def _check_vectors(self, model_id: str | None) -> None:
        """Refuse another model's vectors (:mod:`hrt.stores.vector_meta`); without ``model_id``
        (schema work), the dimension alone."""
        try:
            meta = self.vector_meta()
            if model_id:
                has_vectors = self.db.execute("SELECT 1 FROM docs LIMIT 1").fetchone() is not None
                record = vector_meta.check(meta, self.dim, model_id, f"the store at {self.path}", has_vectors)
            else:
                dim_only = {k: v for k, v in meta.items() if k == vector_meta.DIM_KEY}
                record = vector_meta.check(dim_only, self.dim, "", f"the store at {self.path}")
                record.pop(vector_meta.MODEL_KEY, None)
            self.set_vector_meta(record)
        except BaseException:
            self.db.close()
            raise

    def vector_meta(self) -> dict[str, str]:
        """The vector keys of ``meta`` (:mod:`hrt.stores.vector_meta`)."""
        marks = ",".join("?" * len(vector_meta.KEYS))
        with self.lock:
            return dict(self.db.execute(f"SELECT key, value FROM meta WHERE key IN ({marks})", vector_meta.KEYS))

    def set_vector_meta(self, values: Mapping[str, str | None], db: sqlite3.Connection | None = None) -> None:
        """Set (None: remove) vector keys of ``meta``, in the caller's transaction when ``db`` is given."""
        with self.lock if db is None else contextlib.nullcontext():
            conn = db or self.db
            for key, value in values.items():
                if value is None:
                    conn.execute("DELETE FROM meta WHERE key = ?", (key,))
                else:
                    conn.execute(
                        "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (key, value),
                    )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self.lock:
            if self.db.in_transaction:
                yield self.db
                return
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """This thread's read connection: reads never take :attr:`lock`, so none waits for a write
        transaction (WAL gives each statement the last committed state) or for another thread's
        read. An in-memory store has one connection, shared under the lock."""
        if self._in_memory:
            with self.lock:
                yield self.db
            return
        reader: tuple[sqlite3.Connection, threading.RLock] | None = getattr(self._local, "reader", None)
        if reader is None:
            with self._readers_lock:
                if self._closed:
                    raise StoreUnavailable("the embedded store is closed", store="the embedded store")
                try:
                    conn = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
                    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                    conn.execute("PRAGMA query_only=ON")
                except sqlite3.Error as exc:
                    raise StoreUnavailable(
                        f"cannot open the embedded store at {self.path}: {exc}", store="the embedded store"
                    ) from exc
                reader = (conn, threading.RLock())
                self._readers.append(reader)
            self._local.reader = reader
        conn, in_use = reader
        # held only by this thread (and by close(), which waits for the read in progress rather
        # than close a connection under it): never contended while the store is open
        with in_use:
            if self._closed:
                raise StoreUnavailable("the embedded store is closed", store="the embedded store")
            yield conn

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """:meth:`reading` inside one read transaction: every statement sees one committed state."""
        with self.reading() as db:
            if db.in_transaction:
                yield db
                return
            db.execute("BEGIN")
            try:
                yield db
            finally:
                db.execute("COMMIT")

    def claim(self, purpose: str) -> None:
        """Hold the file for this process's writes, or raise :class:`StoreInUse` naming the
        process that holds it (:mod:`hrt.stores.embedded.lock`). Idempotent."""
        if self._claim is None and not self._in_memory:
            self._claim = StoreClaim.acquire(self.path, purpose)

    def close(self) -> None:
        if self._claim is not None:
            self._claim.release()
            self._claim = None
        with self._readers_lock:
            self._closed = True
            readers, self._readers = self._readers, []
        for conn, in_use in readers:
            with in_use:  # a read in progress (a cache loading in a worker thread) finishes first
                conn.close()
        with self.lock:
            self.db.close()

    # ---------------------------------------------------------------------------------------
    # writes
    # ---------------------------------------------------------------------------------------

    def apply(self, batch: WriteBatch) -> WriteResult:
        """Validate and write one batch in one transaction; nothing of it is written on error."""
        self.claim(writer_purpose())
        touched: dict[str, Changes] = {}
        upserted = deleted = 0

        def of(user_id: str) -> Changes:
            return touched.setdefault(user_id, Changes())

        try:
            with self.lock:
                with self.transaction() as db:
                    check_state(db, batch)
                    self._check_kinds(db, batch)
                    for entity in batch.entities:
                        vector = batch.vectors.get((entity.user_id, entity.id))
                        if vector is None:
                            raise StoreError(f"no vector was computed for {entity.user_id}/{entity.id}")
                        self._upsert_entity(
                            db,
                            entity,
                            vector,
                            batch.passages.get((entity.user_id, entity.id)),
                            (batch.written_at, batch.written_by),
                        )
                        of(entity.user_id).nodes.add(entity.id)
                        upserted += 1
                    self._check_edges(db, batch)
                    for rel in batch.relations:
                        edge = graph_edge(rel)
                        db.execute(
                            f"INSERT INTO edges ({EDGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                            "ON CONFLICT (user_id, source, target, type) DO UPDATE SET weight = excluded.weight, "
                            "relation_type = excluded.relation_type, valid_from = excluded.valid_from, "
                            "valid_to = excluded.valid_to",
                            (*edge_row(rel.user_id, edge),),
                        )
                        of(rel.user_id).edges.add((rel.source, rel.target, rel.type.value))
                        upserted += 1
                    for pref in batch.preferences:
                        db.execute(
                            "INSERT INTO preferences VALUES (?, ?, ?, ?) ON CONFLICT (user_id, target_kind, target) "
                            "DO UPDATE SET weight = excluded.weight",
                            (pref.user_id, pref.target_kind, pref.target, pref.weight),
                        )
                        of(pref.user_id)
                        upserted += 1
                    for d in batch.deletions:
                        deleted += self._delete(db, d)
                        changes = of(d.user_id)
                        if d.kind == "relation" and d.type is not None and d.source and d.target:
                            changes.edges.add((d.source, d.target, d.type.value))
                        elif d.kind in ("memory_unit", "concept", "artifact") and (ident := d.entity_id()):
                            changes.nodes.add(ident)
                    write_state(db, batch)
                # still under the write lock, so caches take writes in commit order, each whole
                self.update(touched)
        except sqlite3.Error as exc:
            raise StoreError(f"embedded store write failed: {exc}", store="the embedded store") from exc
        return WriteResult(upserted=upserted, deleted=deleted)

    def update(self, changes: dict[str, Changes]) -> None:
        """After a commit, under the write lock: the loaded caches of the users written take the
        changes at once (milliseconds, whatever a user's size; :meth:`UserCache.update`), so the
        writer's next read and every later one see the write, and no read rebuilds a cache."""
        for user_id in sorted(changes):
            change = changes[user_id]
            if change.nodes or change.edges:
                self.graph.update(user_id, change)
            if change.nodes:
                self.vectors.update(user_id, change.nodes)

    def _check_kinds(self, db: sqlite3.Connection, batch: WriteBatch) -> None:
        """An id names one entity of one kind per user, in the store and within the batch."""
        seen: dict[tuple[str, str], Kind] = {}
        for entity in batch.entities:
            key = (entity.user_id, entity.id)
            kind = Kind(entity.kind)
            if seen.setdefault(key, kind) != kind:
                raise Conflict(f"id {entity.id!r} is given as both {seen[key]} and {kind}", field="id")
        for (user_id, ident), kind in seen.items():
            row = db.execute("SELECT kind FROM entities WHERE user_id = ? AND id = ?", (user_id, ident)).fetchone()
            if row is not None and row[0] != kind.value:
                raise Conflict(f"id {ident!r} already names a {row[0]} of user {user_id!r}", field="id")

    def _check_edges(self, db: sqlite3.Connection, batch: WriteBatch) -> None:
        for rel in batch.relations:
            allowed_src, allowed_dst = EDGE_ENDPOINTS[rel.type]
            for end, ident, allowed in (("source", rel.source, allowed_src), ("target", rel.target, allowed_dst)):
                row = db.execute(
                    "SELECT kind FROM entities WHERE user_id = ? AND id = ?", (rel.user_id, ident)
                ).fetchone()
                if row is None:
                    raise InvalidInput(
                        f"{rel.type.value} {end} {ident!r} is not an entity of user {rel.user_id!r}", field=end
                    )
                if Kind(row[0]) not in allowed:
                    raise InvalidInput(
                        f"{rel.type.value} {end} must be {' or '.join(sorted(allowed))}, but {ident!r} is a {row[0]}",
                        field=end,
                    )

    def _upsert_entity(
        self,
        db: sqlite3.Connection,
        entity: Entity,
        vector: np.ndarray,
        passages: np.ndarray | None,
        written: tuple[float | None, str | None] = (None, None),
    ) -> None:
        data = entity.model_dump_json()
        kind = Kind(entity.kind)
        node = graph_node(entity)
        db.execute(
            "INSERT INTO entities (user_id, id, kind, data, version, written_at, written_by, title_key) "
            "VALUES (?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT (user_id, id) DO UPDATE SET data = excluded.data, "
            "version = version + 1, written_at = excluded.written_at, written_by = excluded.written_by, "
            "title_key = excluded.title_key",
            (entity.user_id, entity.id, kind.value, data, written[0], written[1], title_key(entity)),
        )
        db.execute(
            f"INSERT OR REPLACE INTO nodes ({NODE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            node_row(entity.user_id, node),
        )
        vec = np.ascontiguousarray(vector, dtype=np.float32)
        if vec.shape != (self.dim,):
            raise StoreError(f"vector for {entity.id!r} has shape {vec.shape}, expected ({self.dim},)")
        if passages is not None and (passages.ndim != 2 or passages.shape[1] != self.dim):
            raise StoreError(f"passages for {entity.id!r} have shape {passages.shape}, expected (k, {self.dim})")
        write_doc(db, entity.user_id, vector_doc(entity, vec, passages))

    def _delete(self, db: sqlite3.Connection, d: object) -> int:
        from hrt.records import Deletion

        assert isinstance(d, Deletion)
        if d.kind in ("memory_unit", "concept", "artifact"):
            ident = d.entity_id()
            if ident is None:
                raise InvalidInput("a delete of an entity needs its id (muid for memory units)", field="id")
            row = db.execute("SELECT kind FROM entities WHERE user_id = ? AND id = ?", (d.user_id, ident)).fetchone()
            if row is None:
                return 0
            if row[0] != d.kind:
                raise Conflict(f"{ident!r} is a {row[0]}, not a {d.kind}", field="kind")
            db.execute("DELETE FROM entities WHERE user_id = ? AND id = ?", (d.user_id, ident))
            db.execute("DELETE FROM nodes WHERE user_id = ? AND id = ?", (d.user_id, ident))
            db.execute("DELETE FROM edges WHERE user_id = ? AND (source = ? OR target = ?)", (d.user_id, ident, ident))
            doc = db.execute("SELECT rowid FROM docs WHERE user_id = ? AND id = ?", (d.user_id, ident)).fetchone()
            if doc is not None:
                db.execute("DELETE FROM fts WHERE rowid = ?", (doc[0],))
                db.execute("DELETE FROM docs WHERE rowid = ?", (doc[0],))
            return 1
        if d.kind == "relation":
            if d.type is None or d.source is None or d.target is None:
                raise InvalidInput("a delete of a relation needs type, source and target", field="type")
            cur = db.execute(
                "DELETE FROM edges WHERE user_id = ? AND source = ? AND target = ? AND type = ?",
                (d.user_id, d.source, d.target, d.type.value),
            )
            return cur.rowcount
        if d.target_kind is None or d.target is None:
            raise InvalidInput("a delete of a preference needs target_kind and target", field="target_kind")
        cur = db.execute(
            "DELETE FROM preferences WHERE user_id = ? AND target_kind = ? AND target = ?",
            (d.user_id, d.target_kind, d.target),
        )
        return cur.rowcount

    def delete_user(self, user_id: str) -> int:
        """Remove every record of one user from every table (the right to be forgotten)."""
        self.claim(writer_purpose())
        with self.transaction() as db:
            n = db.execute("SELECT count(*) FROM entities WHERE user_id = ?", (user_id,)).fetchone()[0]
            rowids = [r[0] for r in db.execute("SELECT rowid FROM docs WHERE user_id = ?", (user_id,))]
            db.executemany("DELETE FROM fts WHERE rowid = ?", [(r,) for r in rowids])
            for table in ("entities", "preferences", "nodes", "edges", "docs", "extraction_state"):
                db.execute(f"DELETE FROM {table} WHERE user_id = ?", (user_id,))
        self.graph.invalidate(user_id)
        self.vectors.invalidate(user_id)
        return int(n)


def check_state(db: sqlite3.Connection, batch: WriteBatch) -> None:
    """:attr:`WriteBatch.state_expect` holds in the transaction, or :class:`StateChanged`."""
    for (user_id, ns, key), expected in sorted(batch.state_expect.items()):
        row = db.execute(
            "SELECT value FROM extraction_state WHERE user_id = ? AND ns = ? AND key = ?", (user_id, ns, key)
        ).fetchone()
        if (row[0] if row is not None else None) != expected:
            raise StateChanged(f"the extraction statistics of user {user_id!r} changed meanwhile", field="user_id")


def write_state(db: sqlite3.Connection, batch: WriteBatch) -> None:
    rows = sorted(batch.state.items())
    db.executemany(
        "DELETE FROM extraction_state WHERE user_id = ? AND ns = ? AND key = ?",
        [k for k, v in rows if v is None],
    )
    db.executemany(
        "INSERT INTO extraction_state VALUES (?, ?, ?, ?) ON CONFLICT (user_id, ns, key) "
        "DO UPDATE SET value = excluded.value",
        [(*k, v) for k, v in rows if v is not None],
    )


def writer_purpose() -> str:
    """What a process that writes without serving is, for the refusal of another writer."""
    args = [Path(sys.argv[0]).name if sys.argv else "python", *sys.argv[1:2]]
    if args[0] in ("cli.py", "__main__.py"):
        args[0] = "hrt"
    return "writes: " + " ".join(args)
