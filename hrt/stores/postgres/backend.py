"""The PostgreSQL backend as the registry lists it: the record store of the services deployment.

It keeps every record, its vector and its relations, with an outbox that the projector delivers to
the graph and vector backends (any of them), and answers retrieval's reads while one of them is
down (:mod:`hrt.stores.fallback`). Its pool runs under a circuit, so a PostgreSQL that is down is
refused at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any

from hrt.config import Settings
from hrt.errors import StoreError
from hrt.stores.backend import Backend, Opening, RecordSide
from hrt.stores.base import RecordStore, VectorRewriter

if TYPE_CHECKING:
    from hrt.stores.postgres.records import PostgresRecordStore

NAME = "postgres"


def _store(settings: Settings, max_size: int, embedder: tuple[int, str] | None = None) -> PostgresRecordStore:
    from hrt.stores.postgres.records import PostgresRecordStore  # psycopg is imported when it is chosen

    return PostgresRecordStore(dsn(settings), max_size=max_size, embedder=embedder)


def dsn(settings: Settings) -> str:
    if not settings.postgres_dsn:
        raise StoreError("HRT_RECORD_STORE=postgres needs HRT_POSTGRES_DSN")
    return settings.postgres_dsn


def _records(opening: Opening) -> RecordSide:
    s = opening.settings
    from hrt.stores.postgres.records import quiet_pool_reconnects

    store = _store(s, s.postgres_pool_size, (opening.dim, opening.model_id))
    store.attach(opening.circuit("PostgreSQL", store.probe))
    quiet_pool_reconnects()

    def rewriter(drain: Callable[[], Awaitable[None]]) -> VectorRewriter:
        from hrt.stores.postgres.reembed import PostgresVectorRewriter

        return PostgresVectorRewriter(store, drain)

    return RecordSide(store, store, store, store, None, rewriter)


@contextlib.asynccontextmanager
async def _key_store(settings: Settings) -> AsyncIterator[RecordStore]:
    store = _store(settings, 1)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def _migrate(settings: Settings) -> dict[str, Any]:
    from hrt.stores.postgres.migrate import applied_versions, migrate

    applied = migrate(dsn(settings))
    return {"applied_now": applied, "schema_versions": applied_versions(dsn(settings))}


BACKEND = Backend(
    name=NAME,
    title="PostgreSQL",
    summary="PostgreSQL: the source of truth, with an outbox the projector delivers to the graph and vectors",
    roles=frozenset({"records"}),
    variables=("HRT_POSTGRES_DSN", "HRT_POSTGRES_POOL_SIZE"),
    open_records=_records,
    key_store=_key_store,
    migrate=_migrate,
    dev_service="postgres",
)
