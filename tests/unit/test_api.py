"""The HTTP API through httpx's ASGI transport (in process; the real-process test is under
tests/integration)."""

from __future__ import annotations

import json

import httpx
import pytest

from hrt.api import create_app
from hrt.auth import SCOPES, new_key
from hrt.contract import AugmentedMemoryContext
from tests.helpers import concept, mu, rel

AS_OF = "2025-08-01T00:00:00Z"


@pytest.fixture
async def client(loaded_service, settings):
    """An in-process client holding a key with every scope for every user."""
    token, record = new_key("test-admin", SCOPES, None)
    await loaded_service.records.create_key(record)
    app = create_app(settings, service=loaded_service)
    transport = httpx.ASGITransport(app=app)
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://hrt", headers=headers) as c:
        yield c


async def snapshot(client) -> dict[str, dict[str, int]]:
    return {u: (await client.get(f"/v1/users/{u}/stats")).json() for u in ("u1", "u2")}


async def test_retrieve_returns_canonical_v94(client):
    body = {"user_id": "u1", "key_phrases": ["Project Phoenix", "bandwidth"], "as_of": AS_OF}
    r1 = await client.post("/v1/retrieve", json=body)
    r2 = await client.post("/v1/retrieve", json=body)
    assert r1.status_code == 200, r1.text
    assert r1.headers["content-type"] == "application/json"
    assert r1.content == r2.content
    doc = AugmentedMemoryContext.model_validate_json(r1.content)
    assert doc.retrieval_metadata.contract_version == "9.4"
    assert "total;dur=" in r1.headers["server-timing"]


async def test_ingest_json_and_ndjson_then_delete(client):
    recs = [
        concept("u9", "c1", "Kubernetes", "Container orchestration"),
        mu("u9", "m1", "Upgraded Kubernetes to 1.31"),
        rel("u9", "MENTIONS", "m1", "c1"),
    ]
    r = await client.post("/v1/ingest", json={"records": recs})
    assert r.status_code == 200 and r.json() == {"upserted": 3, "deleted": 0}
    nd = "\n".join(json.dumps(x) for x in [mu("u9", "m2", "Kubernetes node pool resized")]) + "\n"
    r = await client.post("/v1/ingest", content=nd, headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 200 and r.json()["upserted"] == 1
    assert (await client.get("/v1/users/u9/stats")).json()["memory_unit"] == 2
    r = await client.delete("/v1/users/u9/entities/memory_unit/m1")
    assert r.json() == {"upserted": 0, "deleted": 1}
    assert (await client.get("/v1/users/u9/stats")).json() == {
        "memory_unit": 1,
        "concept": 1,
        "artifact": 0,
        "relation": 0,
        "preference": 0,
    }
    r = await client.delete("/v1/users/u9")
    assert r.json()["deleted"] == 2
    r = await client.post("/v1/retrieve", json={"user_id": "u9", "key_phrases": ["Kubernetes"]})
    assert r.status_code == 200 and r.json()["retrieval_metadata"]["user_known"] is False  # erased: nothing stored


async def test_bad_ingest_line_names_its_position_and_writes_nothing(client):
    before = await snapshot(client)
    recs = [concept("u1", "c-new", "New"), mu("u1", "m-new", "x") | {"importance_score": 42}]
    r = await client.post("/v1/ingest", json={"records": recs})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["field"] == "records[1].importance_score" and "records[1]" in err["message"]
    nd = json.dumps(concept("u1", "c-new", "New")) + "\n{broken\n"
    r = await client.post("/v1/ingest", content=nd, headers={"content-type": "application/x-ndjson"})
    assert r.status_code == 400 and r.json()["error"]["field"] == "line 2"
    for field, value in [("importance_score", True), ("creation_ts", 1_700_000_000), ("importance_score", "7")]:
        r = await client.post("/v1/ingest", json={"records": [mu("u1", "m-new", "x") | {field: value}]})
        assert r.status_code == 422 and r.json()["error"]["field"] == f"records[0].{field}", r.text
    assert await snapshot(client) == before


async def test_health_ready_metrics_openapi(client, loaded_service):
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert ready.json()["graph_expansion"] == "in_process" and ready.json()["reranker"] == "none"
    loaded_service.preload_state = "loading"  # `hrt serve` preloading the largest users' caches
    warming = await client.get("/readyz")
    assert warming.status_code == 503 and warming.json()["status"] == "warming"
    assert warming.json()["caches"] == "loading" and warming.json()["stores"]["records"] == "ok"
    loaded_service.preload_state = "done"
    assert (await client.get("/readyz")).status_code == 200
    await client.post("/v1/retrieve", json={"user_id": "u1", "key_phrases": ["Phoenix", "zzzz qqqq"]})
    text = (await client.get("/metrics")).text
    for name in (
        "hrt_stage_seconds_bucket",
        'stage="grounding"',
        "hrt_candidates_bucket",
        "hrt_unmatched_key_phrases_total 1.0",
        "hrt_adaptive_threshold_bucket",
        "hrt_retrieve_seconds",
        'hrt_requests_total{route="/v1/retrieve",status="200"}',
    ):
        assert name in text, name
    spec = (await client.get("/openapi.json")).json()
    assert "/v1/retrieve" in spec["paths"] and "/v1/ingest" in spec["paths"]


BAD_INPUTS = [
    # (name, request kwargs, status, field)
    ("no phrases", {"json": {"user_id": "u1"}}, 422, "body"),
    ("empty phrases", {"json": {"user_id": "u1", "key_phrases": []}}, 422, "key_phrases"),
    ("10k-char phrase", {"json": {"user_id": "u1", "key_phrases": ["x" * 10_000]}}, 422, "key_phrases.0"),
    ("depth 99", {"json": {"user_id": "u1", "key_phrases": ["a"], "max_depth": 99}}, 422, "max_depth"),
    (
        "negative weights",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "weights": {"alpha_semantic_similarity": -0.5}}},
        422,
        "weights.alpha_semantic_similarity",
    ),
    (
        "all-zero weights",
        {
            "json": {
                "user_id": "u1",
                "key_phrases": ["a"],
                "weights": {
                    "alpha_semantic_similarity": 0,
                    "beta_recency": 0,
                    "gamma_salience": 0,
                    "delta_user_preference": 0,
                },
            }
        },
        422,
        "weights",
    ),
    (
        "limit 500",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "limits": {"concepts": 500}}},
        422,
        "limits.concepts",
    ),
    # JSON's types as declared: lax validation once read true as 1, "3" as 3, a number as Unix time
    (
        "limit true",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "limits": {"concepts": True}}},
        422,
        "limits.concepts",
    ),
    (
        "limit as text",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "limits": {"concepts": "3"}}},
        422,
        "limits.concepts",
    ),
    ("depth 1.0", {"json": {"user_id": "u1", "key_phrases": ["a"], "max_depth": 1.0}}, 422, "max_depth"),
    ("rerank 1", {"json": {"user_id": "u1", "key_phrases": ["a"], "rerank": 1}}, 422, "rerank"),
    ("min_score true", {"json": {"user_id": "u1", "key_phrases": ["a"], "min_score": True}}, 422, "min_score"),
    (
        "weight true",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "weights": {"beta_recency": True}}},
        422,
        "weights.beta_recency",
    ),
    ("as_of a number", {"json": {"user_id": "u1", "key_phrases": ["a"], "as_of": 1_700_000_000}}, 422, "as_of"),
    ("unknown preset", {"json": {"user_id": "u1", "key_phrases": ["a"], "preset": "fastest"}}, 422, "preset"),
    (
        "override out of bounds",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "config": {"search_k": 5000}}},
        422,
        "config.search_k",
    ),
    (
        "override not per request",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "config": {"fanout_per_node": 10}}},
        422,
        "config.fanout_per_node",
    ),
    (
        "override of a wrong type",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "config": {"relevance_gate": "0.2"}}},
        422,
        "config.relevance_gate",
    ),
    ("bad user id", {"json": {"user_id": "../etc", "key_phrases": ["a"]}}, 422, "user_id"),
    (
        "item cap outside the compact format",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "render": {"format": "markdown", "max_item_chars": 300}}},
        422,
        "render.max_item_chars",
    ),
    (
        "item cap out of bounds",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "render": {"format": "compact", "max_item_chars": 10}}},
        422,
        "render.max_item_chars",
    ),
    (
        "malformed JSON",
        {"content": b'{"user_id": "u1", "key_phrases": [', "headers": {"content-type": "application/json"}},
        400,
        "body",
    ),
    ("not an object", {"json": ["u1"]}, 422, "body"),
    (
        "huge body",
        {
            "content": b'{"user_id": "u1", "query": "' + b"x" * 2_000_000 + b'"}',
            "headers": {"content-type": "application/json"},
        },
        413,
        "body",
    ),
]


@pytest.mark.parametrize(("name", "kwargs", "status", "field"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
async def test_bad_input_gets_a_clear_4xx_and_changes_nothing(client, name, kwargs, status, field):
    before = await snapshot(client)
    r = await client.post("/v1/retrieve", **kwargs)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["field"] == field and err["message"]
    assert await snapshot(client) == before


async def test_a_user_with_nothing_stored_is_200_and_an_empty_context_but_an_entity_is_still_404(client):
    r = await client.post("/v1/retrieve", json={"user_id": "nobody", "key_phrases": ["a"], "render": {}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["retrieval_metadata"]["user_known"] is False and body["unmatched_key_phrases"] == ["a"]
    assert body["retrieved_memory_units"] == body["retrieved_concepts"] == body["retrieved_artifacts"] == []
    assert "grounding;dur=" in r.headers["server-timing"]
    known = await client.post("/v1/retrieve", json={"user_id": "u1", "key_phrases": ["a"]})
    assert "user_known" not in known.json()["retrieval_metadata"]
    missing = await client.get("/v1/users/nobody/entities/concept/c-phx")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_huge_body_without_content_length_is_413(client):
    async def chunks():
        yield b'{"user_id": "u1", "query": "'
        for _ in range(40):
            yield b"x" * 65536
        yield b'"}'

    r = await client.post("/v1/retrieve", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413


async def test_bad_delete_path(client):
    r = await client.delete("/v1/users/u1/entities/person/x")
    assert r.status_code == 422 and r.json()["error"]["field"] == "kind"


async def test_unknown_routes_and_methods_answer_in_the_one_error_format(client):
    r = await client.get("/v1/nothing-here")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    r = await client.put("/v1/retrieve", json={})
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    anonymous = await client.get("/v1/nothing-here", headers={"authorization": ""})
    assert anonymous.status_code == 401  # which routes exist is not told without a key


def _deep(n: int) -> bytes:
    return b"[" * n


WRITE_BAD_INPUTS = [
    # (name, method, path, request kwargs, status, field): each once answered 500 or was accepted
    ("newline in path id", "DELETE", "/v1/users/u1%0A/entities/memory_unit/m1", {}, 422, "user_id"),
    ("newline in entity id", "DELETE", "/v1/users/u1/entities/memory_unit/m1%0A", {}, 422, "entity_id"),
    (
        "creation_ts past year 9999 in UTC",
        "POST",
        "/v1/ingest",
        {"json": {"records": [mu("u1", "m-late", "x", "9999-12-31T23:59:59-01:00")]}},
        422,
        "records[0].creation_ts",
    ),
    (
        "invalid UTF-8",
        "POST",
        "/v1/ingest",
        {"content": b'{"records": ["\xff\xfe"]}', "headers": {"content-type": "application/json"}},
        400,
        "body",
    ),
    (
        "invalid UTF-8 in NDJSON",
        "POST",
        "/v1/ingest",
        {"content": b'{"kind": "\xff"}\n', "headers": {"content-type": "application/x-ndjson"}},
        400,
        "body",
    ),
    ("100,000 [", "POST", "/v1/ingest", {"content": _deep(100_000)}, 400, "body"),
    (
        "1e999 in concept properties",
        "POST",
        "/v1/ingest",
        {
            "content": b'{"records": [{"kind": "concept", "user_id": "u1", "id": "c-x", "name": "X", '
            b'"properties": {"x": 1e999}}]}'
        },
        400,
        "body",
    ),
    (
        "NaN in metadata",
        "POST",
        "/v1/ingest",
        {
            "content": json.dumps(mu("u1", "m-nan", "x") | {"metadata": {"v": float("nan")}}).encode() + b"\n",
            "headers": {"content-type": "application/x-ndjson"},
        },
        400,
        "line 1",
    ),
    (
        "metadata nested 40 deep",
        "POST",
        "/v1/ingest",
        {"json": {"records": [mu("u1", "m-deep", "x") | {"metadata": json.loads('{"a":' * 40 + "1" + "}" * 40)}]}},
        422,
        "records[0].metadata",
    ),
    (
        "as_of before year 1 in UTC",
        "POST",
        "/v1/retrieve",
        {"json": {"user_id": "u1", "key_phrases": ["a"], "as_of": "0001-01-01T00:00:00+01:00"}},
        422,
        "as_of",
    ),
    (
        "retrieve of 100,000 [",
        "POST",
        "/v1/retrieve",
        {"content": _deep(100_000), "headers": {"content-type": "application/json"}},
        400,
        "body",
    ),
    (
        "retrieve as text/plain",
        "POST",
        "/v1/retrieve",
        {"content": b"user_id=u1", "headers": {"content-type": "text/plain"}},
        415,
        "body",
    ),
    (
        "retrieve with invalid UTF-8",
        "POST",
        "/v1/retrieve",
        {"content": b'{"user_id": "\xff"}', "headers": {"content-type": "application/json"}},
        400,
        "body",
    ),
]


@pytest.mark.parametrize(
    ("name", "method", "path", "kwargs", "status", "field"), WRITE_BAD_INPUTS, ids=[b[0] for b in WRITE_BAD_INPUTS]
)
async def test_input_that_once_gave_500_gets_a_4xx_naming_the_field(client, name, method, path, kwargs, status, field):
    before = await snapshot(client)
    r = await client.request(method, path, **kwargs)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) >= {"code", "message", "field"} and err["field"] == field and err["message"], err
    assert await snapshot(client) == before


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/v1/users/u1/entities?limt=5", None),  # a misspelt limit
        ("GET", "/v1/users/u1/entities?limit=5&%C3%94=false", None),
        ("GET", "/v1/users/u1/stats?verbose=1", None),
        ("POST", "/v1/retrieve?as_of=2025-01-01", {"user_id": "u1", "key_phrases": ["Project Phoenix"]}),
    ],
)
async def test_an_unknown_query_parameter_is_refused_without_echo(client, method, path, body):
    """A parameter the route does not declare is an error naming the query (not ignored: the caller
    would think it applied), and its name, the caller's input, is not echoed."""
    r = await client.request(method, path, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == "query"
    assert "limt" not in r.text and "verbose" not in r.text and "as_of" not in r.text and "\\u00d4" not in r.text
    declared = await client.get("/v1/users/u1/entities?limit=5&kind=concept")  # declared names pass
    assert declared.status_code == 200 and len(declared.json()["entities"]) <= 5


@pytest.mark.parametrize("query", ["tags=a%00b", "agent=%00", "prefix=ph%00", "tags=x&tags=%00y"])
async def test_a_nul_in_a_query_value_is_a_422_naming_the_parameter(client, query):
    """U+0000 in a query value is refused before any store (PostgreSQL's text refuses it: the
    services deployment answered 500 on ``tags``), naming the parameter, the value not echoed."""
    r = await client.get(f"/v1/users/u1/entities?{query}")
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == query.split("&")[-1].split("=")[0]
    assert "\\u0000" not in r.text and "ph" not in r.json()["error"]["message"]
