"""The embedded backend as the registry lists it: one SQLite file that can hold all three roles.

Its record store commits records and projections in one transaction, so it projects only into the
same file's graph and vectors; the file's graph and vectors may also serve a PostgreSQL record
store (the projector delivers to them). The file is opened once per composition, whatever the
number of roles it fills, and lives in the server's process (:class:`EmbeddedInProcess`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

from hrt.config import Settings
from hrt.stores.ann import AnnConfig
from hrt.stores.backend import Backend, Opening, RecordSide
from hrt.stores.base import GraphStore, RecordStore, VectorIndex, VectorRewriter, WriteBatch, WriteResult
from hrt.stores.embedded.store import EmbeddedStore

NAME = "embedded"


class EmbeddedWriter:
    """The embedded store writes records and projections in one SQLite transaction, in a worker
    thread: a large batch's transaction (and its cache updates) can take seconds, and reads (on
    their own connections) go on meanwhile."""

    def __init__(self, store: EmbeddedStore) -> None:
        self._store = store

    async def apply(self, batch: WriteBatch) -> WriteResult:
        return await asyncio.to_thread(self._store.apply, batch)

    async def delete_user(self, user_id: str) -> int:
        return await asyncio.to_thread(self._store.delete_user, user_id)


class EmbeddedInProcess:
    """The embedded file as a server keeps it: claimed for its writes, the largest users' caches
    preloaded at start (of the roles the file fills), records read from worker threads."""

    caches_in_process = True

    def __init__(self, file: EmbeddedStore) -> None:
        self.file = file
        self.roles: set[str] = set()

    @property
    def reads_from_any_thread(self) -> bool:
        return "records" in self.roles

    def claim(self, purpose: str) -> None:
        self.file.claim(purpose)

    def largest_users(self, limit: int) -> list[str]:
        return self.file.largest_users(limit)

    def preload(self, user_ids: Sequence[str]) -> None:
        for user_id in user_ids:
            if "graph" in self.roles:
                self.file.graph.preload(user_id)
            if "vectors" in self.roles:
                self.file.vectors.preload(user_id)

    def close(self) -> None:
        self.file.close()


def _file(opening: Opening, role: str) -> EmbeddedStore:
    """The composition's embedded file, opened by the first role that needs it."""
    here = opening.shared.get(NAME)
    if here is None:
        s = opening.settings
        ann = AnnConfig(
            min_vectors=s.ann_min_vectors, m=s.ann_m, ef_construction=s.ann_ef_construction, ef_search=s.ann_ef_search
        )
        here = EmbeddedInProcess(EmbeddedStore(s.db_path, opening.dim, ann=ann, model_id=opening.model_id))
        opening.shared[NAME] = here
        opening.in_process = here
        opening.closers.append(here.close)
    here.roles.add(role)
    return here.file


def _records(opening: Opening) -> RecordSide:
    file = _file(opening, "records")

    def rewriter(drain: Callable[[], Awaitable[None]]) -> VectorRewriter:
        from hrt.stores.embedded.reembed import EmbeddedVectorRewriter

        file.claim("hrt reembed")  # a server cannot hold the file meanwhile
        return EmbeddedVectorRewriter(file)

    return RecordSide(file.records, EmbeddedWriter(file), None, None, NAME, rewriter)


def _graph(opening: Opening) -> GraphStore:
    return _file(opening, "graph").graph


def _vectors(opening: Opening) -> VectorIndex:
    return _file(opening, "vectors").vectors


@contextlib.asynccontextmanager
async def _key_store(settings: Settings) -> AsyncIterator[RecordStore]:
    store = EmbeddedStore(settings.db_path, dim=None)
    try:
        yield store.records
    finally:
        store.close()


def _migrate(settings: Settings) -> dict[str, Any]:
    store = EmbeddedStore(settings.db_path, dim=None)
    try:
        versions = store.schema_versions()
    finally:
        store.close()
    return {"db_path": str(settings.db_path), "applied_now": store.applied_on_open, "schema_versions": versions}


BACKEND = Backend(
    name=NAME,
    title="the embedded store",
    summary="one SQLite file (records, graph, vectors and the lexical index), in the server's process",
    roles=frozenset({"records", "graph", "vectors"}),
    variables=("HRT_DB_PATH", "HRT_ANN_MIN_VECTORS", "HRT_ANN_M", "HRT_ANN_EF_CONSTRUCTION", "HRT_ANN_EF_SEARCH"),
    open_records=_records,
    open_graph=_graph,
    open_vectors=_vectors,
    key_store=_key_store,
    migrate=_migrate,
)
