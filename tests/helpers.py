"""Test helpers. ``HashingEmbedder`` is a fake *embedder* for tests whose subject is something else
(stores, tenancy, ingest); tests of embedding quality use the real model."""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from hrt.text import words


class HashingEmbedder:
    """Bag of hashed words and character trigrams, L2-normalised: deterministic and instant."""

    name = "hashing-test-embedder"
    model_id = "hashing-test-embedder"

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for w in words(text):
                for token in (w, *(w[j : j + 3] for j in range(max(1, len(w) - 2)))):
                    h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
                    out[i, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
            norm = float(np.linalg.norm(out[i]))
            if norm > 0:
                out[i] /= norm
        return out

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)


def jsonl(records: Sequence[dict[str, Any]]) -> list[str]:
    return [json.dumps(r) for r in records]


def mu(user: str, muid: str, content: str, ts: str = "2025-06-01T10:00:00Z", **extra: Any) -> dict[str, Any]:
    return {
        "kind": "memory_unit",
        "user_id": user,
        "muid": muid,
        "title": extra.pop("title", muid),
        "content": content,
        "creation_ts": ts,
        **extra,
    }


def concept(user: str, cid: str, name: str, description: str = "", **extra: Any) -> dict[str, Any]:
    return {"kind": "concept", "user_id": user, "id": cid, "name": name, "description": description, **extra}


def artifact(user: str, aid: str, content: str, ts: str = "2025-06-02T10:00:00Z", **extra: Any) -> dict[str, Any]:
    return {
        "kind": "artifact",
        "user_id": user,
        "id": aid,
        "artifact_type": extra.pop("artifact_type", "insight_summary"),
        "title": extra.pop("title", aid),
        "content": content,
        "created_at": ts,
        **extra,
    }


def rel(user: str, type_: str, source: str, target: str, **extra: Any) -> dict[str, Any]:
    return {"kind": "relation", "user_id": user, "type": type_, "source": source, "target": target, **extra}


def small_graph(user: str = "u1", prefix: str = "") -> list[dict[str, Any]]:
    """A product-team graph small enough to reason about by hand."""
    p = prefix
    return [
        concept(
            user,
            f"{p}c-phx",
            "Project Phoenix",
            "Next-generation analytics platform due in December.",
            type="project",
            salience=0.9,
            properties={"lead": "Maya", "due": "2025-12-31"},
        ),
        concept(
            user,
            f"{p}c-bw",
            "Team bandwidth",
            "How much work the platform team can take on.",
            type="topic",
            salience=0.6,
        ),
        concept(
            user, f"{p}c-pg", "Postgres", "The relational database behind billing.", type="technology", salience=0.5
        ),
        mu(
            user,
            f"{p}m1",
            "Brainstorm on Project Phoenix: timeline adjustments and resource allocation.",
            "2025-06-10T10:00:00Z",
            title="Phoenix brainstorm",
            importance_score=8.5,
            source_type="meeting_note",
            tags=["phoenix"],
            source_agent_id="meeting-agent",
        ),
        mu(
            user,
            f"{p}m2",
            "Ben says the team is stretched thin; bandwidth is the constraint for Q3.",
            "2025-06-12T10:00:00Z",
            title="1:1 with Ben",
            importance_score=6,
            source_type="meeting_note",
            tags=["people"],
            source_agent_id="dialogue-agent",
        ),
        mu(
            user,
            f"{p}m3",
            "Migrated the billing tables to Postgres 16 over the weekend without downtime.",
            "2025-07-01T10:00:00Z",
            title="Postgres upgrade",
            importance_score=5,
            source_type="incident_report",
            tags=["infra"],
            source_agent_id="dialogue-agent",
        ),
        mu(
            user,
            f"{p}m4",
            "Migrated the billing tables to Postgres 16 over the weekend without any downtime.",
            "2025-07-01T11:00:00Z",
            title="Postgres upgrade (copy)",
            importance_score=5,
            source_type="incident_report",
            tags=["infra"],
            source_agent_id="dialogue-agent",
        ),
        artifact(
            user,
            f"{p}a1",
            "Phoenix is at risk because the team's bandwidth is limited in Q3.",
            "2025-06-15T10:00:00Z",
            title="Phoenix risk summary",
            confidence=0.8,
        ),
        rel(user, "MENTIONS", f"{p}m1", f"{p}c-phx"),
        rel(user, "MENTIONS", f"{p}m2", f"{p}c-bw"),
        rel(user, "MENTIONS", f"{p}m3", f"{p}c-pg"),
        rel(user, "MENTIONS", f"{p}m4", f"{p}c-pg"),
        rel(user, "RELATED_TO", f"{p}c-phx", f"{p}c-bw", weight=0.8, relation_type="depends_on"),
        rel(user, "DERIVED_FROM", f"{p}a1", f"{p}m1"),
        rel(user, "DERIVED_FROM", f"{p}a1", f"{p}m2"),
        rel(user, "FOLLOWS", f"{p}m2", f"{p}m1"),
        {"kind": "preference", "user_id": user, "target_kind": "concept", "target": f"{p}c-phx", "weight": 0.9},
        {
            "kind": "preference",
            "user_id": user,
            "target_kind": "source_type",
            "target": "incident_report",
            "weight": 0.2,
        },
    ]


def asgi_get(path: str, token: str) -> dict[str, Any]:
    """The ASGI scope of a GET of ``path`` with ``token``: for tests that drive the app's ASGI
    callable themselves (a client that stops reading, a connection cut mid-body)."""
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"hrt"), (b"authorization", f"Bearer {token}".encode())],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8080),
    }


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def services_settings(stack: Any, postgres_dsn: str, db_path: Any, collection: str) -> Any:
    """The services deployment on the test stack (``stack_manager.need("neo4j", "weaviate")``):
    PostgreSQL at ``postgres_dsn``, Neo4j, and a Weaviate collection of the test's own, named
    ``collection`` plus a random suffix."""
    import uuid

    from hrt.config import Settings

    return Settings(
        db_path=db_path,
        record_store="postgres",
        postgres_dsn=postgres_dsn,
        graph_store="neo4j",
        neo4j_uri=stack.neo4j_uri,
        neo4j_password=stack.neo4j_password,
        vector_index="weaviate",
        weaviate_http_port=stack.weaviate_http_port,
        weaviate_grpc_port=stack.weaviate_grpc_port,
        weaviate_api_key=stack.weaviate_api_key,
        weaviate_collection=collection + uuid.uuid4().hex[:8],
    )


async def outbox_rows(store: Any) -> int:
    """The outbox's rows: an event leaves once every target has it."""
    async with store.connection("outbox rows") as conn:
        row = await (await conn.execute("SELECT count(*) FROM hrt_outbox")).fetchone()
    return int(row[0]) if row else 0


@contextmanager
def scratch_stack(prefix: str, services: tuple[str, ...]) -> Iterator[tuple[Path, Any]]:
    """Servers for one test alone (``devstack.running``) in a directory of their own, which is
    removed once they are stopped: a stack's data is ~0.6 GB."""
    from hrt import devstack

    directory = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with devstack.running(directory, services) as stack:
            yield directory, stack
    finally:
        shutil.rmtree(directory, ignore_errors=True)
