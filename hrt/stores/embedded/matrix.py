"""One user's searchable rows in the embedded vector index, as an immutable snapshot
(:class:`_UserMatrix`): the vectors, BM25 index and per-row columns of the rows loaded at the last
build, the rows written since, and the next snapshot a write makes (:meth:`_UserMatrix.changed`)."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from hrt.stores.ann import UserAnn
from hrt.stores.bm25 import BM25Index, BM25View, top_k
from hrt.stores.growing import Room, copied, grown

# Scaled id ranks: a row of the loaded rows has (its rank among their ids) * ID_STEP, a row added
# since between two of them a key in the gap, so keys order every row as the ids do.
ID_STEP = 1 << 24

# The vector leg ranks by float32 products, whose last bit depends on where a row sits in the
# matrix (BLAS blocks); rows within this much of the k-th score are ranked again in float64, one
# row at a time, so the order never depends on the rows' layout (nor on the history of writes).
RESCORE_MARGIN = 1e-4


def exact_scores(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosines in float64 row by row (products exact, each row summed alone)."""
    out: np.ndarray = (vectors.astype(np.float64) * query.astype(np.float64)).sum(axis=1)
    return out


@dataclass(frozen=True, slots=True)
class DocRow:
    """One document's current row in the ``docs`` table, as a write leaves it."""

    rowid: int
    id: str
    kind: int
    ts: float
    vector: np.ndarray
    text: str
    valid_from: float
    valid_to: float
    tags: tuple[str, ...]
    agent: str | None


class _UserMatrix:
    """One user's searchable rows, in rowid order: the rows loaded at the last build (the base:
    their matrix, BM25 index and HNSW graph), then the rows added by writes since (``extra``);
    a base row rewritten since reads its new vector from ``override_vectors``, a deleted one is not
    ``live``. A write makes the next snapshot from this one in time proportional to what it wrote
    (:meth:`changed`), and the background compaction builds a new base (docs/reliability.md)."""

    __slots__ = (
        "_by_id",
        "_row_of",
        "added",
        "ann",
        "attributes",
        "base_ids",
        "base_n",
        "bm25",
        "changed_attrs",
        "codes",
        "earliest_end",
        "extra",
        "id_rank",
        "ids",
        "kinds_present",
        "latest_start",
        "live",
        "matrix",
        "newest",
        "override_rows",
        "override_vectors",
        "rooms",
        "rowids",
        "ts",
        "valid_from",
        "valid_to",
    )

    def __init__(
        self,
        ids: list[str],
        rowids: np.ndarray,
        codes: np.ndarray,
        ts: np.ndarray,
        matrix: np.ndarray,
        texts: list[str],
        ann: UserAnn | None = None,
        valid_from: np.ndarray | None = None,
        valid_to: np.ndarray | None = None,
    ):
        """A base: every row loaded, none changed since."""
        n = len(ids)
        self.ids: list[str] | _Ids = ids
        self.rowids = rowids
        self.ann = ann
        self.codes = codes
        self.ts = ts
        self.matrix = matrix  # the base rows' vectors
        self.base_n = n
        self.extra = np.zeros((0, matrix.shape[1] if matrix.ndim == 2 else 0), dtype=np.float32)
        # base rows rewritten since (sorted) and their new vectors, made once per write
        self.override_rows = np.zeros(0, dtype=np.int64)
        self.override_vectors = self.extra
        self.added: dict[str, int] = {}  # id -> row, for the rows past the base
        self.live: np.ndarray | None = None  # None: every row
        self.changed_attrs: dict[int, tuple[tuple[str, ...], str | None]] = {}  # rows written since
        # what a request's filters are checked against before any per-row mask is built
        self.kinds_present = frozenset(int(c) for c in np.unique(codes))
        stamped = ts[~np.isnan(ts)]
        self.newest = float(stamped.max()) if stamped.size else -np.inf
        # own validity intervals (NaN: open), and the instants between which every row is valid
        self.valid_from = np.full(n, np.nan) if valid_from is None else valid_from
        self.valid_to = np.full(n, np.nan) if valid_to is None else valid_to
        starts, ends = self.valid_from[~np.isnan(self.valid_from)], self.valid_to[~np.isnan(self.valid_to)]
        self.latest_start = float(starts.max()) if starts.size else -np.inf
        self.earliest_end = float(ends.min()) if ends.size else np.inf
        rank = np.empty(n, dtype=np.int64)  # row -> position of its id in id order
        rank[np.argsort(np.array(ids, dtype=object), kind="stable")] = np.arange(n)
        self.id_rank = rank * ID_STEP
        self.bm25 = BM25View.over(BM25Index(texts, n))
        self._by_id: tuple[list[str], np.ndarray] | None = None  # base ids in order, and their rows
        self._row_of: dict[str, int] | None = None  # base id -> its row
        self.base_ids = self  # the snapshot whose _by_id serves the base rows (self for a base)
        self.attributes: _Attributes | None = None  # memory units' tags and agents, on first filter
        self.rooms: dict[str, Room] = {}  # the per-row columns' storage, shared down this base's snapshots

    @property
    def delta_rows(self) -> int:
        """Rows written since the base (added or rewritten): what the next compaction folds in."""
        return len(self.ids) - self.base_n + len(self.override_rows)

    def sorted_base_ids(self) -> tuple[list[str], np.ndarray]:
        """The base rows' ids in order and their rows (by binary search: a dict of a million ids
        would hold ~100 MB more); made once per base and shared by its snapshots."""
        holder = self.base_ids
        if holder._by_id is None:
            order = np.empty(holder.base_n, dtype=np.int64)
            order[holder.id_rank[: holder.base_n] // ID_STEP] = np.arange(holder.base_n)
            base = holder.ids if isinstance(holder.ids, list) else holder.ids.base
            holder._by_id = (np.array(base[: holder.base_n], dtype=object)[order].tolist(), order)
        return holder._by_id

    def prepare(self) -> _UserMatrix:
        """A base's lookups by id, made now, in the thread that loads it (a preload, a compaction
        or a first request) rather than on first use: at a million rows the sorted ids took 260 ms
        of the first write after each build, the dict 350 ms of the first request (2026-11-29)."""
        self.sorted_base_ids()
        self.base_rows()
        return self

    def base_rows(self) -> dict[str, int]:
        """The base rows' ids and their rows, made once per base (:meth:`prepare`) and shared by
        its snapshots: :meth:`rows_of` looks up ~1,000 ids a request, 50 ns each here against 2-4 us
        for a binary search over a million sorted ids (the dict costs ~100 MB at a million)."""
        holder = self.base_ids
        if holder._row_of is None:
            base = holder.ids if isinstance(holder.ids, list) else holder.ids.base
            holder._row_of = dict(zip(base[: holder.base_n], range(holder.base_n), strict=True))
        return holder._row_of

    def rows_of(self, ids: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """The ``ids`` this user has, and their rows."""
        base = self.base_rows()
        found: list[str] = []
        at: list[int] = []
        live, added = self.live, self.added
        for ident in ids:
            row = added.get(ident)
            if row is None:
                row = base.get(ident)
            if row is not None and (live is None or live[row]):
                found.append(ident)
                at.append(row)
        return found, np.array(at, dtype=np.int64)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of ``rows``, in that order."""
        if not self.override_rows.size and len(self.ids) == self.base_n:
            same: np.ndarray = self.matrix[rows]
            return same
        out = np.empty((len(rows), self.matrix.shape[1]), dtype=np.float32)
        in_base = rows < self.base_n
        out[in_base] = self.matrix[rows[in_base]]
        out[~in_base] = self.extra[rows[~in_base] - self.base_n]
        if self.override_rows.size:
            at = np.minimum(np.searchsorted(self.override_rows, rows), self.override_rows.size - 1)
            hit = self.override_rows[at] == rows
            out[hit] = self.override_vectors[at[hit]]
        return out

    def products(self, queries: np.ndarray) -> np.ndarray:
        """Every row's (float32) product with every query, (queries, rows)."""
        sims: np.ndarray = queries @ self.matrix.T
        if len(self.ids) > self.base_n:
            sims = np.concatenate([sims, queries @ self.extra.T], axis=1)
        if self.override_rows.size:
            sims[:, self.override_rows] = queries @ self.override_vectors.T
        return sims

    def ranked(self, scores: np.ndarray, rows: np.ndarray, k: int, query: np.ndarray | None = None) -> list[int]:
        """The first ``k`` of ``rows`` by their ``scores`` (aligned with ``rows``, descending), then
        id; every row tied with the k-th score competes, so ties never depend on row order. With
        the ``query``, the rows near the k-th score are scored again by :func:`exact_scores`."""
        if query is not None and rows.size:
            kth = np.partition(scores, rows.size - k)[rows.size - k] if rows.size > k else scores.min()
            close = scores >= kth - RESCORE_MARGIN
            rows = rows[close]
            scores = exact_scores(self.gather(rows), query)
        return top_k(rows, scores, self.id_rank, k)

    def _overrides(self, overrides: dict[int, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The base rows rewritten since the base was built, in row order, with their vectors."""
        kept = sorted(overrides)
        vectors = np.stack([overrides[r] for r in kept]).astype(np.float32) if kept else self.extra[:0]
        return np.array(kept, dtype=np.int64), vectors

    def changed(self, written: Sequence[DocRow], gone: Sequence[str]) -> _UserMatrix:
        """The next snapshot: ``written`` rows as they are now (rewritten at their rowid, or added),
        ``gone`` ids deleted. It costs what was written, never a rebuild (:mod:`hrt.stores.growing`)."""
        nxt = object.__new__(_UserMatrix)
        for name in _UserMatrix.__slots__:
            setattr(nxt, name, getattr(self, name))
        nxt.attributes = None
        position = {int(r): i for i, r in enumerate(self.rowids[self.base_n :].tolist(), start=self.base_n)}
        past = list(self.ids.past) if isinstance(self.ids, _Ids) else []  # ids of the rows past the base
        at, gone = self._located(position, written, gone)
        # every row live before and none gone: every row live after, no mask made (1 MB at 1M rows)
        live = None if self.live is None and not gone else _live_copy(self.live, len(self.ids))
        overrides = dict(zip(self.override_rows.tolist(), self.override_vectors, strict=True))
        changed_attrs = dict(self.changed_attrs)
        added = dict(self.added)
        removed: list[int] = []
        fresh: list[tuple[int, str]] = []
        if live is not None:
            self._drop(gone, live, removed, overrides, changed_attrs)
        appended: list[DocRow] = []
        rewritten: dict[int, np.ndarray] = {}  # row past the base -> its new vector
        placed: list[tuple[int, DocRow]] = []  # rewritten rows, where they are
        for doc, row in zip(written, at, strict=True):
            if row is None:
                appended.append(doc)
                continue
            placed.append((row, doc))
            if live is None or live[row]:
                removed.append(row)
            if live is not None:
                live[row] = True
            fresh.append((row, doc.text))
            if row < self.base_n:
                overrides[row] = doc.vector
            else:
                rewritten[row - self.base_n] = doc.vector
            changed_attrs[row] = (doc.tags, doc.agent)
        n0 = len(self.ids)
        for j, doc in enumerate(appended):
            past.append(doc.id)
            fresh.append((n0 + j, doc.text))
            changed_attrs[n0 + j] = (doc.tags, doc.agent)
            added[doc.id] = n0 + j
        if appended and live is not None:
            live = np.concatenate([live, np.ones(len(appended), dtype=bool)])
        base_list = self.ids.base if isinstance(self.ids, _Ids) else self.ids
        nxt.ids = _Ids(base_list, past) if past else self.ids
        if overrides or self.override_rows.size:
            nxt.override_rows, nxt.override_vectors = self._overrides(overrides)
        nxt.changed_attrs = changed_attrs
        nxt.added = added
        nxt.live = None if live is None or live.all() else live
        self._set_columns(nxt, placed, appended, rewritten)
        # by id among the rows past the base (rewritten ones keep their key)
        ordered, _ = self.sorted_base_ids()
        nxt.id_rank = np.concatenate([self.id_rank[: self.base_n], _keys_past(ordered, past)])
        nxt.bm25 = self.bm25.changed(removed, fresh, len(nxt.ids))
        nxt.widen_bounds(written)
        return nxt

    def _located(
        self, position: dict[int, int], written: Sequence[DocRow], gone: Sequence[str]
    ) -> tuple[list[int | None], list[str]]:
        """For :meth:`changed`: each written row's row here (None: added), and the ids to take
        out: ``gone``, and those written at a rowid this snapshot does not hold while it holds
        them at another. Such an id was deleted and written again, and the change is read after
        both (a compaction replays the writes made during its load by reading the file now): its
        old row must go, as the delete's change would have taken it. Before this, the old row
        stayed live beside the new one, with the old text and vector."""
        at = [self._row_at(position, d.rowid) for d in written]
        moved = [d.id for d, row in zip(written, at, strict=True) if row is None and self.rows_of([d.id])[0]]
        return at, [*gone, *moved]

    def _row_at(self, position: dict[int, int], rowid: int) -> int | None:
        """For :meth:`changed`: the row holding ``rowid`` (past the base by ``position``, in the base
        by binary search), None for a rowid this snapshot does not hold."""
        row = position.get(rowid)
        if row is None:
            i = int(np.searchsorted(self.rowids[: self.base_n], rowid))
            if i < self.base_n and int(self.rowids[i]) == rowid:
                row = i
        return row

    def _drop(
        self,
        gone: Sequence[str],
        live: np.ndarray,
        removed: list[int],
        overrides: dict[int, np.ndarray],
        changed_attrs: dict[int, tuple[tuple[str, ...], str | None]],
    ) -> None:
        """For :meth:`changed`: the rows of the ``gone`` ids marked not live and ``removed``, and
        left out of the rewritten rows' vectors and attributes."""
        for ident in gone:
            _, rows = self.rows_of([ident])
            for row in rows.tolist():
                live[row] = False
                removed.append(row)
                overrides.pop(row, None)
                changed_attrs.pop(row, None)

    def _set_columns(
        self,
        nxt: _UserMatrix,
        placed: Sequence[tuple[int, DocRow]],
        appended: Sequence[DocRow],
        rewritten: dict[int, np.ndarray],
    ) -> None:
        """For :meth:`changed`: ``nxt``'s per-row columns and vectors past the base, with the
        rewritten rows' values set where they are (``placed``, ``rewritten``) and the added ones
        (``appended``) after this snapshot's rows."""
        rooms = self.rooms
        nxt.codes = _set(rooms, "codes", self.codes, placed, appended, lambda d: d.kind)
        nxt.ts = _set(rooms, "ts", self.ts, placed, appended, lambda d: d.ts)
        nxt.valid_from = _set(rooms, "valid_from", self.valid_from, placed, appended, lambda d: d.valid_from)
        nxt.valid_to = _set(rooms, "valid_to", self.valid_to, placed, appended, lambda d: d.valid_to)
        nxt.rowids = _set(rooms, "rowids", self.rowids, (), appended, lambda d: d.rowid)
        if appended or rewritten:
            nxt.extra = np.concatenate([self.extra, *[d.vector[None, :] for d in appended]]).astype(np.float32)
            for i, vec in rewritten.items():
                nxt.extra[i] = vec

    def widen_bounds(self, written: Sequence[DocRow]) -> None:
        """Take the written rows into the conservative bounds (a row gone does not narrow them):
        they only spare masks."""
        for doc in written:
            self.kinds_present = self.kinds_present | {doc.kind}
            if doc.ts == doc.ts:
                self.newest = max(self.newest, doc.ts)
            if doc.valid_from == doc.valid_from:
                self.latest_start = max(self.latest_start, doc.valid_from)
            if doc.valid_to == doc.valid_to:
                self.earliest_end = min(self.earliest_end, doc.valid_to)


class _Ids(Sequence[str]):
    """A snapshot's ids by row: the base's list (shared, never copied) and those past it."""

    __slots__ = ("base", "past")

    def __init__(self, base: list[str], past: list[str]) -> None:
        self.base = base
        self.past = past

    def __len__(self) -> int:
        return len(self.base) + len(self.past)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[str]: ...

    def __getitem__(self, i: int | slice) -> str | Sequence[str]:
        if isinstance(i, slice):
            return [*self.base, *self.past][i]
        n = len(self.base)
        return self.base[i] if i < n else self.past[i - n]


def _live_copy(live: np.ndarray | None, n: int) -> np.ndarray:
    return np.ones(n, dtype=bool) if live is None else live.copy()


def _set(
    rooms: dict[str, Room],
    name: str,
    values: np.ndarray,
    placed: Sequence[tuple[int, DocRow]],
    appended: Sequence[DocRow],
    of: Callable[[DocRow], float],
) -> np.ndarray:
    """A per-row column with the written rows' values: appended for an added row, set at a
    rewritten one; ``values`` itself never changes (the previous snapshot reads it). Only added
    rows: in place when the storage allows (:mod:`hrt.stores.growing`), else a copy."""
    new = np.array([of(d) for d in appended], dtype=values.dtype)
    if not placed:
        return grown(rooms, name, values, new)
    out = copied(rooms, name, values, new)
    for row, doc in placed:
        out[row] = of(doc)
    return out


def _keys_past(ordered: list[str], ids: Sequence[str]) -> np.ndarray:
    """Id-order keys for rows past the base: between the keys of the base ids around each."""
    slot = [bisect.bisect_left(ordered, ident) for ident in ids]
    keys = np.empty(len(ids), dtype=np.int64)
    by_slot: dict[int, list[int]] = {}
    for j, p in enumerate(slot):
        by_slot.setdefault(p, []).append(j)
    for p, members in by_slot.items():
        for rank, j in enumerate(sorted(members, key=ids.__getitem__)):
            keys[j] = (p - 1) * ID_STEP + 1 + rank
    return keys


@dataclass(frozen=True, slots=True)
class _Attributes:
    """What tag and agent filters match, as the rows carrying each tag and each agent."""

    tag_rows: dict[str, np.ndarray]
    agent_rows: dict[str, np.ndarray]

    def rows_with(
        self,
        table: dict[str, np.ndarray],
        values: Sequence[str],
        n: int,
        changed: dict[int, tuple[tuple[str, ...], str | None]],
        matches: Callable[[tuple[tuple[str, ...], str | None]], bool],
    ) -> np.ndarray:
        """The base rows carrying one of ``values``, the rows written since as they are now."""
        mask = np.zeros(n, dtype=bool)
        for value in values:
            rows = table.get(value)
            if rows is not None:
                mask[rows] = True
        for row, attrs in changed.items():
            mask[row] = matches(attrs)
        return mask
