from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from hrt import devstack
from hrt.config import Settings
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from tests.helpers import HashingEmbedder, jsonl, small_graph

if TYPE_CHECKING:
    from hrt.stores.postgres.records import PostgresRecordStore

FIXED_NOW = datetime(2025, 8, 1, tzinfo=UTC)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(db_path=tmp_path / "hrt.db")


@pytest.fixture
async def hashing_service(settings: Settings) -> AsyncIterator[HRTService]:
    """An embedded HRT over a fresh SQLite file, with the hashing test embedder."""
    svc = HRTService(settings, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW)
    yield svc
    await svc.close()


@pytest.fixture
async def loaded_service(hashing_service: HRTService) -> HRTService:
    await hashing_service.ingest(parse_jsonl(jsonl(small_graph("u1") + small_graph("u2", prefix="x"))))
    return hashing_service


@pytest.fixture
async def api(loaded_service: HRTService, settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The app over ``loaded_service``, in process (requests carry no key unless a test adds one)."""
    from hrt.api import create_app

    app = create_app(settings, service=loaded_service)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        yield c


# ------------------------------------------------------------------------------------------
# real services (PostgreSQL, Neo4j, Weaviate), started on first use
# ------------------------------------------------------------------------------------------


class StackManager:
    """Starts dev-stack services on first use (or reuses the stack in ``$HRT_DEV_DIR``, as left by
    ``hrt dev up``) and stops, at the end of the session, what it started, removing the data
    directory it made (each session's servers hold ~0.6 GB). A service that cannot start fails the
    tests that need it: never a skip."""

    def __init__(self) -> None:
        reuse = os.environ.get("HRT_DEV_DIR")
        self.made = reuse is None
        self.dir = Path(reuse) if reuse else Path(tempfile.mkdtemp(prefix="hrt-stack-"))
        self.started: list[int] = []

    def need(self, *services: str) -> devstack.Stack:
        before = devstack.Stack.load(self.dir)
        live = {n for n, i in (before.services.items() if before else []) if devstack._alive(i.pid)}
        stack = devstack.up(self.dir, services)
        self.started += [stack.services[n].pid for n in services if n not in live]
        return stack

    def close(self) -> None:
        for pid in self.started:
            devstack.stop_pid(pid)
        if self.made:
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def stack_manager() -> Iterator[StackManager]:
    manager = StackManager()
    yield manager
    manager.close()


@pytest.fixture(scope="session")
def postgres_stack(stack_manager: StackManager) -> devstack.Stack:
    return stack_manager.need("postgres")


@pytest.fixture
def postgres_dsn(postgres_stack: devstack.Stack) -> Iterator[str]:
    """A fresh, empty database per test on the shared server, and HRT's DSN for it: made by the
    superuser, owned by the ``hrt`` role HRT connects as (no superuser), as in a deployment."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(postgres_stack.postgres_admin_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} OWNER {devstack.HRT_POSTGRES_ROLE}")
    yield postgres_stack.postgres_dsn_for(name)
    with psycopg.connect(postgres_stack.postgres_admin_dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def pg_records(postgres_dsn: str) -> AsyncIterator[PostgresRecordStore]:
    from hrt.stores.postgres.migrate import migrate
    from hrt.stores.postgres.records import PostgresRecordStore

    migrate(postgres_dsn)
    store = PostgresRecordStore(postgres_dsn)
    await store.open()
    yield store
    await store.close()
