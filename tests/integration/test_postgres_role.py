"""HRT connects to PostgreSQL as a role that owns its database, not as the superuser (#30,
finding 11): the dev stack (``hrt dev up``, the fixtures) and docker-compose.yml's init script
make that role, HRT's migrations, writes and reads work through it, and a superuser DSN is warned
about at start. Against real PostgreSQL servers started by the fixtures."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import psycopg
import pytest

from hrt import devstack
from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from hrt.stores.postgres.migrate import applied_versions, bundled_migrations, migrate
from hrt.stores.postgres.records import PostgresRecordStore
from tests.conftest import FIXED_NOW
from tests.helpers import HashingEmbedder, jsonl, small_graph

pytestmark = pytest.mark.integration

INIT_SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "postgres-init" / "10-hrt-role.sh"
ALL_VERSIONS = [m.version for m in bundled_migrations()]
PG_RECORDS_LOG = "hrt.stores.postgres.records"


@pytest.fixture(autouse=True)
def no_ambient_postgres_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """libpq would take a password from PGPASSWORD or ~/.pgpass: each connection here must get in
    with its own DSN's password alone."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))


def role_of(dsn: str) -> tuple[str, str, bool, bool, bool]:
    """(current_user, current_database, rolsuper, rolcreatedb, rolcreaterole) of a DSN."""
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        row = conn.execute(
            "SELECT current_user, current_database(), rolsuper, rolcreatedb, rolcreaterole "
            "FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert row is not None
    return row


def owners(dsn: str) -> set[str]:
    """The owners of the database and of everything in its public schema but the schema itself."""
    with psycopg.connect(dsn, connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database() "
            "UNION SELECT pg_get_userbyid(c.relowner) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'S', 'v', 'm')"
        ).fetchall()
    return {r[0] for r in rows}


async def ingest_and_retrieve(dsn: str, db_path: Path) -> list[str]:
    """Ingest the small graph through ``dsn`` and retrieve from it: the memory units' ids."""
    user = "role-" + uuid.uuid4().hex[:8]
    settings = Settings(db_path=db_path, record_store="postgres", postgres_dsn=dsn, preload_users=0)
    svc = await HRTService(settings, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW).start()
    try:
        written = await svc.ingest(parse_jsonl(jsonl(small_graph(user))))
        assert written.upserted > 0, written
        out = await svc.retrieve(
            RetrieveRequest(user_id=user, key_phrases=["Project Phoenix"], as_of="2025-08-01T00:00:00Z")
        )
        assert out.retrieval_metadata.deployment.startswith("postgres")
        return [m.muid for m in out.retrieved_memory_units]
    finally:
        await svc.close()


def assert_superuser_only_statements_refused(dsn: str) -> None:
    """What a superuser's DSN would hand whoever gets it: programs run as the server's OS user,
    the server's files, new databases and roles. HRT's role gets none of them."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        for statement in (
            "COPY (SELECT 1) TO PROGRAM 'true'",
            "SELECT pg_read_file('PG_VERSION')",
            "CREATE DATABASE hrt_never",
            "CREATE ROLE hrt_never",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)


async def test_the_dev_stack_hands_hrt_a_role_that_owns_its_database_and_is_no_superuser(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """A stack of its own (PostgreSQL alone, under a second with initdb): the DSN in stack.env is
    the hrt role on the hrt database it owns, not a superuser; `hrt migrate` (the CLI, from
    stack.env) and an ingest + retrieve work through it; nothing warns about a superuser. A
    stack.json from before the role gets the role's password on the next ``up``."""
    directory = Path(tempfile.mkdtemp(prefix="hrt-pgrole-"))
    try:
        stack = devstack.up(directory, ("postgres",))
        written = dict(
            line.split("=", 1) for line in (directory / "stack.env").read_text().splitlines() if line.strip()
        )
        dsn = written["HRT_POSTGRES_DSN"].strip("'")
        assert dsn == stack.postgres_dsn == stack.env()["HRT_POSTGRES_DSN"]
        assert role_of(dsn) == ("hrt", "hrt", False, False, False)
        assert role_of(stack.postgres_admin_dsn)[:3] == ("postgres", "postgres", True)
        assert_superuser_only_statements_refused(dsn)

        env = {k: v for k, v in os.environ.items() if not k.startswith("HRT_")}
        env.update(stack.env(), HRT_RECORD_STORE="postgres", HRT_DB_PATH=str(tmp_path / "projections.db"))
        migrated = subprocess.run(
            [sys.executable, "-m", "hrt.cli", "migrate"], capture_output=True, text=True, env=env, timeout=300
        )
        assert migrated.returncode == 0, migrated.stderr
        assert json.loads(migrated.stdout)["postgres"]["applied_now"] == ALL_VERSIONS
        assert owners(dsn) == {"hrt"}  # the database and every table HRT's migrations made

        with caplog.at_level(logging.WARNING, logger=PG_RECORDS_LOG):
            ids = await ingest_and_retrieve(dsn, tmp_path / "projections.db")
        assert ids
        assert not [r for r in caplog.records if "superuser" in r.getMessage()]

        # a stack.json written before the hrt role existed: the next up makes up a password for
        # the role and sets it; the data (and the role's tables) stay
        devstack.down(directory)
        raw = json.loads((directory / "stack.json").read_text())
        old_password = raw["credentials"].pop("postgres_hrt_password")
        (directory / "stack.json").write_text(json.dumps(raw))
        again = devstack.up(directory, ("postgres",))
        assert again.postgres_hrt_password != old_password
        assert role_of(again.postgres_dsn)[:3] == ("hrt", "hrt", False)
        assert applied_versions(again.postgres_dsn) == ALL_VERSIONS
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(again.postgres_dsn.replace(again.postgres_hrt_password, old_password), connect_timeout=5)
        stored = devstack.Stack.load(directory)
        assert stored is not None and stored.postgres_hrt_password == again.postgres_hrt_password
    finally:
        devstack.down(directory)
        shutil.rmtree(directory, ignore_errors=True)


def test_each_test_database_is_owned_by_the_hrt_role(postgres_dsn: str) -> None:
    """The fixtures make databases as the superuser and hand HRT the hrt role's DSN for them."""
    assert role_of(postgres_dsn)[2:] == (False, False, False)
    assert role_of(postgres_dsn)[0] == devstack.HRT_POSTGRES_ROLE
    assert migrate(postgres_dsn) == ALL_VERSIONS
    assert owners(postgres_dsn) == {devstack.HRT_POSTGRES_ROLE}


async def test_a_superuser_dsn_is_warned_about_at_start_and_still_served(
    postgres_stack: devstack.Stack, postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A warning, not a refusal: deployments made with the superuser keep working."""
    for dsn, warned in ((postgres_stack.postgres_admin_dsn, True), (postgres_dsn, False)):
        caplog.clear()
        store = PostgresRecordStore(dsn)
        with caplog.at_level(logging.WARNING, logger=PG_RECORDS_LOG):
            await store.open()
        try:  # opened and serving queries, warned or not
            async with store.reading("test") as conn:
                assert await (await conn.execute("SELECT current_user")).fetchone() == (role_of(dsn)[0],)
        finally:
            await store.close()
        warnings = [r.getMessage() for r in caplog.records if "superuser" in r.getMessage()]
        assert bool(warnings) is warned, (dsn.split("password=")[0], warnings)
        if warned:
            assert "connects as postgres" in warnings[0] and "docs/deployment.md" in warnings[0]
            assert postgres_stack.postgres_password not in warnings[0]


def run_init_script(stack: devstack.Stack, role: str, db: str, password: str) -> subprocess.CompletedProcess[str]:
    """docker-compose.yml's init script as the postgres image runs it: the superuser's name and
    the HRT_DB_* variables in its environment (here with libpq's PG* variables for the server)."""
    env = {
        "PATH": f"{devstack.PG_BIN}:/usr/bin:/bin",
        "PGHOST": "127.0.0.1",
        "PGPORT": str(stack.services["postgres"].ports["port"]),
        "PGPASSWORD": stack.postgres_password,
        "PGPASSFILE": "/dev/null",
        "POSTGRES_USER": devstack.POSTGRES_USER,
        "HRT_DB_USER": role,
        "HRT_DB_NAME": db,
        "HRT_DB_PASSWORD": password,
    }
    return subprocess.run([str(INIT_SCRIPT)], capture_output=True, text=True, env=env, timeout=120)


async def test_the_compose_init_script_makes_the_role_and_hands_it_an_older_database(
    postgres_stack: devstack.Stack, tmp_path: Path
) -> None:
    """A volume made before the role (HRT migrated and wrote as the superuser): the script, run by
    hand, makes the role and gives it the database and every table, and HRT goes on as the role.
    Run again it changes nothing but the password. On an empty server it makes the database."""
    suffix = uuid.uuid4().hex[:8]
    role, old_db, new_db = f"hrt_r_{suffix}", f"hrt_old_{suffix}", f"hrt_new_{suffix}"
    admin = postgres_stack.postgres_admin_dsn
    port = postgres_stack.services["postgres"].ports["port"]

    def dsn(db: str, password: str) -> str:
        return devstack._pg_dsn(port, role, password, db)

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {old_db}")  # as docker-compose.yml's POSTGRES_DB made it
    try:
        superuser_dsn = admin.replace("dbname=postgres", f"dbname={old_db}")
        assert migrate(superuser_dsn) == ALL_VERSIONS
        before = await ingest_and_retrieve(superuser_dsn, tmp_path / "before.db")
        assert before and owners(superuser_dsn) == {"postgres"}

        first = run_init_script(postgres_stack, role, old_db, "first-password")
        assert first.returncode == 0, first.stderr
        hrt_dsn = dsn(old_db, "first-password")
        assert role_of(hrt_dsn) == (role, old_db, False, False, False)
        assert owners(hrt_dsn) == {role}
        assert_superuser_only_statements_refused(hrt_dsn)
        assert migrate(hrt_dsn) == []  # the superuser's migrations, now the role's
        assert await ingest_and_retrieve(hrt_dsn, tmp_path / "after.db")  # writes: tables and sequences

        again = run_init_script(postgres_stack, role, old_db, "second-password")
        assert again.returncode == 0, again.stderr
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(hrt_dsn, connect_timeout=5)
        assert role_of(dsn(old_db, "second-password"))[:3] == (role, old_db, False)

        fresh = run_init_script(postgres_stack, role, new_db, "second-password")
        assert fresh.returncode == 0, fresh.stderr
        fresh_dsn = dsn(new_db, "second-password")
        assert migrate(fresh_dsn) == ALL_VERSIONS and owners(fresh_dsn) == {role}

        refused = run_init_script(postgres_stack, devstack.POSTGRES_USER, new_db, "x")
        assert refused.returncode != 0 and "must not be the superuser" in refused.stderr
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            for db in (old_db, new_db):
                conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
            conn.execute(f"DROP ROLE IF EXISTS {role}")
