"""A backend as a newcomer adds one: ``memory``, every store in one SQLite database held in memory
(nothing on disk), each port behind a proxy that counts the calls it serves.

This package and one :func:`hrt.stores.registry.register` call are all it takes: the settings
choose it by name (``HRT_RECORD_STORE=memory`` ...), the composition root opens its ports through
:data:`BACKEND`, ``hrt migrate`` and the configuration reference list it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from hrt.config import Settings
from hrt.stores.backend import Backend, Opening, RecordSide
from hrt.stores.base import GraphStore, RecordStore, VectorIndex, VectorRewriter
from hrt.stores.embedded.backend import EmbeddedInProcess, EmbeddedWriter
from hrt.stores.embedded.reembed import EmbeddedVectorRewriter
from hrt.stores.embedded.store import EmbeddedStore

NAME = "memory"
CALLS: Counter[str] = Counter()  # "<role>.<method>" -> calls served


class Counting:
    """``port`` with each method call counted in :data:`CALLS` under ``role``."""

    def __init__(self, port: Any, role: str) -> None:
        self._port = port
        self._role = role

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._port, name)
        if not callable(value):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            CALLS[f"{self._role}.{name}"] += 1
            return value(*args, **kwargs)

        return counted


def _database(opening: Opening) -> EmbeddedStore:
    """The composition's database in memory, made by the first role that needs it."""
    here = opening.shared.get(NAME)
    if here is None:
        here = EmbeddedInProcess(EmbeddedStore(":memory:", opening.dim, model_id=opening.model_id))
        opening.shared[NAME] = opening.in_process = here
        opening.closers.append(here.close)
    return here.file


def _records(opening: Opening) -> RecordSide:
    db = _database(opening)
    opening.shared[NAME].roles.update({"records", "graph", "vectors"})

    def rewriter(drain: Callable[[], Awaitable[None]]) -> VectorRewriter:
        return EmbeddedVectorRewriter(db)

    return RecordSide(Counting(db.records, "records"), EmbeddedWriter(db), None, None, NAME, rewriter)


def _graph(opening: Opening) -> GraphStore:
    return Counting(_database(opening).graph, "graph")  # type: ignore[return-value]


def _vectors(opening: Opening) -> VectorIndex:
    return Counting(_database(opening).vectors, "vectors")  # type: ignore[return-value]


@contextlib.asynccontextmanager
async def _key_store(settings: Settings) -> AsyncIterator[RecordStore]:
    db = EmbeddedStore(":memory:", dim=None)
    try:
        yield db.records
    finally:
        db.close()


def _migrate(settings: Settings) -> dict[str, Any]:
    return {"schema_versions": "in memory: made at each start"}


BACKEND = Backend(
    name=NAME,
    title="the in-memory store",
    summary="every store in one SQLite database in memory, its calls counted (tests)",
    roles=frozenset({"records", "graph", "vectors"}),
    open_records=_records,
    open_graph=_graph,
    open_vectors=_vectors,
    key_store=_key_store,
    migrate=_migrate,
)
