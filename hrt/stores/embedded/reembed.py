"""``hrt reembed`` over the embedded SQLite file (:class:`~hrt.stores.base.VectorRewriter`).

Vectors live in ``docs`` (``vec``, ``passages``) beside the records; each page is rewritten in one
transaction with the re-embedding's cursor. The HNSW graphs beside the file were built from the old
vectors: they are removed at the end and rebuilt from the new ones when a user's vectors next load.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from hrt.records import ENTITY_MODELS, Entity, Kind
from hrt.stores.base import Vector
from hrt.stores.projection import passage_bytes, vector_bytes

if TYPE_CHECKING:
    from hrt.stores.embedded.store import EmbeddedStore


class EmbeddedVectorRewriter:
    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store

    async def vector_meta(self) -> dict[str, str]:
        return self._store.vector_meta()

    async def set_vector_meta(self, values: Mapping[str, str | None]) -> None:
        with self._store.transaction() as db:
            self._store.set_vector_meta(values, db)

    async def count_entities(self, after: tuple[str, str] | None = None) -> int:
        where, params = _after(after)
        with self._store.reading() as db:
            (n,) = db.execute(f"SELECT count(*) FROM entities {where}", params).fetchone()
        return int(n)

    async def entity_page(self, after: tuple[str, str] | None, limit: int) -> list[Entity]:
        where, params = _after(after)
        with self._store.reading() as db:
            rows = db.execute(
                f"SELECT kind, data FROM entities {where} ORDER BY user_id, id LIMIT ?", (*params, limit)
            ).fetchall()
        return [ENTITY_MODELS[Kind(kind)].model_validate_json(data) for kind, data in rows]

    async def rewrite_vectors(
        self,
        vectors: Mapping[tuple[str, str], Vector],
        passages: Mapping[tuple[str, str], Vector],
        meta: Mapping[str, str | None],
    ) -> None:
        rows = [(vector_bytes(vec), passage_bytes(passages.get(key)), *key) for key, vec in vectors.items()]
        await asyncio.to_thread(self._write, rows, meta)

    def _write(self, rows: Sequence[tuple[object, ...]], meta: Mapping[str, str | None]) -> None:
        with self._store.transaction() as db:
            db.executemany("UPDATE docs SET vec = ?, passages = ? WHERE user_id = ? AND id = ?", rows)
            self._store.set_vector_meta(meta, db)

    async def finish(self) -> None:
        """Remove the HNSW graphs of the old vectors (rebuilt from the new ones on load)."""
        ann = self._store.path.with_name(self._store.path.name + ".ann")
        if ann.is_dir():
            shutil.rmtree(ann)
            ann.mkdir(mode=0o700)


def _after(after: tuple[str, str] | None) -> tuple[str, tuple[str, ...]]:
    if after is None:
        return "", ()
    # SQLite compares TEXT byte-wise (BINARY): the same order as PostgreSQL's COLLATE "C"
    return "WHERE user_id > ? OR (user_id = ? AND id > ?)", (after[0], after[0], after[1])
