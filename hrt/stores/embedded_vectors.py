"""VectorIndex over the embedded SQLite file: exact cosine on a per-user numpy matrix (vectors are
stored L2-normalised, so cosine is a dot product) plus SQLite FTS5 BM25 for the lexical leg."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from hrt.records import Kind
from hrt.stores.base import Vector, VectorDoc, VectorHit
from hrt.stores.embedded import KIND_CODES, KINDS_BY_CODE, user_scope_token
from hrt.text import content_words

if TYPE_CHECKING:
    from hrt.stores.embedded import EmbeddedStore


def lexical_query(phrase: str) -> str | None:
    """An FTS5 expression matching any content word of the phrase (all words if none is content)."""
    chosen = sorted(set(content_words(phrase)))
    if not chosen:
        return None
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in chosen)


class _UserMatrix:
    __slots__ = ("codes", "ids", "matrix", "row_of", "rowids", "ts")

    def __init__(self, ids: list[str], rowids: list[int], codes: np.ndarray, ts: np.ndarray, matrix: np.ndarray):
        self.ids = ids
        self.rowids = rowids
        self.codes = codes
        self.ts = ts
        self.matrix = matrix
        self.row_of = {rid: i for i, rid in enumerate(rowids)}


class EmbeddedVectorIndex:
    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store
        self._cache: dict[str, _UserMatrix] = {}
        self._cache_lock = threading.Lock()

    def invalidate(self, user_id: str) -> None:
        with self._cache_lock:
            self._cache.pop(user_id, None)

    def _matrix(self, user_id: str) -> _UserMatrix:
        with self._cache_lock:
            cached = self._cache.get(user_id)
        if cached is not None:
            return cached
        with self._store.lock:
            rows = self._store.db.execute(
                "SELECT rowid, id, kind, ts, vec FROM docs WHERE user_id = ? ORDER BY rowid", (user_id,)
            ).fetchall()
        dim = self._store.dim
        if rows:
            matrix = np.frombuffer(b"".join(r[4] for r in rows), dtype=np.float32).reshape(len(rows), dim)
        else:
            matrix = np.zeros((0, dim), dtype=np.float32)
        um = _UserMatrix(
            ids=[r[1] for r in rows],
            rowids=[r[0] for r in rows],
            codes=np.array([KIND_CODES[Kind(r[2])] for r in rows], dtype=np.int8),
            ts=np.array([np.nan if r[3] is None else r[3] for r in rows], dtype=np.float64),
            matrix=matrix,
        )
        with self._cache_lock:
            self._cache[user_id] = um
        return um

    # --- writes (used by the projector; the embedded store writes these tables in apply()) ---

    async def upsert(self, user_id: str, docs: Sequence[VectorDoc]) -> None:
        with self._store.transaction() as db:
            for doc in docs:
                vec = np.ascontiguousarray(doc.vector, dtype=np.float32).tobytes()
                row = db.execute("SELECT rowid FROM docs WHERE user_id = ? AND id = ?", (user_id, doc.id)).fetchone()
                if row is None:
                    rowid = db.execute(
                        "INSERT INTO docs (user_id, id, kind, ts, vec) VALUES (?, ?, ?, ?, ?)",
                        (user_id, doc.id, doc.kind.value, doc.ts, vec),
                    ).lastrowid
                else:
                    rowid = row[0]
                    db.execute(
                        "UPDATE docs SET kind = ?, ts = ?, vec = ? WHERE rowid = ?",
                        (doc.kind.value, doc.ts, vec, rowid),
                    )
                    db.execute("DELETE FROM fts WHERE rowid = ?", (rowid,))
                db.execute(
                    "INSERT INTO fts (rowid, text, scope) VALUES (?, ?, ?)",
                    (rowid, doc.text, user_scope_token(user_id)),
                )
        self.invalidate(user_id)

    async def delete(self, user_id: str, ids: Sequence[str]) -> None:
        with self._store.transaction() as db:
            for ident in ids:
                row = db.execute("SELECT rowid FROM docs WHERE user_id = ? AND id = ?", (user_id, ident)).fetchone()
                if row is not None:
                    db.execute("DELETE FROM fts WHERE rowid = ?", (row[0],))
                    db.execute("DELETE FROM docs WHERE rowid = ?", (row[0],))
        self.invalidate(user_id)

    async def ids(self, user_id: str) -> dict[str, str]:
        with self._store.lock:
            rows = self._store.db.execute("SELECT id, kind FROM docs WHERE user_id = ?", (user_id,)).fetchall()
        return {i: k for i, k in rows}

    async def delete_user(self, user_id: str) -> None:
        with self._store.transaction() as db:
            rowids = [r[0] for r in db.execute("SELECT rowid FROM docs WHERE user_id = ?", (user_id,))]
            db.executemany("DELETE FROM fts WHERE rowid = ?", [(r,) for r in rowids])
            db.execute("DELETE FROM docs WHERE user_id = ?", (user_id,))
        self.invalidate(user_id)

    # --- reads ---

    async def search(
        self,
        user_id: str,
        phrases: Sequence[str],
        vectors: Vector,
        kinds: Sequence[Kind],
        k: int,
        not_after: float | None = None,
    ) -> list[list[VectorHit]]:
        um = self._matrix(user_id)
        n = len(um.ids)
        if n == 0 or not phrases:
            return [[] for _ in phrases]
        allowed = np.isin(um.codes, [KIND_CODES[Kind(kind)] for kind in kinds])
        if not_after is not None:
            allowed &= ~(um.ts > not_after)  # NaN (no timestamp) compares False: always allowed
        sims = np.asarray(vectors, dtype=np.float32) @ um.matrix.T  # (phrases, n)
        masked = np.where(allowed[None, :], sims, -np.inf)
        top = min(k, n)
        results: list[list[VectorHit]] = []
        for p, phrase in enumerate(phrases):
            row = masked[p]
            if top < n:  # every item tied with the k-th score competes, so ties break by id, not position
                kth = np.partition(-row, top - 1)[top - 1]
                idx = np.flatnonzero(-row <= kth)
            else:
                idx = np.arange(n)
            ranked = sorted(
                (int(i) for i in idx if np.isfinite(row[i])), key=lambda i: (-float(row[i]), um.ids[i])
            )[:top]
            vector_rank = {i: r + 1 for r, i in enumerate(ranked)}
            lexical_rank = self._lexical(user_id, um, phrase, allowed, k)
            hits = []
            for i in sorted(set(vector_rank) | set(lexical_rank)):
                hits.append(
                    VectorHit(
                        id=um.ids[i],
                        kind=KINDS_BY_CODE[int(um.codes[i])],
                        similarity=float(sims[p, i]),
                        vector_rank=vector_rank.get(i),
                        lexical_rank=lexical_rank.get(i),
                    )
                )
            results.append(hits)
        return results

    def _lexical(self, user_id: str, um: _UserMatrix, phrase: str, allowed: np.ndarray, k: int) -> dict[int, int]:
        expr = lexical_query(phrase)
        if expr is None:
            return {}
        match = f'scope : "{user_scope_token(user_id)}" AND text : ({expr})'
        with self._store.lock:
            rows = self._store.db.execute(
                "SELECT fts.rowid FROM fts JOIN docs d ON d.rowid = fts.rowid "
                "WHERE fts MATCH ? AND d.user_id = ? ORDER BY bm25(fts, 1.0, 0.0), d.id LIMIT ?",
                (match, user_id, k * 2),
            ).fetchall()
        out: dict[int, int] = {}
        for (rowid,) in rows:
            i = um.row_of.get(rowid)
            if i is None or not allowed[i]:
                continue
            out[i] = len(out) + 1
            if len(out) >= k:
                break
        return out
