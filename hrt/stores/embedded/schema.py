"""The embedded file's schema and the row helpers its three adapters share: numbered schema steps
(applied by :meth:`hrt.stores.embedded.store.EmbeddedStore.migrate`), the column lists, the codes of
kinds, the lexical index's user scope token, and how nodes, edges and documents become rows."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field

from hrt.records import Kind
from hrt.stores.base import GraphEdge, GraphNode, VectorDoc
from hrt.stores.projection import passage_bytes, vector_bytes

SCHEMA: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE entities (
            user_id TEXT NOT NULL, id TEXT NOT NULL, kind TEXT NOT NULL,
            data TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 1,
            PRIMARY KEY (user_id, id)
        ) WITHOUT ROWID;
        CREATE INDEX entities_kind ON entities (user_id, kind);
        CREATE TABLE preferences (
            user_id TEXT NOT NULL, target_kind TEXT NOT NULL, target TEXT NOT NULL, weight REAL NOT NULL,
            PRIMARY KEY (user_id, target_kind, target)
        ) WITHOUT ROWID;
        CREATE TABLE nodes (
            user_id TEXT NOT NULL, id TEXT NOT NULL, kind TEXT NOT NULL, label TEXT NOT NULL,
            ts REAL, salience REAL NOT NULL, category TEXT NOT NULL, tags TEXT NOT NULL,
            source_agent_id TEXT,
            PRIMARY KEY (user_id, id)
        ) WITHOUT ROWID;
        CREATE TABLE edges (
            user_id TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL, type TEXT NOT NULL,
            weight REAL NOT NULL, relation_type TEXT,
            PRIMARY KEY (user_id, source, target, type)
        ) WITHOUT ROWID;
        CREATE INDEX edges_target ON edges (user_id, target);
        CREATE TABLE docs (
            rowid INTEGER PRIMARY KEY, user_id TEXT NOT NULL, id TEXT NOT NULL, kind TEXT NOT NULL,
            ts REAL, vec BLOB NOT NULL,
            UNIQUE (user_id, id)
        );
        CREATE VIRTUAL TABLE fts USING fts5(text, scope, tokenize = 'porter unicode61');
        """,
    ),
    (
        2,
        # API keys (hrt/auth/): only an scrypt hash of each token; users NULL means every user.
        # A name is unique among unrevoked keys, so a revoked key's name can be given again.
        """
        CREATE TABLE api_keys (
            key_id TEXT PRIMARY KEY, name TEXT NOT NULL, scopes TEXT NOT NULL, users TEXT,
            secret_hash BLOB NOT NULL, salt BLOB NOT NULL, created_at REAL NOT NULL,
            expires_at REAL, revoked_at REAL, last_used_at REAL, rate_limit REAL, max_concurrency INTEGER
        );
        CREATE UNIQUE INDEX api_keys_live_name ON api_keys (name) WHERE revoked_at IS NULL;
        """,
    ),
    (
        3,
        # what search filters read (SearchFilter): a memory unit's tags (JSON) and writing agent on
        # its document, backfilled from the graph projection of the rows already stored
        """
        ALTER TABLE docs ADD COLUMN tags TEXT;
        ALTER TABLE docs ADD COLUMN source_agent_id TEXT;
        UPDATE docs SET
            tags = (SELECT n.tags FROM nodes n WHERE n.user_id = docs.user_id AND n.id = docs.id),
            source_agent_id = (SELECT n.source_agent_id FROM nodes n WHERE n.user_id = docs.user_id AND n.id = docs.id)
        WHERE kind = 'memory_unit';
        """,
    ),
    (
        4,
        # validity intervals (event time, epoch seconds; NULL is open) on nodes, edges and documents:
        # a memory unit's or artifact's starts at its ts unless its record says otherwise, so the
        # rows already stored start there (hrt.stores.projection.interval)
        """
        ALTER TABLE nodes ADD COLUMN valid_from REAL;
        ALTER TABLE nodes ADD COLUMN valid_to REAL;
        UPDATE nodes SET valid_from = ts WHERE ts IS NOT NULL;
        ALTER TABLE edges ADD COLUMN valid_from REAL;
        ALTER TABLE edges ADD COLUMN valid_to REAL;
        ALTER TABLE docs ADD COLUMN valid_from REAL;
        ALTER TABLE docs ADD COLUMN valid_to REAL;
        UPDATE docs SET valid_from = ts WHERE ts IS NOT NULL;
        """,
    ),
    (
        5,
        # a memory unit's passage vectors (hrt.records.passage_texts), (k, dim) float32 rows; NULL
        # for a document without passages, and for those written before: a re-ingest fills them
        """
        ALTER TABLE docs ADD COLUMN passages BLOB;
        """,
    ),
    (
        6,
        # API keys: the admin key that made a key over HTTP (NULL: the operator), and names
        # unique among the live keys of one parent, not across tenants. New keys store the SHA-256
        # of the token with an empty salt; a key with a salt keeps its scrypt hash until first used.
        """
        ALTER TABLE api_keys ADD COLUMN parent TEXT;
        DROP INDEX api_keys_live_name;
        CREATE UNIQUE INDEX api_keys_live_name ON api_keys (coalesce(parent, ''), name) WHERE revoked_at IS NULL;
        """,
    ),
    (
        7,
        # conversation memory: a user's extraction statistics, written with the records
        """
        CREATE TABLE extraction_state (
            user_id TEXT NOT NULL, ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
            PRIMARY KEY (user_id, ns, key)
        ) WITHOUT ROWID;
        """,
    ),
    (
        8,
        # reading and browsing entities: when and by which API key each was last written
        # (NULL for rows written before: unknown), and its lower-cased title or name
        # (hrt.records.title_key; backfilled with SQLite's lower, which folds ASCII only: a re-ingest
        # refreshes it) for prefix filters, indexed. Pages in id order come from the primary key, or
        # from entities_kind (user_id, kind) whose rows are in id order within a kind.
        """
        ALTER TABLE entities ADD COLUMN written_at REAL;
        ALTER TABLE entities ADD COLUMN written_by TEXT;
        ALTER TABLE entities ADD COLUMN title_key TEXT;
        UPDATE entities SET title_key = lower(coalesce(json_extract(data, '$.name'), json_extract(data, '$.title'),
            ''));
        CREATE INDEX entities_title ON entities (user_id, title_key);
        """,
    ),
]


NODE_COLUMNS = "user_id, id, kind, label, ts, salience, category, tags, source_agent_id, valid_from, valid_to"


EDGE_COLUMNS = "user_id, source, target, type, weight, relation_type, valid_from, valid_to"


# how long a connection waits for a lock another process holds (a checkpoint, a second writer)
BUSY_TIMEOUT_MS = 5_000


KIND_CODES: dict[Kind, int] = {Kind.MEMORY_UNIT: 0, Kind.CONCEPT: 1, Kind.ARTIFACT: 2}


KINDS_BY_CODE: list[Kind] = [Kind.MEMORY_UNIT, Kind.CONCEPT, Kind.ARTIFACT]


def user_scope_token(user_id: str) -> str:
    """The FTS token that scopes lexical matches to one user (checked again against user_id)."""
    return "u" + hashlib.sha256(user_id.encode()).hexdigest()[:20]


@dataclass
class Changes:
    """What one write changed of one user: entities written or deleted (``nodes``; a deleted
    one's edges went with it) and relations written or deleted (source, target, type)."""

    nodes: set[str] = field(default_factory=set)
    edges: set[tuple[str, str, str]] = field(default_factory=set)


class EmbeddedPart:
    """The lifecycle (:class:`hrt.stores.base.StoreLifecycle`) of the three embedded adapters: the
    :class:`EmbeddedStore` they share opens the file (and migrates it) when it is made and closes it
    itself, so opening, closing, applying a schema and warming an adapter have nothing to do."""

    async def open(self, *, keep_trying: bool = False) -> None:
        """Nothing to connect: the file was opened with the store."""

    async def close(self) -> None:
        """Nothing of its own to close: the service closes the shared :class:`EmbeddedStore`."""

    async def ping(self) -> None:
        """Nothing to reach: the records' ping reads the shared file."""

    async def apply_schema(self) -> None:
        """Nothing to apply: the store migrates the file on open (:meth:`EmbeddedStore.migrate`)."""

    async def warm(self) -> None:
        """No query plans to prepare; users' caches are loaded by ``preload`` (``HRT_PRELOAD_USERS``)."""


def write_doc(db: sqlite3.Connection, user_id: str, doc: VectorDoc) -> None:
    """Insert or replace one document of the vector index (its ``docs`` row and its FTS text),
    inside the caller's transaction."""
    vec = vector_bytes(doc.vector)
    passages = passage_bytes(doc.passages)
    tags = json.dumps(list(doc.tags)) if doc.kind is Kind.MEMORY_UNIT else None
    values = (doc.kind.value, doc.ts, vec, tags, doc.source_agent_id, doc.valid_from, doc.valid_to, passages)
    row = db.execute("SELECT rowid FROM docs WHERE user_id = ? AND id = ?", (user_id, doc.id)).fetchone()
    if row is None:
        rowid = db.execute(
            "INSERT INTO docs (rowid, user_id, id, kind, ts, vec, tags, source_agent_id, valid_from, valid_to, "
            "passages) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (next_rowid(db), user_id, doc.id, *values),
        ).lastrowid
    else:
        rowid = row[0]
        db.execute(
            "UPDATE docs SET kind = ?, ts = ?, vec = ?, tags = ?, source_agent_id = ?, valid_from = ?, "
            "valid_to = ?, passages = ? WHERE rowid = ?",
            (*values, rowid),
        )
        db.execute("DELETE FROM fts WHERE rowid = ?", (rowid,))
    db.execute("INSERT INTO fts (rowid, text, scope) VALUES (?, ?, ?)", (rowid, doc.text, user_scope_token(user_id)))


def next_rowid(db: sqlite3.Connection) -> int:
    """A new document's rowid: above every rowid ever given (SQLite alone gives the largest
    again after it is deleted), so a row's rowid names one document for good and new documents
    always come last in rowid order, where the loaded caches add them."""
    (largest,) = db.execute("SELECT max(rowid) FROM docs").fetchone()
    row = db.execute("SELECT value FROM meta WHERE key = 'docs_rowid_high'").fetchone()
    nxt = max(int(largest or 0), int(row[0]) if row else 0) + 1
    db.execute(
        "INSERT INTO meta VALUES ('docs_rowid_high', ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        (str(nxt),),
    )
    return nxt


def node_row(user_id: str, node: GraphNode) -> tuple[object, ...]:
    """A ``nodes`` row, in :data:`NODE_COLUMNS` order."""
    return (
        user_id,
        node.id,
        node.kind.value,
        node.label,
        node.ts,
        node.salience,
        node.category,
        json.dumps(sorted(node.tags)),
        node.source_agent_id,
        node.valid_from,
        node.valid_to,
    )


def edge_row(user_id: str, edge: GraphEdge) -> tuple[object, ...]:
    """An ``edges`` row, in :data:`EDGE_COLUMNS` order."""
    return (
        user_id,
        edge.source,
        edge.target,
        edge.type.value,
        edge.weight,
        edge.relation_type,
        edge.valid_from,
        edge.valid_to,
    )


def chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
