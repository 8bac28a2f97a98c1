"""What one tenant's key may cost others (#30), in process: child keys bounded by their parent,
bounds on every key field, names per owner, audit lines, metrics per key, the one error format
and ingest bodies parsed within bounds. The slow-body case runs against a real ``hrt serve`` in
tests/integration/test_security.py."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import replace

import httpx
import pytest

from hrt.api import create_app
from hrt.auth import SCOPES, new_key, token_key_id
from hrt.ingest import MAX_REPORTED_ERRORS
from tests.helpers import bearer, concept

RETRIEVE = {"user_id": "u1", "key_phrases": ["Project Phoenix"], "as_of": "2025-08-01T00:00:00Z"}


@pytest.fixture
async def keys(loaded_service):
    """name -> token: an admin of u1 that expires in an hour with limits of its own, an admin of
    u2, an ops key of u1, and an operator's key for every user."""
    made = {}
    now = time.time()
    for name, scopes, users, extra in [
        ("u1-admin", ["admin", "retrieve", "ops"], ["u1"], {"expires_at": now + 3600, "rate_limit": 50.0}),
        ("u2-admin", ["admin", "retrieve"], ["u2"], {"max_concurrency": 4}),
        ("u1-ops", ["ops", "retrieve"], ["u1"], {}),
        ("root", SCOPES, None, {}),
    ]:
        token, record = new_key(name, scopes, users, now=now, **extra)
        await loaded_service.records.create_key(record)
        made[name] = token
    return made


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "hrt.audit"]


# --- finding 2: a child key never outlives nor out-powers its parent --------------------------


async def test_a_child_key_is_bounded_by_its_parent_and_dies_with_it(api, keys, caplog):
    admin = bearer(keys["u1-admin"])
    child = {"name": "u1-child", "scopes": ["retrieve"], "users": ["u1"]}
    for extra, field in [
        ({"expires": "2w"}, "expires"),  # after the parent's hour
        ({"rate_limit": 0}, "rate_limit"),  # none, under a parent of 50/s
        ({"rate_limit": 51.0}, "rate_limit"),
        ({"max_concurrency": 0}, "max_concurrency"),  # none, under the server's 32
        ({"max_concurrency": 33}, "max_concurrency"),
    ]:
        r = await api.post("/v1/keys", json={**child, **extra}, headers=admin)
        assert r.status_code == 403 and r.json()["error"]["field"] == field, (extra, r.text)
    with caplog.at_level(logging.INFO, logger="hrt.audit"):
        made = await api.post("/v1/keys", json=child, headers=admin)
    assert made.status_code == 201, made.text
    info = made.json()
    # the parent's expiry and rate where the request gave none; the parent recorded
    parent_id = token_key_id(keys["u1-admin"])
    assert info["expires_at"] is not None and info["rate_limit"] == 50.0 and info["parent"] == parent_id
    [line] = [x for x in audit_lines(caplog) if x["route"] == "/v1/keys"]
    assert line["target_key"] == info["key_id"] and line["key_id"] == parent_id  # the key created, named
    assert (await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(info["key"]))).status_code == 200
    assert (await api.delete("/v1/keys/u1-admin", headers=bearer(keys["root"]))).status_code == 200
    r = await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(info["key"]))
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]  # with its parent, at once
    listed = {k["name"]: k["status"] for k in (await api.get("/v1/keys", headers=bearer(keys["root"]))).json()}
    assert listed["u1-child"] == "revoked"


# --- findings 3 and 4: no key field can break the key table or the limiter ------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("expires", "999999w"),
        ("expires", "9999-12-31T23:59:59-01:00"),
        ("expires", "2999-01-01"),
        ("rate_limit", 5e-324),
        ("rate_limit", 0.001),
    ],
)
async def test_a_key_field_out_of_bounds_is_a_422_and_stores_nothing(api, keys, loaded_service, field, value):
    root = bearer(keys["root"])
    before = len(await loaded_service.records.keys())
    r = await api.post("/v1/keys", json={"name": "odd", "scopes": ["retrieve"], field: value}, headers=root)
    assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    assert len(await loaded_service.records.keys()) == before
    assert (await api.get("/v1/keys", headers=root)).status_code == 200


async def test_rows_committed_by_the_old_code_break_no_route(api, keys, loaded_service):
    """What 16c520b let through (an expiry in year 21192, a rate of 5e-324) is listed, revoked and
    limited without a 500."""
    far, far_record = new_key("far", ["retrieve"], ["u1"])
    tiny, tiny_record = new_key("tiny", ["retrieve"], ["u1"])
    await loaded_service.records.create_key(replace(far_record, expires_at=606_000_000_000.0))
    await loaded_service.records.create_key(replace(tiny_record, rate_limit=5e-324))
    root = bearer(keys["root"])
    listed = await api.get("/v1/keys", headers=root)
    assert listed.status_code == 200 and {"far", "tiny"} <= {k["name"] for k in listed.json()}
    assert (await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(far))).status_code == 200
    statuses = [(await api.post("/v1/retrieve", json=RETRIEVE, headers=bearer(tiny))).status_code for _ in range(3)]
    assert statuses == [200, 429, 429]
    assert (await api.delete("/v1/keys/far", headers=root)).status_code == 200


# --- finding 7: names are per owner; logs and metrics carry the key id ------------------------


async def test_key_names_tell_nothing_across_tenants(api, keys, caplog):
    body = {"name": "tom-rw", "scopes": ["retrieve"]}
    theirs = await api.post("/v1/keys", json={**body, "users": ["u2"]}, headers=bearer(keys["u2-admin"]))
    mine = await api.post("/v1/keys", json={**body, "users": ["u1"]}, headers=bearer(keys["u1-admin"]))
    assert theirs.status_code == mine.status_code == 201, mine.text  # no 409 to probe with
    again = await api.post("/v1/keys", json={**body, "users": ["u1"]}, headers=bearer(keys["u1-admin"]))
    assert again.status_code == 409 and again.json()["error"]["field"] == "name"  # unique per owner
    with caplog.at_level(logging.INFO, logger="hrt.audit"):
        await api.post("/v1/ingest", json={"records": [concept("u1", "c-x", "X")]}, headers=bearer(mine.json()["key"]))
    [line] = audit_lines(caplog)
    assert line["key_id"] == mine.json()["key_id"] and line["key"] == "tom-rw"
    # an admin for every user sees both: it revokes one by its key id, not by the shared name
    root = bearer(keys["root"])
    clash = await api.delete("/v1/keys/tom-rw", headers=root)
    assert clash.status_code == 409 and mine.json()["key_id"] in clash.json()["error"]["message"]
    gone = await api.delete(f"/v1/keys/{theirs.json()['key_id']}", headers=root)
    assert gone.status_code == 200 and gone.json()["key_id"] == theirs.json()["key_id"]
    # each tenant's admin revokes its own by name
    assert (await api.delete("/v1/keys/tom-rw", headers=bearer(keys["u1-admin"]))).json()["status"] == "revoked"


# --- finding 8: audit lines say when, which request, from where, and why refused ---------------


async def test_audit_lines_carry_time_request_id_client_and_reason(api, keys, caplog):
    u1 = bearer(keys["u1-admin"])
    with caplog.at_level(logging.INFO, logger="hrt.audit"):
        await api.delete("/v1/users/u2", headers={**u1, "x-request-id": "req-42"})  # a route's own 403
        await api.delete("/v1/users/u2", headers={**u1, "x-request-id": "bad id!"})
    first, second = audit_lines(caplog)
    assert (first["status"], first["outcome"], first["reason"]) == (403, "refused", "user")
    assert first["request_id"] == "req-42" and second["request_id"] not in (None, "", "bad id!")
    assert first["client"] == "127.0.0.1" and str(first["ts"]).endswith("Z") and "T" in str(first["ts"])


# --- finding 9: a key for some users does not see other keys' series --------------------------


async def test_a_user_bound_ops_key_sees_only_its_own_traffic(api, keys):
    for name in ("u2-admin", "root", "u1-ops"):
        await api.post(
            "/v1/retrieve",
            json={**RETRIEVE, "user_id": "u2" if name == "u2-admin" else "u1"},
            headers=bearer(keys[name]),
        )
    own, other = token_key_id(keys["u1-ops"]), token_key_id(keys["u2-admin"])
    bound = (await api.get("/metrics", headers=bearer(keys["u1-ops"]))).text
    assert f'key="{own}"' in bound and f'key="{other}"' not in bound
    assert f'key="{token_key_id(keys["root"])}"' not in bound
    # #45 L4: nor the server-wide series, which sum every tenant's traffic
    assert "hrt_requests_total" not in bound and "hrt_retrieve_seconds" not in bound
    assert all(
        line.startswith(("hrt_key_requests", "# HELP hrt_key_requests", "# TYPE hrt_key_requests"))
        for line in bound.splitlines()
    )
    everyone = (await api.get("/metrics", headers=bearer(keys["root"]))).text
    assert f'key="{other}"' in everyone and "hrt_requests_total" in everyone


# --- finding 13: one error format ----------------------------------------------------------------


async def test_a_422_is_the_documented_error_object_with_its_errors_inside(api, keys):
    r = await api.post(
        "/v1/retrieve", json={"user_id": 5, "key_phrases": "x", "limit": -1}, headers=bearer(keys["root"])
    )
    assert r.status_code == 422 and set(r.json()) == {"error"}
    error = r.json()["error"]
    assert set(error) <= {"code", "message", "field", "errors"} and error["field"] == error["errors"][0]["field"]
    spec = (await api.get("/openapi.json", headers=bearer(keys["root"]))).json()
    detail = spec["components"]["schemas"]["ErrorDetail"]["properties"]
    assert set(detail) == {"code", "message", "field", "errors"}


# --- finding 6: an ingest body is parsed within bounds -------------------------------------------


async def test_an_ingest_of_empty_records_stops_at_a_hundred_errors(api, keys, loaded_service):
    before = await loaded_service.records.counts("u1")
    body = b'{"records":[' + b",".join([b"{}"] * 5000) + b"]}"
    r = await api.post("/v1/ingest", content=body, headers={**bearer(keys["root"]), "content-type": "application/json"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == "records[0].kind" and len(error["errors"]) == MAX_REPORTED_ERRORS
    assert error["errors"][-1]["field"] == f"records[{MAX_REPORTED_ERRORS - 1}].kind"
    assert await loaded_service.records.counts("u1") == before


async def test_an_ingest_over_the_record_cap_is_a_413_naming_records(loaded_service, settings, keys):
    app = create_app(settings.model_copy(update={"max_ingest_records": 3}), service=loaded_service)
    records = [concept("u1", f"c-cap{i}", f"Cap {i}") for i in range(4)]
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        root = bearer(keys["root"])
        r = await c.post("/v1/ingest", json={"records": records}, headers=root)
        assert r.status_code == 413 and r.json()["error"]["field"] == "records", r.text
        ndjson = "\n".join(json.dumps(x) for x in records)
        r = await c.post("/v1/ingest", content=ndjson, headers={**root, "content-type": "application/x-ndjson"})
        assert r.status_code == 413 and r.json()["error"]["field"] == "records"
        assert (await c.post("/v1/ingest", json={"records": records[:3]}, headers=root)).status_code == 200
