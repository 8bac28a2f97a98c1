"""RecordStore over the embedded SQLite file: the source of truth for entities and preferences."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from hrt.records import Entity, Kind, Preference
from hrt.stores.embedded import ENTITY_MODELS, chunks

if TYPE_CHECKING:
    from hrt.stores.embedded import EmbeddedStore


class EmbeddedRecordStore:
    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store

    async def get_many(self, user_id: str, kind: Kind, ids: Sequence[str]) -> dict[str, Entity]:
        kind = Kind(kind)
        model = ENTITY_MODELS[kind]
        out: dict[str, Entity] = {}
        with self._store.lock:
            for chunk in chunks(sorted(set(ids)), 500):
                marks = ",".join("?" * len(chunk))
                rows = self._store.db.execute(
                    f"SELECT id, data FROM entities WHERE user_id = ? AND kind = ? AND id IN ({marks})",
                    (user_id, kind.value, *chunk),
                ).fetchall()
                for ident, data in rows:
                    out[ident] = model.model_validate_json(data)
        return out

    async def preferences(self, user_id: str) -> list[Preference]:
        with self._store.lock:
            rows = self._store.db.execute(
                "SELECT target_kind, target, weight FROM preferences WHERE user_id = ? ORDER BY target_kind, target",
                (user_id,),
            ).fetchall()
        return [Preference(user_id=user_id, target_kind=tk, target=t, weight=w) for tk, t, w in rows]

    async def user_exists(self, user_id: str) -> bool:
        with self._store.lock:
            row = self._store.db.execute("SELECT 1 FROM entities WHERE user_id = ? LIMIT 1", (user_id,)).fetchone()
        return row is not None

    async def counts(self, user_id: str) -> dict[str, int]:
        with self._store.lock:
            rows = self._store.db.execute(
                "SELECT kind, count(*) FROM entities WHERE user_id = ? GROUP BY kind", (user_id,)
            ).fetchall()
            edges = self._store.db.execute("SELECT count(*) FROM edges WHERE user_id = ?", (user_id,)).fetchone()[0]
            prefs = self._store.db.execute("SELECT count(*) FROM preferences WHERE user_id = ?", (user_id,)).fetchone()[
                0
            ]
        out = {k.value: 0 for k in Kind}
        out.update({kind: n for kind, n in rows})
        out["relation"] = int(edges)
        out["preference"] = int(prefs)
        return out

    async def ids(self, user_id: str) -> dict[str, str]:
        with self._store.lock:
            rows = self._store.db.execute("SELECT id, kind FROM entities WHERE user_id = ?", (user_id,)).fetchall()
        return {i: k for i, k in rows}

    async def users(self) -> list[str]:
        with self._store.lock:
            rows = self._store.db.execute("SELECT DISTINCT user_id FROM entities ORDER BY user_id").fetchall()
        return [r[0] for r in rows]
