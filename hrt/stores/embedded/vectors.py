"""VectorIndex over the embedded SQLite file: exact cosine on a per-user numpy matrix (vectors are
stored L2-normalised, so cosine is a dot product) plus BM25 for the lexical leg, over an in-memory
index (:mod:`hrt.stores.bm25`) built from the texts SQLite FTS5 keeps. A user's rows are an
immutable snapshot (:class:`~hrt.stores.embedded.matrix._UserMatrix`) that each write replaces."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import json
import zlib
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, overload

import numpy as np

from hrt.records import Kind
from hrt.stores.ann import AnnConfig, UserAnn
from hrt.stores.base import PhraseVectors, SearchFilter, Vector, VectorDoc, VectorHit
from hrt.stores.embedded.matrix import DocRow, _Attributes, _UserMatrix
from hrt.stores.embedded.schema import KIND_CODES, KINDS_BY_CODE, EmbeddedPart, chunks, user_scope_token, write_doc
from hrt.stores.projection import passage_rows
from hrt.stores.user_cache import UserCache

if TYPE_CHECKING:
    from hrt.stores.embedded.store import EmbeddedStore


# ids per SQLite read of passages (under SQLite's 32,766 bound on a statement's parameters)
READ_CHUNK = 500

# Below this many rows allowed by a request's filters, an ANN user is searched exactly over them.
EXACT_BELOW = 2_000


# A user's snapshot is built afresh in the background once this many rows were written since its
# base (each search reads the rows written since exactly, at a cost that grows with them), or,
# for a small user, once as many as the base holds (at least COMPACT_SMALL): its build is cheap.
COMPACT_ROWS = 2_000
COMPACT_SMALL = 64


def compaction_due(um: _UserMatrix) -> bool:
    return um.delta_rows >= COMPACT_ROWS or um.delta_rows >= max(COMPACT_SMALL, um.base_n)


@dataclass(frozen=True, slots=True)
class _Scope:
    """What one request searches: a user's rows, and those its filters allow (None: every row)."""

    um: _UserMatrix
    allowed: np.ndarray | None


@dataclass(frozen=True, slots=True)
class _Lexical:
    um: _UserMatrix
    ranks: list[dict[int, int]]  # per phrase: row -> 1-based lexical rank


class EmbeddedVectorIndex(EmbeddedPart):
    def __init__(self, store: EmbeddedStore, ann: AnnConfig | None = None) -> None:
        self._store = store
        self._ann = ann or AnnConfig()
        self._cache: UserCache[_UserMatrix, Collection[str]] = UserCache(
            self._load, self._changed, compaction_due, store.lock
        )

    def invalidate(self, user_id: str) -> None:
        self._cache.invalidate(user_id)

    def update(self, user_id: str, ids: Collection[str]) -> None:
        """A write of the user committed these documents (under the store's write lock): the
        loaded snapshot takes them now (:meth:`_UserMatrix.changed`)."""
        self._cache.update(user_id, ids)

    def _changed(self, user_id: str, um: _UserMatrix, ids: Collection[str]) -> _UserMatrix:
        """``um`` with ``ids`` as the file holds them now: rewritten, added or gone."""
        written: list[DocRow] = []
        wanted = sorted(set(ids))
        with self._store.reading() as db:
            for part in chunks(wanted, READ_CHUNK):
                rows = db.execute(
                    "SELECT d.rowid, d.id, d.kind, d.ts, d.vec, f.text, d.valid_from, d.valid_to, d.tags, "
                    f"d.source_agent_id FROM docs d JOIN fts f ON f.rowid = d.rowid WHERE d.user_id = ? "
                    f"AND d.id IN ({', '.join('?' * len(part))}) ORDER BY d.rowid",
                    (user_id, *part),
                ).fetchall()
                for rowid, ident, kind, ts, vec, text, start, end, tags, agent in rows:
                    written.append(
                        DocRow(
                            rowid=int(rowid),
                            id=ident,
                            kind=KIND_CODES[Kind(kind)],
                            ts=np.nan if ts is None else float(ts),
                            vector=np.frombuffer(vec, dtype=np.float32),
                            text=text,
                            valid_from=np.nan if start is None else float(start),
                            valid_to=np.nan if end is None else float(end),
                            tags=tuple(json.loads(tags)) if tags else (),
                            agent=agent,
                        )
                    )
        written.sort(key=lambda d: d.rowid)
        present = {d.id for d in written}
        return um.changed(written, [i for i in wanted if i not in present])

    def wait_compacted(self, timeout: float = 60.0) -> bool:
        return self._cache.wait_compacted(timeout)

    def _matrix(self, user_id: str) -> _UserMatrix:
        return self._cache.get(user_id)

    def _load(self, user_id: str) -> _UserMatrix:
        dim = self._store.dim
        ids: list[str] = []
        texts: list[str] = []
        kinds: list[int] = []
        stamps: list[float] = []
        starts: list[float] = []
        ends: list[float] = []
        rowid_list: list[int] = []
        with self._store.snapshot() as db:  # the count and the rows of one committed state
            (n,) = db.execute("SELECT count(*) FROM docs WHERE user_id = ?", (user_id,)).fetchone()
            matrix = np.empty((n, dim), dtype=np.float32)
            crcs = np.empty(n, dtype=np.uint32)
            cursor = db.execute(
                "SELECT d.rowid, d.id, d.kind, d.ts, d.vec, f.text, d.valid_from, d.valid_to FROM docs d "
                "JOIN fts f ON f.rowid = d.rowid WHERE d.user_id = ? ORDER BY d.rowid",
                (user_id,),
            )
            # streamed into preallocated arrays: fetching every row's BLOB at once held the vectors
            # three times over (rows, joined bytes, matrix) at load
            i = 0
            while chunk := cursor.fetchmany(4096):
                for rowid, ident, kind, ts, vec, text, start, end in chunk:
                    matrix[i] = np.frombuffer(vec, dtype=np.float32)
                    crcs[i] = zlib.crc32(vec)
                    rowid_list.append(rowid)
                    ids.append(ident)
                    kinds.append(KIND_CODES[Kind(kind)])
                    stamps.append(np.nan if ts is None else ts)
                    starts.append(np.nan if start is None else start)
                    ends.append(np.nan if end is None else end)
                    texts.append(text)
                    i += 1
        matrix = matrix[:i]  # rows without an FTS entry (none are written so) are not searchable
        rowids = np.array(rowid_list, dtype=np.int64)
        ann = None
        if self._ann.enabled and i >= self._ann.min_vectors:
            path = None
            if str(self._store.path) != ":memory:":
                folder = self._store.path.with_name(self._store.path.name + ".ann")
                path = folder / (user_scope_token(user_id) + ".hnsw")
            ann = UserAnn.open(self._ann, path, rowids, matrix, crcs[:i])
        um = _UserMatrix(
            ids=ids,
            rowids=rowids,
            ann=ann,
            texts=texts,
            codes=np.array(kinds, dtype=np.int8),
            ts=np.array(stamps, dtype=np.float64),
            matrix=matrix,
            valid_from=np.array(starts, dtype=np.float64),
            valid_to=np.array(ends, dtype=np.float64),
        )
        return um.prepare()

    # --- writes (used by the projector; the embedded store writes these tables in apply()) ---

    async def upsert(self, user_id: str, docs: Sequence[VectorDoc]) -> None:
        with self._store.transaction() as db:
            for doc in docs:
                write_doc(db, user_id, doc)
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
        with self._store.reading() as db:
            rows = db.execute("SELECT id, kind FROM docs WHERE user_id = ?", (user_id,)).fetchall()
        return {i: k for i, k in rows}

    async def docs(self, user_id: str) -> dict[str, VectorDoc]:
        """Every document of one user as indexed (``hrt doctor`` compares them with the records)."""
        with self._store.lock:
            rows = self._store.db.execute(
                "SELECT d.id, d.kind, f.text, d.ts, d.vec, d.tags, d.source_agent_id, d.valid_from, d.valid_to, "
                "d.passages "
                "FROM docs d JOIN fts f ON f.rowid = d.rowid WHERE d.user_id = ?",
                (user_id,),
            ).fetchall()
        return {
            r[0]: VectorDoc(
                r[0],
                Kind(r[1]),
                r[2],
                np.frombuffer(r[4], dtype=np.float32),
                r[3],
                tuple(json.loads(r[5]) if r[5] else ()),
                r[6],
                r[7],
                r[8],
                passage_rows(r[9], self._store.dim),
            )
            for r in rows
        }

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
        vectors: PhraseVectors,
        kinds: Sequence[Kind],
        k: int,
        not_after: float | None = None,
        where: SearchFilter | None = None,
    ) -> list[list[VectorHit]]:
        # in worker threads: numpy, hnswlib and the BM25 arrays release the GIL, so concurrent
        # requests use the second core. Phrase vectors still being computed: the lexical leg needs
        # none and runs meanwhile, and the vector leg starts as soon as they are in, beside what is
        # left of the lexical leg (at 1M documents the lexical leg outlasts the embedding); only
        # the merge of the two needs both.
        if not inspect.isawaitable(vectors):
            return await asyncio.to_thread(self._search, user_id, phrases, vectors, kinds, k, not_after, where)
        scope = self._scope(user_id, kinds, not_after, in_memory_only=True, where=where)
        if scope is None:  # the rows' first load, or a filter's mask over them: off the event loop
            scope = await asyncio.to_thread(functools.partial(self._scope, user_id, kinds, not_after, where=where))
        lexical = asyncio.ensure_future(asyncio.to_thread(self._lexical, scope, phrases, k))
        try:
            queries = np.asarray(await vectors, dtype=np.float32)
            ranked = await asyncio.to_thread(self._vector_ranked, scope, queries, k)
            prepared = await lexical
        except BaseException:
            with contextlib.suppress(BaseException):
                await lexical
            raise
        return self._merge(prepared, queries, ranked)

    def _search(
        self,
        user_id: str,
        phrases: Sequence[str],
        vectors: Vector,
        kinds: Sequence[Kind],
        k: int,
        not_after: float | None,
        where: SearchFilter | None = None,
    ) -> list[list[VectorHit]]:
        scope = self._scope(user_id, kinds, not_after, where=where)
        queries = np.asarray(vectors, dtype=np.float32)
        return self._merge(self._lexical(scope, phrases, k), queries, self._vector_ranked(scope, queries, k))

    async def similarities(self, user_id: str, ids: Sequence[str], vectors: Vector) -> dict[str, float]:
        return await asyncio.to_thread(self._similarities, user_id, ids, vectors)

    def _own(
        self, user_id: str, ids: Sequence[str], vectors: Vector
    ) -> tuple[_UserMatrix, list[str], np.ndarray, np.ndarray, list[float]] | None:
        """The user's matrix, the ``ids`` it holds (sorted), their rows, the phrase vectors as
        rows, and each found id's best cosine to them; None when nothing is found."""
        queries = np.asarray(vectors, dtype=np.float32)
        if queries.ndim == 1:
            queries = queries[None, :]
        um = self._matrix(user_id)
        found, rows = um.rows_of(sorted(set(ids)))
        if not found or queries.shape[0] == 0:
            return None
        best = (um.gather(rows) @ queries.T).max(axis=1)  # rows in id order: the same whatever the layout
        return um, found, rows, queries, best.tolist()

    def _similarities(self, user_id: str, ids: Sequence[str], vectors: Vector) -> dict[str, float]:
        own = self._own(user_id, ids, vectors)
        return {} if own is None else dict(zip(own[1], own[4], strict=True))

    async def passage_similarities(
        self, user_id: str, ids: Sequence[str], vectors: Vector
    ) -> dict[str, tuple[float, float]]:
        return await asyncio.to_thread(self._passage_similarities, user_id, ids, vectors)

    def _passage_similarities(
        self, user_id: str, ids: Sequence[str], vectors: Vector
    ) -> dict[str, tuple[float, float]]:
        """The own cosines from the user's matrix; the passages read from the file (they are not
        kept in memory: ~3 per memory unit, ~4 KB) by the rowids the matrix holds, checked
        against the user and the id (a row rewritten since the matrix was built is skipped, and
        scores with its own vector), in chunks of :data:`READ_CHUNK`; then one product for all."""
        mine = self._own(user_id, ids, vectors)
        if mine is None:
            return {}
        um, found, rows, queries, own = mine
        expected = {int(r): ident for r, ident in zip(um.rowids[rows].tolist(), found, strict=True)}
        order = sorted(expected)
        blobs: list[bytes] = []
        owners: list[str] = []
        with self._store.reading() as db:
            for i in range(0, len(order), READ_CHUNK):
                part = order[i : i + READ_CHUNK]
                # by rowid (the primary key; "+user_id" keeps SQLite off the (user_id, id) index)
                for rowid, ident, blob in db.execute(
                    f"SELECT rowid, id, passages FROM docs WHERE rowid IN ({', '.join('?' * len(part))}) "
                    "AND +user_id = ? AND passages IS NOT NULL",
                    (*part, user_id),
                ):
                    if expected.get(rowid) == ident and len(blob) % (4 * queries.shape[1]) == 0:
                        blobs.append(blob)
                        owners.append(ident)
        best = dict(zip(found, own, strict=True))
        if blobs:
            dim = queries.shape[1]
            counts = [len(b) // (4 * dim) for b in blobs]
            cosines = (np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(-1, dim) @ queries.T).max(axis=1)
            starts = np.cumsum([0, *counts[:-1]])
            best.update(zip(owners, np.maximum.reduceat(cosines, starts).tolist(), strict=True))
        return {ident: (mine, best[ident]) for ident, mine in zip(found, own, strict=True)}

    @overload
    def _scope(
        self, user_id: str, kinds: Sequence[Kind], not_after: float | None, *, where: SearchFilter | None = None
    ) -> _Scope: ...

    @overload
    def _scope(
        self,
        user_id: str,
        kinds: Sequence[Kind],
        not_after: float | None,
        in_memory_only: bool,
        where: SearchFilter | None = None,
    ) -> _Scope | None: ...

    def _scope(
        self,
        user_id: str,
        kinds: Sequence[Kind],
        not_after: float | None,
        in_memory_only: bool = False,
        where: SearchFilter | None = None,
    ) -> _Scope | None:
        """The user's rows (loaded on first use) and the mask of those the request's filters allow.
        ``in_memory_only``: None instead of loading the rows or building a mask, so the event loop
        can take the common case (rows in memory, no filter that excludes any) without a thread."""
        um = self._cache.peek(user_id) if in_memory_only else self._matrix(user_id)
        if um is None or len(um.ids) == 0:
            return None if um is None else _Scope(um, None)
        # a mask only when a filter excludes something: at 1M rows building one costs milliseconds
        if where is not None and where.valid_at is not None and um.latest_start <= where.valid_at < um.earliest_end:
            where = replace(where, valid_at=None)  # every row is valid then
        wanted = [KIND_CODES[Kind(kind)] for kind in kinds]
        narrow_kinds = not um.kinds_present <= set(wanted)
        earlier_only = not_after is not None and not_after < um.newest
        if in_memory_only and (narrow_kinds or earlier_only or where):
            return None
        allowed: np.ndarray | None = um.live  # None: every row (no row deleted since the base)
        if narrow_kinds:
            narrow = np.isin(um.codes, wanted)
            allowed = narrow if allowed is None else allowed & narrow
        if earlier_only:
            earlier = ~(um.ts > not_after)  # NaN (no timestamp) compares False: always allowed
            allowed = earlier if allowed is None else allowed & earlier
        if where:
            passing = self._passing(user_id, um, where)
            allowed = passing if allowed is None else allowed & passing
        return _Scope(um, allowed)

    def _passing(self, user_id: str, um: _UserMatrix, where: SearchFilter) -> np.ndarray:
        """The rows ``where`` lets through: concepts always; memory units with a wanted tag and
        agent; memory units and artifacts within the time range."""
        n = len(um.ids)
        passing = np.ones(n, dtype=bool)
        if where.tags or where.source_agent_ids:
            holder = um.base_ids
            attrs = holder.attributes or self._attributes(user_id, holder)
            match = np.ones(n, dtype=bool)
            if where.tags:
                wanted = set(where.tags)
                match &= attrs.rows_with(
                    attrs.tag_rows, where.tags, n, um.changed_attrs, lambda a: bool(wanted & set(a[0]))
                )
            if where.source_agent_ids:
                agents = set(where.source_agent_ids)
                match &= attrs.rows_with(
                    attrs.agent_rows, where.source_agent_ids, n, um.changed_attrs, lambda a: a[1] in agents
                )
            passing &= (um.codes != KIND_CODES[Kind.MEMORY_UNIT]) | match
        if where.ts_from is not None or where.ts_to is not None:
            within = np.ones(n, dtype=bool)  # NaN compares False: no timestamp, not within
            if where.ts_from is not None:
                within &= um.ts >= where.ts_from
            if where.ts_to is not None:
                within &= um.ts <= where.ts_to
            passing &= (um.codes == KIND_CODES[Kind.CONCEPT]) | within
        if where.valid_at is not None:  # NaN compares False: an open end holds
            passing &= ~((um.valid_from > where.valid_at) | (um.valid_to <= where.valid_at))
        return passing

    def _attributes(self, user_id: str, um: _UserMatrix) -> _Attributes:
        """Read the base rows' tags and agents once per base (rows written since are read with
        them, in :attr:`_UserMatrix.changed_attrs`)."""
        with self._store.reading() as db:
            rows = db.execute(
                "SELECT rowid, tags, source_agent_id FROM docs WHERE user_id = ? AND kind = 'memory_unit'", (user_id,)
            ).fetchall()
        tag_rows: dict[str, list[int]] = {}
        agent_rows: dict[str, list[int]] = {}
        for rowid, tags, agent in rows:
            i = int(np.searchsorted(um.rowids[: um.base_n], rowid))  # the base rows are in rowid order
            if i >= um.base_n or um.rowids[i] != rowid:
                continue  # written after the matrix was loaded: the next load has it
            for tag in json.loads(tags) if tags else ():
                tag_rows.setdefault(tag, []).append(i)
            if agent is not None:
                agent_rows.setdefault(agent, []).append(i)
        attrs = _Attributes(
            {t: np.array(r, dtype=np.int64) for t, r in tag_rows.items()},
            {a: np.array(r, dtype=np.int64) for a, r in agent_rows.items()},
        )
        um.attributes = attrs
        return attrs

    def _lexical(self, scope: _Scope, phrases: Sequence[str], k: int) -> _Lexical:
        """The lexical leg: per phrase, its allowed rows' BM25 ranks (it needs no phrase vector)."""
        um, allowed = scope.um, scope.allowed
        if len(um.ids) == 0 or not phrases:
            return _Lexical(um, [{} for _ in phrases])
        ranks = [{i: r + 1 for r, i in enumerate(um.bm25.top(phrase, allowed, um.id_rank, k))} for phrase in phrases]
        return _Lexical(um, ranks)

    def _vector_ranked(self, scope: _Scope, queries: np.ndarray, k: int) -> list[list[int]]:
        """The vector leg: per phrase, its first ``k`` allowed rows by cosine then id."""
        if len(scope.um.ids) == 0 or len(queries) == 0:
            return [[] for _ in range(len(queries))]
        return self._vector_leg(scope.um, queries, scope.allowed, k)

    def _merge(self, lexical: _Lexical, queries: np.ndarray, vector_ranked: list[list[int]]) -> list[list[VectorHit]]:
        """Per phrase, the union of both legs' rows with both ranks and each row's cosine."""
        um = lexical.um
        results: list[list[VectorHit]] = []
        for p, ranked in enumerate(vector_ranked):
            vector_rank = {i: r + 1 for r, i in enumerate(ranked)}
            lexical_rank = lexical.ranks[p]
            rows = np.array(sorted(set(vector_rank) | set(lexical_rank)), dtype=np.int64)
            sims = um.gather(rows) @ queries[p] if rows.size else np.zeros(0, dtype=np.float32)
            results.append(
                [
                    VectorHit(
                        id=um.ids[i],
                        kind=KINDS_BY_CODE[int(um.codes[i])],
                        similarity=float(sim),
                        vector_rank=vector_rank.get(i),
                        lexical_rank=lexical_rank.get(i),
                    )
                    for i, sim in zip(rows.tolist(), sims.tolist(), strict=True)
                ]
            )
        return results

    def _vector_leg(self, um: _UserMatrix, queries: np.ndarray, allowed: np.ndarray | None, k: int) -> list[list[int]]:
        """Per phrase, the first ``k`` allowed rows by cosine then id: exact, or from ANN candidates
        (the base rows the graph holds, unchanged since, and every row written since) rescored
        exactly (and exact again for a phrase whose candidates fall short)."""
        out: list[list[int] | None] = [None] * len(queries)
        n_allowed = len(um.ids) if allowed is None else int(np.count_nonzero(allowed))
        if um.ann is not None and n_allowed >= EXACT_BELOW:
            filt: Callable[[int], bool] | None = None
            if allowed is not None:
                rowids, ok = um.rowids, allowed

                def filt(label: int) -> bool:  # hnswlib calls it per visited node
                    return bool(ok[np.searchsorted(rowids, label)])

            candidates = um.ann.candidates(queries, k, self._ann.ef_search, filt)
            want = min(k, n_allowed)
            since = np.concatenate([um.override_rows, np.arange(um.base_n, len(um.ids), dtype=np.int64)])
            if allowed is not None:
                since = since[allowed[since]]
            for p in range(len(queries)):
                rows = np.searchsorted(um.rowids, candidates[p]) if candidates.shape[1] else np.zeros(0, np.int64)
                rows = rows if allowed is None else rows[allowed[rows]]
                rows = np.unique(np.concatenate([rows, since]))
                if rows.size >= want:
                    out[p] = um.ranked(um.gather(rows) @ queries[p], rows, k, queries[p])
        missing = [p for p, r in enumerate(out) if r is None]
        if missing:
            sims = um.products(queries[missing])
            rows = np.arange(len(um.ids)) if allowed is None else np.flatnonzero(allowed)
            for j, p in enumerate(missing):
                out[p] = um.ranked(sims[j] if allowed is None else sims[j][rows], rows, k, queries[p])
        return [r for r in out if r is not None]

    def preload(self, user_id: str) -> None:
        """Load the user's vectors and lexical index now rather than on the first request."""
        self._matrix(user_id)
