"""Replicas over one services stack (issue #22): two HRT processes over the same real PostgreSQL,
Neo4j and Weaviate, writing and deleting the same keys while both project the shared outbox.

The first test forces the interleaving that broke the projector before the per-target lease:
replica A reads a record's state for delivery and pauses before writing it to Neo4j and Weaviate;
replica B then deletes one record and updates another, and tries to project; A then writes what it
read. With no lease (today's code before this change), B projected the delete and the update, A's
late write put the deleted memory back and the old text over the new, and the outbox said done.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pydantic import SecretStr

from hrt.config import Settings
from hrt.doctor import check
from hrt.errors import StoreError
from hrt.ingest import build_batch, parse_jsonl
from hrt.records import EdgeType, Kind
from hrt.service import HRTService
from hrt.stores.postgres.migrate import migrate
from hrt.stores.projection import graph_edge, graph_node, passage_bytes, vector_doc
from tests.helpers import HashingEmbedder, concept, jsonl, mu, outbox_rows, rel

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

# Replica A, in its own process. "pause": one drain whose writes to either target wait, once the
# record named by argv[3] is in a batch (its state has been read), for the file `go` (announcing
# `read-graph` / `read-vector` first). "churn": a writing replica with the background projector on.
REPLICA = """
import asyncio, json, sys
from pathlib import Path
from hrt.config import load_settings
from hrt.service import HRTService
from tests.helpers import HashingEmbedder
from tests.integration.test_replicas import Pausing, churn


async def main():
    mode = sys.argv[1]
    svc = await HRTService(load_settings(), embedder=HashingEmbedder()).start(background_projector=mode == "churn")
    try:
        if mode == "pause":
            p, signals, key = svc.projector, Path(sys.argv[2]), sys.argv[3]
            p.targets = {
                "graph": Pausing(p.targets["graph"], "upsert_nodes", key, signals / "read-graph", signals / "go"),
                "vector": Pausing(p.targets["vector"], "upsert", key, signals / "read-vector", signals / "go"),
            }
            report = await p.drain()
            print(json.dumps({"delivered": report.delivered, "failed": report.failed}))
        else:
            await churn(svc, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    finally:
        await svc.close()


asyncio.run(main())
"""


class Pausing:
    """Wraps a projection target: the first ``method`` call whose items include ``key`` (the
    record's state has been read for delivery) touches ``announce`` and waits for ``go`` before it
    writes."""

    def __init__(self, inner: Any, method: str, key: str, announce: Path, go: Path) -> None:
        self.inner, self.method, self.key, self.announce, self.go = inner, method, key, announce, go
        self.paused = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != self.method:
            return attr

        async def write(user_id: str, items: Any) -> Any:
            if not self.paused and any(i.id == self.key for i in items):
                self.paused = True
                self.announce.touch()
                deadline = time.monotonic() + 300
                while not self.go.exists() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
            return await attr(user_id, items)

        return write


async def churn(svc: HRTService, user: str, seed: int, rounds: int) -> None:
    """A writer: ``rounds`` upserts (with a MENTIONS edge of varying weight) and deletes of six
    memory units every writer shares, each answered after its read-your-writes drain."""
    rng = random.Random(seed)
    for r in range(rounds):
        key = f"m{rng.randrange(6)}"
        if rng.random() < 0.35:
            await svc.delete_entity(user, Kind.MEMORY_UNIT, key)
        else:
            records = [
                mu(user, key, f"{key} written in round {r} by writer {seed}", tags=[f"w{seed}", f"r{r % 3}"]),
                rel(user, "MENTIONS", key, rng.choice(["c-a", "c-b"]), weight=rng.choice([0.25, 0.5, 1.0])),
            ]
            await svc.ingest(parse_jsonl(jsonl(records)))


@pytest.fixture
def services(postgres_dsn: str, stack_manager: Any, tmp_path: Path) -> dict[str, str]:
    """HRT_* variables of one services stack (a fresh PostgreSQL database, the shared Neo4j and
    Weaviate, a Weaviate collection of this test's own)."""
    migrate(postgres_dsn)
    stack = stack_manager.need("neo4j", "weaviate")
    return {
        "HRT_RECORD_STORE": "postgres",
        "HRT_GRAPH_STORE": "neo4j",
        "HRT_VECTOR_INDEX": "weaviate",
        "HRT_POSTGRES_DSN": postgres_dsn,
        "HRT_NEO4J_URI": stack.neo4j_uri,
        "HRT_NEO4J_USER": stack.neo4j_user,
        "HRT_NEO4J_PASSWORD": stack.neo4j_password,
        "HRT_WEAVIATE_HTTP_PORT": str(stack.weaviate_http_port),
        "HRT_WEAVIATE_GRPC_PORT": str(stack.weaviate_grpc_port),
        "HRT_WEAVIATE_API_KEY": stack.weaviate_api_key,
        "HRT_WEAVIATE_COLLECTION": "HRTReplicas" + uuid.uuid4().hex[:8],
        "HRT_DB_PATH": str(tmp_path / "unused.db"),
        "HRT_READ_YOUR_WRITES_TIMEOUT_S": "1",
        "HRT_LOG_LEVEL": "WARNING",
    }


def settings_of(env: dict[str, str]) -> Settings:
    return Settings(
        record_store="postgres",
        graph_store="neo4j",
        vector_index="weaviate",
        postgres_dsn=env["HRT_POSTGRES_DSN"],
        neo4j_uri=env["HRT_NEO4J_URI"],
        neo4j_user=env["HRT_NEO4J_USER"],
        neo4j_password=SecretStr(env["HRT_NEO4J_PASSWORD"]),
        weaviate_http_port=int(env["HRT_WEAVIATE_HTTP_PORT"]),
        weaviate_grpc_port=int(env["HRT_WEAVIATE_GRPC_PORT"]),
        weaviate_api_key=SecretStr(env["HRT_WEAVIATE_API_KEY"]),
        weaviate_collection=env["HRT_WEAVIATE_COLLECTION"],
        db_path=Path(env["HRT_DB_PATH"]),
        read_your_writes_timeout_s=float(env["HRT_READ_YOUR_WRITES_TIMEOUT_S"]),
    )


@pytest.fixture
async def replica_b(services: dict[str, str]) -> AsyncIterator[HRTService]:
    svc = await HRTService(settings_of(services), embedder=HashingEmbedder()).start()
    yield svc
    await svc.close()


def replica(mode: str, env: dict[str, str], *args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child has its own descriptor of it
        return subprocess.Popen(
            [sys.executable, "-c", REPLICA, mode, *args],
            env={**os.environ, **env},
            cwd=str(ROOT),
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def wait_for(path: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until ``path`` exists; fails when the replica exits first (never a silent hang: 300 s)."""
    deadline = time.monotonic() + 300
    while not path.exists():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"{path.name} never came: {log.read_text()[-3000:]}"
        await asyncio.sleep(0.05)


async def projections_equal_records(svc: HRTService, user: str) -> None:
    """Every projection equals PostgreSQL, record by record: each node and document is the
    projection of the record's current state, each edge its relation; nothing else is there."""
    kinds = await svc.records.ids(user)  # type: ignore[attr-defined]
    rows = await svc.records.entity_rows(user, sorted(kinds))  # type: ignore[attr-defined]
    nodes = await svc.graph.nodes(user)  # type: ignore[attr-defined]
    docs = await svc.vectors.docs(user)  # type: ignore[attr-defined]
    assert sorted(nodes) == sorted(docs) == sorted(rows)
    for ident, (entity, vector, _version, passages) in rows.items():
        assert nodes[ident] == graph_node(entity), ident
        want, have = vector_doc(entity, vector, passages), docs[ident]
        assert (have.kind, have.text, have.ts, sorted(have.tags), have.source_agent_id) == (
            want.kind,
            want.text,
            want.ts,
            sorted(want.tags),
            want.source_agent_id,
        ), ident
        assert np.array_equal(have.vector, np.asarray(want.vector, dtype=np.float32)), ident
        assert passage_bytes(have.passages) == passage_bytes(want.passages), ident
    relations = await svc.records.all_relations(user)  # type: ignore[attr-defined]
    assert await svc.graph.edges(user) == [graph_edge(r) for r in relations]  # type: ignore[attr-defined]


async def forget(svc: HRTService, user: str) -> None:
    await svc.graph.delete_user(user)
    await svc.vectors.delete_user(user)


async def test_a_late_delivery_never_brings_back_a_deleted_memory_or_old_text(services, replica_b, tmp_path):
    user = "rep-" + uuid.uuid4().hex[:8]
    b = replica_b
    data = [
        concept(user, "c-a", "Alpha", "the first concept"),
        concept(user, "c-b", "Beta", "the second concept"),
        mu(user, "m-gone", "a memory that is deleted while replica A delivers it"),
        mu(user, "m-kept", "the first version of a memory", tags=["v1"]),
        rel(user, "MENTIONS", "m-gone", "c-a"),
        rel(user, "MENTIONS", "m-kept", "c-b", weight=0.5),
    ]
    # committed with their outbox events, not projected: replica A delivers them
    await b.writer.apply(build_batch(parse_jsonl(jsonl(data)), b.embedder))
    signals = tmp_path / "signals"
    signals.mkdir()
    log = tmp_path / "replica-a.log"
    a = replica("pause", services, str(signals), "m-gone", log=log)
    try:
        # A has read m-gone and m-kept (version 1) and holds its writes to both stores
        await wait_for(signals / "read-graph", a, log)
        await wait_for(signals / "read-vector", a, log)
        # B deletes one, rewrites the other; each write's read-your-writes drain is bounded
        assert await b.delete_entity(user, Kind.MEMORY_UNIT, "m-gone") == 1
        await b.ingest(parse_jsonl(jsonl([mu(user, "m-kept", "the second version of a memory", tags=["v2"])])))
        # B waits (bounded) for its own events to reach the projections, whoever delivers them
        ryw = asyncio.ensure_future(b.projector.drain(wait=120))
        (signals / "go").touch()
        report = await ryw
        assert report.ok and not report.busy, report
        # read-your-writes: as soon as B's drain returns, B's writes are in both projections
        assert "m-gone" not in await b.graph.ids(user) and "m-gone" not in await b.vectors.ids(user)  # type: ignore[attr-defined]
        assert (await b.vectors.docs(user))["m-kept"].tags == ("v2",)  # type: ignore[attr-defined]
        assert await asyncio.to_thread(a.wait, 300) == 0, log.read_text()[-3000:]
        assert json.loads(log.read_text().strip().splitlines()[-1])["failed"] == {}
        # whatever A wrote late, nothing of it survives: no drift, record by record
        final = await b.projector.drain()
        assert final.ok and not final.busy
        assert await outbox_rows(b.records) == 0
        drift = await check(b.records, b.graph, b.vectors, [user])
        assert [d.as_dict() for d in drift if not d.clean] == []
        await projections_equal_records(b, user)
        nodes = await b.graph.nodes(user)  # type: ignore[attr-defined]
        assert "m-gone" not in nodes and nodes["m-kept"].tags == ("v2",)
    finally:
        if a.poll() is None:
            (signals / "go").touch()
            a.wait(60)
        await forget(b, user)


async def test_two_replicas_writing_and_deleting_the_same_keys_end_equal_to_postgres(services, tmp_path):
    user = "churn-" + uuid.uuid4().hex[:8]
    settings = settings_of(services)
    b = await HRTService(settings, embedder=HashingEmbedder()).start(background_projector=True)
    try:
        await b.ingest(parse_jsonl(jsonl([concept(user, "c-a", "Alpha"), concept(user, "c-b", "Beta")])))
        log = tmp_path / "replica-a.log"
        a = replica("churn", services, str(tmp_path), user, "1", "40", log=log)
        try:
            await churn(b, user, 2, 40)  # the same writer as replica A, in this process
            assert await asyncio.to_thread(a.wait, 600) == 0, log.read_text()[-3000:]
        finally:
            if a.poll() is None:
                a.kill()
                a.wait()
    finally:
        await b.close()
    # both replicas stopped: one last drain (as `hrt project` would), then nothing may differ
    c = await HRTService(settings, embedder=HashingEmbedder()).start()
    try:
        report = await c.projector.drain()
        assert report.ok and not report.busy and report.dead == {}, report
        assert await outbox_rows(c.records) == 0
        assert [d.as_dict() for d in await check(c.records, c.graph, c.vectors, [user]) if not d.clean] == []
        await projections_equal_records(c, user)
        counts = await c.records.counts(user)
        assert counts["concept"] == 2  # the writers' keys are a mix of written and deleted
    finally:
        await forget(c, user)
        await c.close()


def hrt_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hrt.cli", *args],
        env={**os.environ, **env},
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        timeout=300,
    )


async def test_doctor_finds_stale_content_and_edges_and_repair_mends_them(services, replica_b):
    from hrt.stores.base import GraphEdge

    user = "doc-" + uuid.uuid4().hex[:8]
    b = replica_b
    await b.ingest(
        parse_jsonl(
            jsonl(
                [
                    concept(user, "c-a", "Alpha"),
                    concept(user, "c-b", "Beta"),
                    mu(user, "m1", "the memory as recorded", tags=["t"]),
                    mu(user, "m2", "another memory"),
                    rel(user, "MENTIONS", "m1", "c-a", weight=0.5),
                    rel(user, "MENTIONS", "m2", "c-b"),
                ]
            )
        )
    )
    try:
        assert (await b.projector.drain()).ok  # what the write's bounded drain left, if anything
        assert all(d.clean for d in await check(b.records, b.graph, b.vectors, [user]))
        # drift that ids alone never show: every id is where it should be
        nodes = await b.graph.nodes(user)  # type: ignore[attr-defined]
        docs = await b.vectors.docs(user)  # type: ignore[attr-defined]
        await b.graph.upsert_nodes(user, [replace(nodes["c-a"], label="Alpha, as it was long ago")])
        await b.vectors.upsert(user, [replace(docs["m1"], text="an old text of the memory")])
        await b.graph.upsert_edges(user, [GraphEdge("m1", "c-a", EdgeType.MENTIONS, weight=0.9)])
        await b.graph.upsert_edges(user, [GraphEdge("m2", "c-a", EdgeType.MENTIONS)])  # no such relation
        await b.graph.delete_edges(user, [GraphEdge("m2", "c-b", EdgeType.MENTIONS)])
        (drift,) = await check(b.records, b.graph, b.vectors, [user])
        assert drift.stale_in_graph == {"concept": ["c-a"]} and drift.stale_in_vectors == {"memory_unit": ["m1"]}
        assert drift.stale_edges == ["m1 -[MENTIONS]-> c-a"]
        assert drift.orphan_edges == ["m2 -[MENTIONS]-> c-a"] and drift.missing_edges == ["m2 -[MENTIONS]-> c-b"]
        assert not (drift.missing_in_graph or drift.missing_in_vectors or drift.orphans_in_graph)
        # the command reports it (exit 1), repairs it, and the projections equal the records again
        report = hrt_cli(services, "doctor", "--user", user)
        assert report.returncode == 1, report.stderr
        assert json.loads(report.stdout)["drift"][0]["stale_edges"] == ["m1 -[MENTIONS]-> c-a"]
        repaired = hrt_cli(services, "doctor", "--user", user, "--repair")
        assert repaired.returncode == 0, repaired.stdout + repaired.stderr
        assert json.loads(repaired.stdout)["drift_after_repair"] == []
        await projections_equal_records(b, user)
    finally:
        await forget(b, user)


async def readyz(svc: HRTService) -> dict[str, Any]:
    """``GET /readyz`` of an app over ``svc``, with a key of every scope."""
    import httpx

    from hrt.api import create_app
    from hrt.auth import SCOPES, new_key

    token, record = new_key("ops-" + uuid.uuid4().hex[:6], SCOPES, None)
    await svc.records.create_key(record)
    app = create_app(svc.settings, service=svc)
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt", headers=headers) as c:
        r = await c.get("/readyz")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


class Refusing:
    """A real projection target that refuses, for good, to take one id (not as if it were down)."""

    def __init__(self, inner: Any, method: str, key: str) -> None:
        self.inner, self.method, self.key = inner, method, key

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if name != self.method:
            return attr

        async def write(user_id: str, items: Any) -> Any:
            if any(i.id == self.key for i in items):
                raise StoreError(f"{self.key} refused (injected)", store="Neo4j")
            return await attr(user_id, items)

        return write


async def test_a_poison_event_is_set_aside_reported_and_mended(services, replica_b):
    user = "poison-" + uuid.uuid4().hex[:8]
    b = replica_b
    p = b.projector
    p.max_attempts = 2
    p.targets = {**p.targets, "graph": Refusing(p.targets["graph"], "upsert_nodes", "m-bad")}
    data = [concept(user, "c-a", "Alpha"), mu(user, "m-bad", "refused by the graph"), mu(user, "m-ok", "fine")]
    try:
        await b.writer.apply(build_batch(parse_jsonl(jsonl(data)), b.embedder))
        first = await p.drain()
        assert first.failed.keys() == {"graph"} and first.dead == {}
        second = await p.drain()
        assert second.ok and list(second.dead) == ["graph"]
        assert await outbox_rows(b.records) == 0
        # the graph moved on past it (m-ok and c-a are there), the vector index never held it back
        assert set(await b.graph.ids(user)) == {"c-a", "m-ok"}  # type: ignore[attr-defined]
        assert set(await b.vectors.ids(user)) == {"c-a", "m-bad", "m-ok"}  # type: ignore[attr-defined]
        # reported: by the doctor, by /readyz's warnings, by the metric
        (drift,) = await check(b.records, b.graph, b.vectors, [user])
        assert drift.missing_in_graph == {"memory_unit": ["m-bad"]}
        assert [(d["target"], d["op"], d["key"]["id"], d["attempts"]) for d in drift.dead_events] == [
            ("graph", "upsert_entity", "m-bad", 2)
        ]
        assert "refused (injected)" in drift.dead_events[0]["last_error"]
        assert any("failed for good on the graph projection" in w for w in await p.warnings())
        ready = await readyz(b)
        assert ready["status"] == "ready"  # the other users and targets are served: a warning, not a 503
        assert any("failed for good on the graph projection" in w for w in ready["warnings"]), ready
        await p._refresh_stats()
        assert 'hrt_outbox_dead_events{target="graph"} 1.0' in b.metrics.render().decode()
        # the target takes it again: repair rebuilds the user and forgets the dead event
        p.targets["graph"] = p.targets["graph"].inner
        from hrt.doctor import repair_user

        await repair_user(b.records, b.graph, b.vectors, drift)
        assert [d.as_dict() for d in await check(b.records, b.graph, b.vectors, [user]) if not d.clean] == []
        assert await b.records.dead_letters([user]) == []  # type: ignore[attr-defined]
        assert await p.warnings() == [] and (await readyz(b))["warnings"] == []
        await projections_equal_records(b, user)
    finally:
        await forget(b, user)
