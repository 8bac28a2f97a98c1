"""Every store of the dev stack runs with authentication on: each refuses a client without
credentials (and one with wrong ones) and serves one with the credentials ``hrt dev up`` made, and
HRT, configured from stack.env alone, works against all three."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
from neo4j import GraphDatabase
from neo4j.exceptions import AuthError

from hrt import devstack
from hrt.config import Settings
from hrt.contract import RetrieveRequest
from hrt.errors import StoreError
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from hrt.stores.postgres.migrate import migrate
from hrt.stores.weaviate.vectors import WeaviateVectorIndex
from tests.conftest import FIXED_NOW, StackManager
from tests.helpers import HashingEmbedder, jsonl, small_graph

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def no_ambient_postgres_password(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """libpq would take a password from PGPASSWORD or ~/.pgpass: the refusals below must be the
    server's, whatever this machine's environment holds."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))


def test_postgres_refuses_a_client_without_the_password(stack_manager: StackManager) -> None:
    stack = stack_manager.need("postgres")
    port = stack.services["postgres"].ports["port"]
    bare = f"host=127.0.0.1 port={port} user=postgres dbname=postgres"
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(bare, connect_timeout=5)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(bare, password="not-the-password", connect_timeout=5)
    assert "password=" + stack.postgres_password in stack.postgres_admin_dsn
    with psycopg.connect(stack.postgres_admin_dsn, connect_timeout=5) as conn:
        assert conn.execute("SELECT current_user, current_setting('password_encryption')").fetchone() == (
            "postgres",
            "scram-sha-256",
        )
        # the hrt role's password is stored as a SCRAM verifier too
        verifier = conn.execute("SELECT rolpassword FROM pg_authid WHERE rolname = 'hrt'").fetchone()
        assert verifier is not None and verifier[0].startswith("SCRAM-SHA-256$")
    # HRT's own DSN: the hrt role, with its own password, refused without it
    assert "password=" + stack.postgres_hrt_password in stack.postgres_dsn
    hrt_bare = f"host=127.0.0.1 port={port} user=hrt dbname=hrt"
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(hrt_bare, password=stack.postgres_password, connect_timeout=5)  # not the superuser's
    with psycopg.connect(stack.postgres_dsn, connect_timeout=5) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("hrt",)
    # hrt migrate says the credentials are wrong, not that PostgreSQL is down
    from hrt.errors import StoreUnavailable
    from hrt.stores.postgres.migrate import migrate

    with pytest.raises(StoreError, match="refused the credentials") as refused:
        migrate(bare + " password=not-the-password")
    assert not isinstance(refused.value, StoreUnavailable)
    # what initdb wrote: no TCP line lets anyone in without a password
    assert devstack._pg_hba_problems(Path(stack.services["postgres"].data_dir)) == []


def test_neo4j_refuses_a_driver_without_credentials(stack_manager: StackManager) -> None:
    stack = stack_manager.need("neo4j")
    # no credentials, then Neo4j's default password (the password of a Neo4j nobody set up): one
    # failed login of the neo4j user only, as Neo4j locks a user out for 5 s after 3 in a row
    for auth in (None, ("neo4j", "neo4j")):
        with GraphDatabase.driver(stack.neo4j_uri, auth=auth) as driver, pytest.raises(AuthError):
            driver.execute_query("RETURN 1 AS one", database_="neo4j")
    assert stack.neo4j_auth == ("neo4j", stack.neo4j_password) and len(stack.neo4j_password) >= 32
    with GraphDatabase.driver(stack.neo4j_uri, auth=stack.neo4j_auth) as driver:
        assert driver.execute_query("RETURN 1 AS one", database_="neo4j").records[0]["one"] == 1
        # a password set before the first start, not one Neo4j asks to change
        users = driver.execute_query("SHOW CURRENT USER YIELD user, passwordChangeRequired", database_="system")
        assert [(r["user"], r["passwordChangeRequired"]) for r in users.records] == [("neo4j", False)]


async def test_weaviate_refuses_a_request_without_the_api_key(stack_manager: StackManager) -> None:
    stack = stack_manager.need("weaviate")
    base = f"http://127.0.0.1:{stack.weaviate_http_port}"
    with httpx.Client(base_url=base, timeout=10, trust_env=False) as http:
        assert http.get("/v1/schema").status_code == 401
        assert http.get("/v1/schema", headers={"Authorization": "Bearer not-the-key"}).status_code == 401
        assert http.get("/v1/schema", headers={"Authorization": f"Bearer {stack.weaviate_api_key}"}).status_code == 200
        assert http.get("/v1/.well-known/ready").status_code == 200  # what docker-compose's healthcheck reads
    # HRT's adapter: without the key it cannot even connect (the client's start-up checks are refused)
    anonymous = WeaviateVectorIndex("127.0.0.1", stack.weaviate_http_port, stack.weaviate_grpc_port)
    with pytest.raises(StoreError, match="401"):
        await anonymous.open()
    await anonymous.close()
    keyed = WeaviateVectorIndex(
        "127.0.0.1",
        stack.weaviate_http_port,
        stack.weaviate_grpc_port,
        collection="HRTAuth" + uuid.uuid4().hex[:8],
        api_key=stack.weaviate_api_key,
    )
    try:
        await keyed.open()
        await keyed.apply_schema()  # creates the collection, then reads it back: both need the key
        assert await keyed._client.collections.exists(keyed.collection_name)
        await keyed.ping()  # the node's own schema read (consistency: false) takes the key too
    finally:
        await keyed._client.collections.delete(keyed.collection_name)
        await keyed.close()


async def test_hrt_works_against_the_stack_from_stack_env_alone(
    stack_manager: StackManager, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The variables of stack.env are all HRT needs (the secrets included): ingest reaches all
    three stores, retrieval reads from them."""
    stack = stack_manager.need("postgres", "neo4j", "weaviate")
    written = dict(
        line.split("=", 1) for line in (Path(stack.dir) / "stack.env").read_text().splitlines() if line.strip()
    )
    env = {k: v.strip("'") for k, v in written.items()}
    assert env == stack.env()
    env["HRT_POSTGRES_DSN"] = postgres_dsn  # this test's own database on the stack's server (same role)
    for name, value in {
        **env,
        "HRT_RECORD_STORE": "postgres",
        "HRT_GRAPH_STORE": "neo4j",
        "HRT_VECTOR_INDEX": "weaviate",
        "HRT_WEAVIATE_COLLECTION": "HRTAuth" + uuid.uuid4().hex[:8],
        "HRT_DB_PATH": str(tmp_path / "unused.db"),
        "HRT_PRELOAD_USERS": "0",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    assert settings.neo4j_password is not None and settings.weaviate_api_key is not None
    assert (settings.neo4j_user, settings.neo4j_password.get_secret_value()) == stack.neo4j_auth
    assert settings.weaviate_api_key.get_secret_value() == stack.weaviate_api_key
    migrate(settings.postgres_dsn)
    user = "auth-" + uuid.uuid4().hex[:8]
    svc = await HRTService(settings, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW).start()
    try:
        await svc.ingest(parse_jsonl(jsonl(small_graph(user))))
        out = await svc.retrieve(
            RetrieveRequest(user_id=user, key_phrases=["Project Phoenix"], as_of="2025-08-01T00:00:00Z")
        )
        assert out.retrieval_metadata.deployment == "postgres+neo4j+weaviate"
        assert out.retrieved_memory_units and out.retrieved_concepts
        assert not out.retrieval_metadata.degraded
    finally:
        await svc.graph.delete_user(user)
        await svc.vectors.delete_user(user)
        await getattr(svc.vectors, "inner", svc.vectors)._client.collections.delete(settings.weaviate_collection)
        await svc.close()
