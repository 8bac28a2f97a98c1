"""Approximate nearest neighbours for the embedded store's vector leg (HNSW, ``hnswlib``).

Exact search reads every vector of the user per request, which grows with the user (memory-bound;
CHANGELOG.md). Above ``AnnConfig.min_vectors`` vectors per user
the embedded vector leg asks an HNSW graph for ``max(k, ef)`` candidates instead and rescores them
exactly, so every similarity it reports is the exact cosine, and only the candidate set is
approximate.

The graph is persisted next to the SQLite file (``<db>.ann/<user token>.hnsw``, one file holding
the graph, the row ids it covers and a CRC of each vector, replaced atomically) and brought up to
date when the user's vectors load: new or changed vectors are added, removed ones marked deleted,
and the graph is rebuilt from scratch when a fifth of it is deleted. Building and updating run on
one thread with a fixed seed, so the same sequence of writes gives the same graph and the same
answers, also across restarts; a different history of writes can give a different graph, hence
(rarely) a different candidate set. ``HRT_ANN_MIN_VECTORS=0`` turns it off.

Rows go into the graph in a seeded shuffle of their order, not in row order. Row order is the order
of ingest, and a user's memories arrive in runs on one topic; HNSW inserted run by run links each
new point mostly within its run, and searches then stall in the wrong region. On the bench's 100k
store, row order found 0.86 of the true top 10 hits above the grounding floor at ef 256, the
shuffled order 0.996, at the same build time (docs/bench.md).
"""

from __future__ import annotations

import logging
import os
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

SEED = 100
FORMAT = 2  # 2: rows inserted in a seeded shuffle (graphs of format 1, in row order, are rebuilt)


def insertion_order(n: int) -> np.ndarray:
    """The order in which ``n`` new rows (in row order) go into the graph: a permutation fixed by
    ``n`` alone, so the same rows always give the same graph."""
    return np.random.default_rng(SEED).permutation(n)


@dataclass(frozen=True, slots=True)
class AnnConfig:
    min_vectors: int = 20_000  # users with fewer vectors are searched exactly; 0: never approximate
    m: int = 16
    ef_construction: int = 200
    ef_search: int = 256

    @property
    def enabled(self) -> bool:
        return self.min_vectors > 0


class UserAnn:
    """One user's HNSW graph over their vectors; labels are the SQLite row ids of ``docs``."""

    def __init__(self, index: Any, labels: np.ndarray, crcs: np.ndarray, deleted: int) -> None:
        self.index = index
        self.built_with = (int(index.M), int(index.ef_construction))
        self.labels = labels  # covered row ids, sorted
        self.crcs = crcs
        self.deleted = deleted

    @classmethod
    def build(cls, config: AnnConfig, rowids: np.ndarray, matrix: np.ndarray, crcs: np.ndarray) -> UserAnn:
        import hnswlib

        index = hnswlib.Index(space="ip", dim=int(matrix.shape[1]))
        index.init_index(
            max_elements=max(1, len(rowids)), M=config.m, ef_construction=config.ef_construction, random_seed=SEED
        )
        index.set_num_threads(1)
        if len(rowids):
            order = insertion_order(len(rowids))
            index.add_items(matrix[order], rowids[order], num_threads=1)
        return cls(index, rowids.copy(), crcs.copy(), 0)

    @classmethod
    def open(
        cls, config: AnnConfig, path: Path | None, rowids: np.ndarray, matrix: np.ndarray, crcs: np.ndarray
    ) -> UserAnn:
        """The persisted graph brought up to date with these rows (built when missing or unreadable)."""
        ann = cls._load(path) if path is not None else None
        changed = ann is None
        if ann is None or ann.index.dim != matrix.shape[1] or ann.built_with != (config.m, config.ef_construction):
            ann = cls.build(config, rowids, matrix, crcs)
            changed = True
        else:
            changed |= ann._sync(config, rowids, matrix, crcs)
            if ann.deleted * 5 > max(1, ann.index.get_current_count()):
                ann = cls.build(config, rowids, matrix, crcs)
        if changed and path is not None:
            ann._save(path)
        return ann

    def _sync(self, config: AnnConfig, rowids: np.ndarray, matrix: np.ndarray, crcs: np.ndarray) -> bool:
        gone = np.setdiff1d(self.labels, rowids, assume_unique=True)
        pos = np.searchsorted(self.labels, rowids)
        known = pos < len(self.labels)
        known[known] = self.labels[pos[known]] == rowids[known]
        same = np.zeros(len(rowids), dtype=bool)
        same[known] = self.crcs[pos[known]] == crcs[known]
        fresh = np.flatnonzero(~same)
        fresh = fresh[insertion_order(len(fresh))]
        if not len(gone) and not len(fresh):
            return False
        for label in gone:
            self.index.mark_deleted(int(label))
        self.deleted += len(gone)
        if len(fresh):
            needed = self.index.get_current_count() + int(np.count_nonzero(~known))
            if needed > self.index.get_max_elements():
                self.index.resize_index(max(needed, int(self.index.get_max_elements() * 1.25)))
            self.index.add_items(matrix[fresh], rowids[fresh], num_threads=1)
        self.labels, self.crcs = rowids.copy(), crcs.copy()
        return True

    @staticmethod
    def _load(path: Path) -> UserAnn | None:
        try:
            with path.open("rb") as f:
                state = pickle.load(f)  # our own file, written by _save
            if state.get("format") != FORMAT:
                return None
            ann = UserAnn(state["index"], state["labels"], state["crcs"], int(state["deleted"]))
            ann.index.set_num_threads(1)
            return ann
        except FileNotFoundError:
            return None
        except Exception as exc:  # a torn or foreign file: rebuild rather than fail the request
            log.warning("ignoring the unreadable ANN file %s (%s); rebuilding it", path, exc)
            return None

    def _save(self, path: Path) -> None:
        state = {
            "format": FORMAT,
            "index": self.index,
            "labels": self.labels,
            "crcs": self.crcs,
            "deleted": self.deleted,
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
            os.replace(tmp, path)
        except OSError as exc:  # a read-only directory only costs the next load a rebuild
            log.warning("cannot persist the ANN file %s: %s", path, exc)

    def candidates(self, vectors: np.ndarray, k: int, ef: int, allowed: Callable[[int], bool] | None) -> np.ndarray:
        """Row ids (labels) of up to ``max(k, ef)`` approximate neighbours per query row."""
        want = min(max(k, ef), self.index.get_current_count() - self.deleted)
        if want <= 0:
            return np.zeros((len(vectors), 0), dtype=np.int64)
        self.index.set_ef(max(ef, want))
        try:
            labels, _ = self.index.knn_query(vectors, k=want, num_threads=1, filter=allowed)
        except RuntimeError:  # fewer than ``want`` reachable under the filter
            return np.zeros((len(vectors), 0), dtype=np.int64)
        return np.asarray(labels, dtype=np.int64)
