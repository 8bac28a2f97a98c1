"""RecordStore over the embedded SQLite file: the source of truth for entities and preferences."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import numpy as np

from hrt.auth import KeyRecord
from hrt.errors import Conflict
from hrt.metadata_filter import Tree as MetadataTree
from hrt.metadata_filter import sqlite_where
from hrt.records import ENTITY_MODELS, Entity, Kind, Preference, Relation
from hrt.stores.base import WARM_UP_USER, BrowseFilter, EntityDetail, EntityRow, StoredEntity
from hrt.stores.embedded import browse as embedded_browse
from hrt.stores.embedded.schema import EmbeddedPart, chunks
from hrt.stores.projection import RELATION_COLUMNS, passage_rows, relation_from_row

if TYPE_CHECKING:
    from hrt.stores.embedded.export import EmbeddedExportReader
    from hrt.stores.embedded.store import EmbeddedStore


KEY_COLUMNS = (
    "key_id, name, scopes, users, secret_hash, salt, created_at, expires_at, revoked_at, last_used_at, rate_limit, "
    "max_concurrency, parent"
)


class EmbeddedRecordStore(EmbeddedPart):
    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store

    async def ping(self) -> None:
        """Raise StoreUnavailable unless the file answers a read of the records (a user no record
        can carry: it finds nothing)."""
        await self.user_exists(WARM_UP_USER)

    @property
    def outbox(self) -> None:
        """None: records and projections are written in one SQLite transaction."""
        return None

    async def get_many(self, user_id: str, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]:
        kind = Kind(kind)
        model = ENTITY_MODELS[kind]
        out: dict[str, Entity] = {}
        with self._store.snapshot() as db:
            for chunk in chunks(sorted(set(ids)), 500):
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    f"SELECT id, data FROM entities WHERE user_id = ? AND kind = ? AND id IN ({marks})",
                    (user_id, kind.value, *chunk),
                ).fetchall()
                for ident, data in rows:
                    out[ident] = model.model_validate_json(data)
        return out

    async def state_get(self, user_id: str, ns: str, keys: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        with self._store.snapshot() as db:
            for chunk in chunks(sorted(set(keys)), 500):
                marks = ",".join("?" * len(chunk))
                out.update(
                    db.execute(
                        f"SELECT key, value FROM extraction_state WHERE user_id = ? AND ns = ? AND key IN ({marks})",
                        (user_id, ns, *chunk),
                    ).fetchall()
                )
        return out

    async def state_scan(self, user_id: str, ns: str, prefix: str) -> dict[str, str]:
        with self._store.snapshot() as db:
            return _state_range(db, user_id, ns, prefix)

    async def state_read(
        self, user_id: str, keys: Mapping[str, Sequence[str]], prefixes: Mapping[str, Sequence[str]]
    ) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        with self._store.snapshot() as db:
            for ns, wanted in keys.items():
                for chunk in chunks(sorted(set(wanted)), 500):
                    marks = ",".join("?" * len(chunk))
                    sql = f"SELECT key, value FROM extraction_state WHERE user_id = ? AND ns = ? AND key IN ({marks})"
                    out.setdefault(ns, {}).update(db.execute(sql, (user_id, ns, *chunk)).fetchall())
            for ns, starts in prefixes.items():
                for prefix in sorted(set(starts)):
                    out.setdefault(ns, {}).update(_state_range(db, user_id, ns, prefix))
        return out

    async def preferences(self, user_id: str) -> list[Preference]:
        with self._store.reading() as db:
            rows = db.execute(
                "SELECT target_kind, target, weight FROM preferences WHERE user_id = ? ORDER BY target_kind, target",
                (user_id,),
            ).fetchall()
        return [Preference(user_id=user_id, target_kind=tk, target=t, weight=w) for tk, t, w in rows]

    async def user_exists(self, user_id: str) -> bool:
        with self._store.reading() as db:
            row = db.execute("SELECT 1 FROM entities WHERE user_id = ? LIMIT 1", (user_id,)).fetchone()
        return row is not None

    async def counts(self, user_id: str) -> dict[str, int]:
        with self._store.snapshot() as db:
            rows = db.execute(
                "SELECT kind, count(*) FROM entities WHERE user_id = ? GROUP BY kind", (user_id,)
            ).fetchall()
            edges = db.execute("SELECT count(*) FROM edges WHERE user_id = ?", (user_id,)).fetchone()[0]
            prefs = db.execute("SELECT count(*) FROM preferences WHERE user_id = ?", (user_id,)).fetchone()[0]
        out = {k.value: 0 for k in Kind}
        out.update({kind: n for kind, n in rows})
        out["relation"] = int(edges)
        out["preference"] = int(prefs)
        return out

    async def entity_detail(self, user_id: str, kind: Kind, ident: str, relation_limit: int) -> EntityDetail | None:
        with self._store.snapshot() as db:
            return embedded_browse.entity_detail(db, user_id, Kind(kind), ident, relation_limit)

    async def browse(self, user_id: str, where: BrowseFilter) -> list[StoredEntity]:
        with self._store.reading() as db:
            return embedded_browse.browse(db, user_id, where)

    async def metadata_matches(self, user_id: str, ids: Sequence[str], where: MetadataTree) -> set[str]:
        cond, args = sqlite_where(where, "data")
        out: set[str] = set()
        with self._store.snapshot() as db:
            for chunk in chunks(sorted(set(ids)), 500):
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    "SELECT id FROM entities WHERE user_id = ? AND kind = 'memory_unit' "
                    f"AND id IN ({marks}) AND {cond}",
                    (user_id, *chunk, *args),
                ).fetchall()
                out.update(r[0] for r in rows)
        return out

    async def ids(self, user_id: str) -> dict[str, str]:
        with self._store.reading() as db:
            rows = db.execute("SELECT id, kind FROM entities WHERE user_id = ?", (user_id,)).fetchall()
        return {i: k for i, k in rows}

    async def users(self) -> list[str]:
        with self._store.reading() as db:
            rows = db.execute("SELECT DISTINCT user_id FROM entities ORDER BY user_id").fetchall()
        return [r[0] for r in rows]

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]:
        out: dict[str, EntityRow] = {}
        with self._store.snapshot() as db:
            for chunk in chunks(sorted(set(ids)), 500):
                marks = ",".join("?" * len(chunk))
                rows = db.execute(
                    "SELECT e.id, e.kind, e.data, e.version, d.vec, d.passages FROM entities e JOIN docs d "
                    f"ON d.user_id = e.user_id AND d.id = e.id WHERE e.user_id = ? AND e.id IN ({marks})",
                    (user_id, *chunk),
                ).fetchall()
                for ident, kind, data, version, vec, passages in rows:
                    entity = ENTITY_MODELS[Kind(kind)].model_validate_json(data)
                    own = np.frombuffer(vec, dtype=np.float32)
                    out[ident] = (entity, own, int(version), passage_rows(passages, len(own)))
        return out

    async def all_relations(self, user_id: str) -> list[Relation]:
        """The relations are the rows of ``edges`` (written with them, in one transaction)."""
        with self._store.reading() as db:
            rows = db.execute(
                f"SELECT {RELATION_COLUMNS} FROM edges WHERE user_id = ? ORDER BY source, target, type",
                (user_id,),
            ).fetchall()
        return [relation_from_row(user_id, row) for row in rows]

    async def relations_of(self, user_id: str, ids: Sequence[str]) -> list[Relation]:
        """Both directions, by the primary key (source) and ``edges_target`` (target)."""
        if not ids:
            return []
        marks = ", ".join("?" * len(ids))
        with self._store.reading() as db:
            rows = db.execute(
                f"SELECT {RELATION_COLUMNS} FROM edges WHERE user_id = ? AND source IN ({marks}) "
                f"UNION SELECT {RELATION_COLUMNS} FROM edges WHERE user_id = ? AND target IN ({marks}) "
                "ORDER BY source, target, type",
                (user_id, *ids, user_id, *ids),
            ).fetchall()
        return [relation_from_row(user_id, row) for row in rows]

    # ---------------------------------------------------------------------------------------
    # export (hrt.export, hrt.stores.embedded.export)
    # ---------------------------------------------------------------------------------------

    @asynccontextmanager
    async def export_reader(self, user_id: str) -> AsyncIterator[EmbeddedExportReader]:
        from hrt.stores.embedded.export import EmbeddedExportReader

        reader = EmbeddedExportReader(self._store, user_id)
        await asyncio.to_thread(reader.begin)
        try:
            yield reader
        finally:
            await asyncio.to_thread(reader.end)

    # ---------------------------------------------------------------------------------------
    # API keys (KeyStore)
    # ---------------------------------------------------------------------------------------

    async def create_key(self, key: KeyRecord) -> None:
        try:
            with self._store.transaction() as db:
                db.execute(
                    f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    tuple(json.dumps(v) if isinstance(v, list) else v for v in key.columns()),
                )
        except sqlite3.IntegrityError as exc:
            raise Conflict(
                f"a key named {key.name!r} exists; revoke it first or choose another name", field="name"
            ) from exc

    async def keys(self) -> list[KeyRecord]:
        with self._store.reading() as db:
            rows = db.execute(f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY created_at, name, key_id").fetchall()
        return [
            KeyRecord(
                key_id=r[0],
                name=r[1],
                scopes=tuple(json.loads(r[2])),
                users=tuple(json.loads(r[3])) if r[3] is not None else None,
                secret_hash=bytes(r[4]),
                salt=bytes(r[5]),
                created_at=r[6],
                expires_at=r[7],
                revoked_at=r[8],
                last_used_at=r[9],
                rate_limit=r[10],
                max_concurrency=r[11],
                parent=r[12],
            )
            for r in rows
        ]

    async def revoke_key(self, key_id: str, at: float) -> KeyRecord | None:
        with self._store.transaction() as db:
            done = db.execute(
                "UPDATE api_keys SET revoked_at = ? WHERE key_id = ? AND revoked_at IS NULL", (at, key_id)
            ).rowcount
        if not done:
            return None
        return next(k for k in await self.keys() if k.key_id == key_id)

    async def rehash_key(self, key_id: str, old_hash: bytes, new_hash: bytes) -> None:
        with self._store.transaction() as db:
            db.execute(
                "UPDATE api_keys SET secret_hash = ?, salt = ? WHERE key_id = ? AND secret_hash = ?",
                (new_hash, b"", key_id, old_hash),
            )

    async def touch_keys(self, used: Mapping[str, float]) -> None:
        # a write transaction (the write lock, a commit): off the event loop
        await asyncio.to_thread(self._touch_keys, dict(used))

    def _touch_keys(self, used: Mapping[str, float]) -> None:
        with self._store.transaction() as db:
            db.executemany(
                "UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE key_id = ?",
                [(at, key_id) for key_id, at in sorted(used.items())],
            )


def _state_range(db: sqlite3.Connection, user_id: str, ns: str, prefix: str) -> dict[str, str]:
    """The rows of a namespace whose key starts with ``prefix``: SQLite compares TEXT byte-wise
    (BINARY), so they are one key range."""
    rows = db.execute(
        "SELECT key, value FROM extraction_state WHERE user_id = ? AND ns = ? AND key >= ? AND key < ? ORDER BY key",
        (user_id, ns, prefix, prefix + "\U0010ffff"),
    ).fetchall()
    return dict(rows)
