"""The whole server with all-real backends: ``hrt serve`` over PostgreSQL + Neo4j + Weaviate
processes started by the fixtures, with the real embedding model."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hrt import devstack
from hrt.cli import sample_data_path
from hrt.contract import AugmentedMemoryContext
from tests.helpers import scratch_stack
from tests.integration.conftest import ServerProcess, start_hrt_server

pytestmark = pytest.mark.integration

SAMPLE_USERS = ("u-maya", "u-tom", "u-sara")
REQUESTS = [
    {"user_id": "u-maya", "key_phrases": ["Project Phoenix timeline", "team bandwidth"]},
    {"user_id": "u-tom", "key_phrases": ["Postgres migration", "on-call incident"], "max_depth": 1},
    {"user_id": "u-sara", "query": "How did the onboarding flow usability tests go?"},
    {"user_id": "u-maya", "key_phrases": ["pricing decision"], "max_depth": 0},
]


def services_env(dsn: str, stack: devstack.Stack, weaviate: devstack.Stack, tmp: Path) -> dict[str, str]:
    return {
        **os.environ,
        "HRT_RECORD_STORE": "postgres",
        "HRT_GRAPH_STORE": "neo4j",
        "HRT_VECTOR_INDEX": "weaviate",
        "HRT_POSTGRES_DSN": dsn,
        "HRT_NEO4J_URI": stack.neo4j_uri,
        # every store runs with auth on; this test's own Weaviate has its own key
        "HRT_NEO4J_USER": stack.neo4j_user,
        "HRT_NEO4J_PASSWORD": stack.neo4j_password,
        "HRT_WEAVIATE_HTTP_PORT": str(weaviate.weaviate_http_port),
        "HRT_WEAVIATE_GRPC_PORT": str(weaviate.weaviate_grpc_port),
        "HRT_WEAVIATE_API_KEY": weaviate.weaviate_api_key,
        "HRT_WEAVIATE_COLLECTION": "HRTServer" + uuid.uuid4().hex[:8],
        "HRT_DB_PATH": str(tmp / "unused.db"),
        "HRT_REQUEST_TIMEOUT_S": "8",
        "HRT_RERANK_BUDGET_S": "5",
        "HRT_LOG_LEVEL": "WARNING",
    }


def start_services_server(dsn: str, stack: devstack.Stack, weaviate: devstack.Stack, tmp: Path) -> ServerProcess:
    """``hrt migrate`` on ``dsn``, then ``hrt serve`` over the services (log: ``tmp/server.log``)."""
    env = services_env(dsn, stack, weaviate, tmp)
    migrated = subprocess.run(
        [sys.executable, "-m", "hrt.cli", "migrate"], env=env, capture_output=True, text=True, timeout=120
    )
    assert migrated.returncode == 0, migrated.stderr
    return start_hrt_server(tmp / "unused.db", tmp / "server.log", env=env)


async def mcp_retrieve(server: ServerProcess, body: dict[str, object]) -> bytes:
    """``retrieve_memory`` through ``/mcp`` with the SDK's own client; the JSON block it answers."""
    async with (
        httpx2.AsyncClient(headers=server.headers, timeout=60) as http,
        Client(streamable_http_client(f"{server.base_url}/mcp", http_client=http)) as client,
    ):
        result = await client.call_tool("retrieve_memory", body)
    assert not result.is_error, result.content
    return result.content[1].text.encode()


@pytest.fixture
def own_weaviate():
    """A Weaviate for this test alone, so it can be killed mid-run."""
    with scratch_stack("hrt-wv-", ("weaviate",)) as (_, stack):
        yield stack


def test_all_real_backends_end_to_end(postgres_dsn, stack_manager, own_weaviate, tmp_path):
    stack = stack_manager.need("neo4j")
    server = start_services_server(postgres_dsn, stack, own_weaviate, tmp_path)
    try:
        with server.client(timeout=60) as c:
            for user in SAMPLE_USERS:  # Neo4j is shared across tests: start from nothing
                assert c.delete(f"/v1/users/{user}").status_code == 200
            r = c.post(
                "/v1/ingest", content=sample_data_path().read_bytes(), headers={"content-type": "application/x-ndjson"}
            )
            assert r.status_code == 200, r.text
            ready = c.get("/readyz").json()
            assert ready["stores"] == {"records": "ok", "graph": "ok", "vectors": "ok"}
            assert ready["caches"] == "done"  # Neo4j planned retrieval's queries before /readyz said ready
            assert ready["deployment"] == "postgres+neo4j+weaviate"
            assert ready["graph_expansion"] == "procedure"  # the dev stack installs neo4j-plugin/
            docs = []
            for body in REQUESTS:
                body = {**body, "as_of": "2025-12-31T00:00:00Z"}
                first, again = c.post("/v1/retrieve", json=body), c.post("/v1/retrieve", json=body)
                assert first.status_code == 200, first.text
                assert first.content == again.content  # deterministic
                doc = AugmentedMemoryContext.model_validate_json(first.content)
                prefix = body["user_id"].split("-")[1] + "-"
                ids = [m.muid for m in doc.retrieved_memory_units] + [x.id for x in doc.retrieved_concepts]
                assert ids and all(i.startswith(prefix) for i in ids), ids  # shared names, separate tenants
                assert doc.retrieval_metadata.deployment == "postgres+neo4j+weaviate"
                assert doc.retrieval_metadata.missing_records == {}
                docs.append(doc)
            # one MCP tool call through the same server answers the REST route's canonical JSON
            body = {**REQUESTS[0], "as_of": "2025-12-31T00:00:00Z", "render": {}}
            assert asyncio.run(mcp_retrieve(server, body)) == c.post("/v1/retrieve", json=body).content
            # a delete reaches all three stores
            assert c.delete("/v1/users/u-tom/entities/concept/tom-c-postgres").json()["deleted"] == 1
            after = AugmentedMemoryContext.model_validate_json(
                c.post("/v1/retrieve", json={**REQUESTS[1], "as_of": "2025-12-31T00:00:00Z"}).content
            )
            assert "tom-c-postgres" not in {x.id for x in after.retrieved_concepts}
            assert all(
                "tom-c-postgres" not in [n.id for n in m.connected_concept_ids_and_names]
                for m in after.retrieved_memory_units
            )
            # one store dies mid-run: within the request budget, never a hang, never other data; the
            # retrieval answers degraded from PostgreSQL, naming the store (docs/reliability.md)
            devstack.stop_pid(own_weaviate.services["weaviate"].pid, grace=5)
            start = time.monotonic()
            down = c.post("/v1/retrieve", json={**REQUESTS[0], "as_of": "2025-12-31T00:00:00Z"}, timeout=60)
            elapsed = time.monotonic() - start
            assert down.status_code == 200, down.text
            meta = down.json()["retrieval_metadata"]
            assert meta["degraded"] and meta["stages"]["grounding"] == "degraded", meta
            assert [r for r in meta["degraded_reasons"] if r.startswith("grounding: Weaviate unavailable")], meta
            down_doc = AugmentedMemoryContext.model_validate_json(down.content)
            ids = [m.muid for m in down_doc.retrieved_memory_units] + [x.id for x in down_doc.retrieved_concepts]
            assert all(i.startswith("maya-") for i in ids), ids  # never other data
            assert elapsed < 8 + 5  # the request budget (HRT_REQUEST_TIMEOUT_S=8) plus slack
            readyz = c.get("/readyz")
            assert readyz.status_code == 503 and readyz.json()["stores"]["vectors"] == "unavailable"
            # writes still land in PostgreSQL (the outbox holds the projection for later)
            w = c.post(
                "/v1/ingest",
                json={"records": [{"kind": "concept", "user_id": "u-maya", "id": "maya-c-new", "name": "New concept"}]},
            )
            assert w.status_code == 200, w.text
    finally:
        server.stop()
        cleanup = subprocess.run(
            [
                sys.executable,
                "-c",
                "import asyncio,sys\nfrom hrt.stores.neo4j.graph import Neo4jGraphStore\n"
                "async def m():\n g=Neo4jGraphStore(sys.argv[1],auth=(sys.argv[2],sys.stdin.read()))\n"
                " [await g.delete_user(u) for u in ('u-maya','u-tom','u-sara')]\n await g.close()\nasyncio.run(m())",
                stack.neo4j_uri,
                stack.neo4j_user,
            ],
            input=stack.neo4j_password,  # a secret: not on a command line
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cleanup.returncode == 0, cleanup.stderr


def test_starting_neo4j_logs_no_retry_warnings(caplog, tmp_path):
    """``hrt dev up`` waits for Neo4j with a probe that does not retry: the driver's managed
    transactions would log a warning for every attempt while Neo4j starts, which reads as a failure."""
    with caplog.at_level(logging.INFO), devstack.running(tmp_path / "stack", ("neo4j",)) as stack:
        assert devstack.port_open(stack.services["neo4j"].ports["bolt"])
    noisy = [r.getMessage() for r in caplog.records if r.name.startswith("neo4j") and r.levelno >= logging.WARNING]
    assert noisy == []
