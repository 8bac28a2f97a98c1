"""The whole server as a real process (``hrt serve`` under uvicorn) with the real embedder."""

from __future__ import annotations

import json

import httpx
import pytest

from hrt.cli import sample_data_path
from hrt.contract import AugmentedMemoryContext
from tests.integration.conftest import ServerProcess, start_hrt_server

pytestmark = pytest.mark.integration

BODY = {
    "user_id": "u-maya",
    "key_phrases": ["Project Phoenix timeline", "team bandwidth"],
    "as_of": "2025-12-31T00:00:00Z",
}


def ingest_sample(server: ServerProcess) -> None:
    data = sample_data_path().read_bytes()
    headers = {**server.headers, "content-type": "application/x-ndjson"}
    r = httpx.post(f"{server.base_url}/v1/ingest", content=data, headers=headers, timeout=120)
    assert r.status_code == 200, r.text
    records = [json.loads(line) for line in data.splitlines() if line.strip()]
    # every record, and the SUPERSEDES relation each name in a `supersedes` is written as
    assert r.json()["upserted"] == len(records) + sum(len(x.get("supersedes", [])) for x in records)


def test_serve_ingest_retrieve_and_restart_is_byte_identical(tmp_path):
    db = tmp_path / "srv.db"
    server = start_hrt_server(db, tmp_path / "a.log")
    try:
        ingest_sample(server)
        first = httpx.post(f"{server.base_url}/v1/retrieve", json=BODY, headers=server.headers, timeout=30)
        again = httpx.post(f"{server.base_url}/v1/retrieve", json=BODY, headers=server.headers, timeout=30)
        assert first.status_code == 200, first.text
        assert first.content == again.content
        doc = AugmentedMemoryContext.model_validate_json(first.content)
        assert doc.retrieved_memory_units and doc.retrieved_concepts
        assert all(m.muid.startswith("maya-") for m in doc.retrieved_memory_units)
        bad = httpx.post(
            f"{server.base_url}/v1/retrieve",
            json={"user_id": "u-maya", "max_depth": 99},
            headers=server.headers,
            timeout=30,
        )
        assert bad.status_code == 422
        metrics = httpx.get(f"{server.base_url}/metrics", headers=server.headers, timeout=10).text
        assert 'hrt_requests_total{route="/v1/retrieve",status="422"} 1.0' in metrics
    finally:
        server.stop()
    restarted = start_hrt_server(db, tmp_path / "b.log")
    try:
        after = httpx.post(f"{restarted.base_url}/v1/retrieve", json=BODY, headers=restarted.headers, timeout=30)
        assert after.content == first.content
    finally:
        restarted.stop()


def test_tenants_sharing_concept_names_stay_apart(hrt_server):
    ingest_sample(hrt_server)
    for user, prefix in (("u-maya", "maya-"), ("u-tom", "tom-"), ("u-sara", "sara-")):
        r = httpx.post(
            f"{hrt_server.base_url}/v1/retrieve",
            headers=hrt_server.headers,
            timeout=30,
            json={
                "user_id": user,
                "key_phrases": ["Project Phoenix", "Lumen Labs", "Postgres"],
                "max_depth": 3,
                "limits": {"memory_units": 50, "concepts": 50, "artifacts": 50},
            },
        )
        doc = AugmentedMemoryContext.model_validate_json(r.content)
        ids = [m.muid for m in doc.retrieved_memory_units] + [c.id for c in doc.retrieved_concepts]
        ids += [a.id for a in doc.retrieved_artifacts]
        ids += [n.id for m in doc.retrieved_memory_units for n in m.connected_concept_ids_and_names]
        assert ids and all(i.startswith(prefix) for i in ids), (user, ids)
