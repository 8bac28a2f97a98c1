"""Keys on the HTTP API, in process (the route x scope x user matrix runs against a real server in
tests/integration/test_security.py): refusals, their format and headers, limits, audit, metrics."""

from __future__ import annotations

import json
import logging

import httpx
import pytest

from hrt.api import create_app
from hrt.auth import SCOPES, new_key, token_key_id
from hrt.config import Settings
from tests.helpers import bearer, concept


@pytest.fixture
async def keys(loaded_service):
    """name -> token: every scope for u1 only, retrieve for u1, and an admin for every user."""
    made = {}
    for name, scopes, users, extra in [
        ("u1-all", SCOPES, ["u1"], {}),
        ("u1-read", ["retrieve"], ["u1"], {}),
        ("root", SCOPES, None, {}),
        ("slow", ["retrieve"], ["u1"], {"rate_limit": 0.5}),
    ]:
        token, record = new_key(name, scopes, users, **extra)
        await loaded_service.records.create_key(record)
        made[name] = token
    return made


RETRIEVE = {"user_id": "u1", "key_phrases": ["Project Phoenix"], "as_of": "2025-08-01T00:00:00Z"}


async def test_no_key_or_a_bad_one_is_401_with_www_authenticate(api, keys):
    missing = await api.post("/v1/retrieve", json=RETRIEVE)
    assert missing.status_code == 401 and missing.headers["www-authenticate"] == 'Bearer realm="hrt"'
    assert missing.json()["error"]["code"] == "unauthenticated"
    for header in ("Bearer nonsense", f"Bearer {keys['root'][:-1]}x", f"Token {keys['root']}"):
        r = await api.post("/v1/retrieve", json=RETRIEVE, headers={"authorization": header})
        assert r.status_code == 401 and "invalid_token" in r.headers["www-authenticate"], header
    assert (await api.get("/healthz")).status_code == 200  # the one open route
    assert (await api.get("/openapi.json")).status_code == 401


async def test_a_key_outside_its_scope_or_users_is_403_whether_or_not_the_user_exists(api, keys):
    read = bearer(keys["u1-read"])
    assert (await api.post("/v1/retrieve", json=RETRIEVE, headers=read)).status_code == 200
    scope = await api.post("/v1/ingest", json={"records": [concept("u1", "c9", "Nine")]}, headers=read)
    assert scope.status_code == 403 and "'ingest' scope" in scope.json()["error"]["message"]
    existing = await api.post("/v1/retrieve", json={**RETRIEVE, "user_id": "u2"}, headers=read)
    absent = await api.post("/v1/retrieve", json={**RETRIEVE, "user_id": "nobody"}, headers=read)
    assert existing.status_code == absent.status_code == 403
    assert existing.json()["error"]["code"] == absent.json()["error"]["code"] == "forbidden"
    assert existing.json()["error"]["field"] == absent.json()["error"]["field"] == "user_id"
    # the same for stats, where an unknown user would otherwise answer zeros
    a = await api.get("/v1/users/u2/stats", headers=read)
    b = await api.get("/v1/users/nobody/stats", headers=read)
    assert a.status_code == b.status_code == 403
    # the all-users key sees the difference, which is its right: an empty context, user_known false
    root = bearer(keys["root"])
    empty = await api.post("/v1/retrieve", json={**RETRIEVE, "user_id": "nobody"}, headers=root)
    assert empty.status_code == 200 and empty.json()["retrieval_metadata"]["user_known"] is False


async def test_ingest_checks_every_record_before_writing(api, keys, loaded_service):
    before = await loaded_service.records.counts("u1")
    mixed = {"records": [concept("u1", "c-ok", "Fine"), concept("u2", "c-no", "Not yours")]}
    r = await api.post("/v1/ingest", json=mixed, headers=bearer(keys["u1-all"]))
    assert r.status_code == 403 and "'u2'" in r.json()["error"]["message"]
    assert await loaded_service.records.counts("u1") == before
    assert (await api.delete("/v1/users/u2", headers=bearer(keys["u1-all"]))).status_code == 403
    assert (await loaded_service.records.counts("u2"))["concept"] > 0


async def test_limits_answer_429_with_retry_after(api, keys):
    slow = bearer(keys["slow"])  # 0.5 requests per second, a burst of one
    assert (await api.post("/v1/retrieve", json=RETRIEVE, headers=slow)).status_code == 200
    r = await api.post("/v1/retrieve", json=RETRIEVE, headers=slow)
    assert r.status_code == 429 and r.headers["retry-after"] == "2"
    assert r.json()["error"]["code"] == "rate_limited"
    assert (await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(keys["u1-read"]))).status_code == 200


async def test_every_write_is_one_audit_line_with_its_key_and_outcome(api, keys, caplog):
    with caplog.at_level(logging.INFO, logger="hrt.audit"):
        await api.post("/v1/ingest", json={"records": [concept("u1", "c-a", "A")]}, headers=bearer(keys["u1-all"]))
        await api.post("/v1/ingest", json={"records": [concept("u2", "c-a", "A")]}, headers=bearer(keys["u1-all"]))
        await api.delete("/v1/users/u1/entities/concept/c-a", headers=bearer(keys["u1-all"]))
        await api.delete("/v1/users/u2")
        await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(keys["u1-all"]))  # a read: not audited
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "hrt.audit"]
    assert [(x["key"], x["route"], x["status"], x["outcome"]) for x in lines] == [
        ("u1-all", "/v1/ingest", 200, "ok"),
        ("u1-all", "/v1/ingest", 403, "refused"),
        ("u1-all", "/v1/users/{user_id}/entities/{kind}/{entity_id}", 200, "ok"),
        (None, "/v1/users/{user_id}", 401, "refused"),
    ]
    assert lines[0]["users"] == ["u1"] and lines[0]["upserted"] == 1 and lines[2]["deleted"] == 1
    assert lines[1]["users"] == ["u2"] and lines[1]["upserted"] == 0
    assert all(keys["u1-all"] not in json.dumps(x) for x in lines)


async def test_metrics_count_requests_per_key_id_and_refusals_per_reason(api, keys):
    await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(keys["u1-read"]))
    await api.post("/v1/retrieve", json=RETRIEVE)
    await api.post("/v1/retrieve", json={**RETRIEVE, "user_id": "u2"}, headers=bearer(keys["u1-read"]))
    text = (await api.get("/metrics", headers=bearer(keys["root"]))).text
    key_id = token_key_id(keys["u1-read"])
    assert f'hrt_key_requests_total{{key="{key_id}",status="200"}} 1.0' in text
    assert f'hrt_key_requests_total{{key="{key_id}",status="403"}} 1.0' in text
    assert 'hrt_auth_refusals_total{reason="missing"} 1.0' in text
    assert 'hrt_auth_refusals_total{reason="user"} 1.0' in text
    assert keys["u1-read"] not in text


async def test_the_openapi_document_declares_bearer_keys_and_every_error(api, keys):
    spec = (await api.get("/openapi.json", headers=bearer(keys["u1-read"]))).json()
    assert spec["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert spec["security"] == [{"bearer": []}] and spec["paths"]["/healthz"]["get"]["security"] == []
    retrieve = spec["paths"]["/v1/retrieve"]["post"]
    assert {"401", "403", "422", "429", "503"} <= set(retrieve["responses"])
    assert "AugmentedMemoryContext" in json.dumps(retrieve["responses"]["200"])
    assert "MemoryUnit" in json.dumps(spec["paths"]["/v1/ingest"]["post"]["requestBody"])


async def test_auth_off_serves_without_keys_and_says_so(loaded_service, tmp_path):
    app = create_app(Settings(db_path=tmp_path / "x.db", auth="off"), service=loaded_service)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as c:
        assert (await c.post("/v1/retrieve", json=RETRIEVE)).status_code == 200
        ready = (await c.get("/readyz")).json()
    assert ready["auth"] == "off" and "HRT_AUTH=off" in ready["warnings"][0]


@pytest.mark.parametrize("local", ["10.1.2.3", "0.0.0.0", "hrt.example"])
async def test_auth_off_refuses_a_request_that_came_in_off_loopback(loaded_service, tmp_path, local):
    """Decided per request on the address the connection reached (ASGI's ``server``), not on the
    host the settings name: an app built with auth off behind ``uvicorn --host 0.0.0.0`` (#30)."""
    app = create_app(Settings(db_path=tmp_path / "x.db", auth="off"), service=loaded_service)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{local}") as c:
        r = await c.post("/v1/retrieve", json=RETRIEVE)
        assert r.status_code == 401 and "loopback" in r.json()["error"]["message"]
        assert (await c.get("/metrics")).status_code == 401
        assert (await c.get("/healthz")).status_code == 200


async def test_an_admin_key_manages_keys_within_its_own_scopes_and_users(api, keys, loaded_service):
    """Over HTTP with the admin scope: create (the secret once), list (never a secret), revoke (at once)."""
    token, record = new_key("u1-admin", ["admin", "retrieve"], ["u1"])
    await loaded_service.records.create_key(record)
    admin = bearer(token)
    made = await api.post(
        "/v1/keys", json={"name": "u1-reader", "scopes": ["retrieve"], "users": ["u1"]}, headers=admin
    )
    assert made.status_code == 201, made.text
    secret = made.json()["key"]
    assert (await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(secret))).status_code == 200
    for body, field in [
        ({"name": "wider", "scopes": ["ingest"], "users": ["u1"]}, "scopes"),  # a scope it lacks
        ({"name": "wider", "scopes": ["retrieve"], "users": ["u1", "u2"]}, "user_id"),  # a user not its own
        ({"name": "wider", "scopes": ["retrieve"], "users": None}, "users"),  # every user
    ]:
        r = await api.post("/v1/keys", json=body, headers=admin)
        assert r.status_code == 403 and r.json()["error"]["field"] == field, r.text
    for field, value in [("rate_limit", True), ("max_concurrency", 2.0), ("max_concurrency", "2")]:  # JSON's types
        r = await api.post("/v1/keys", json={"name": "typed", "scopes": ["retrieve"], field: value}, headers=admin)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    listed = await api.get("/v1/keys", headers=admin)
    assert [k["name"] for k in listed.json()] == ["u1-all", "u1-read", "slow", "u1-admin", "u1-reader"]
    assert secret not in listed.text and "secret_hash" not in listed.text
    root_list = await api.get("/v1/keys", headers=bearer(keys["root"]))
    assert {k["name"] for k in root_list.json()} >= {"root", "u1-reader"}  # every key, for an all-users admin
    assert (await api.delete("/v1/keys/root", headers=admin)).status_code == 404  # not its to revoke
    gone = await api.delete("/v1/keys/u1-reader", headers=admin)
    assert gone.status_code == 200 and gone.json()["status"] == "revoked"
    r = await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(secret))
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]  # at once, in this server
    assert (await api.get("/v1/keys", headers=bearer(keys["u1-read"]))).status_code == 403  # admin scope only
