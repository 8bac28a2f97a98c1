"""``POST /v1/conversations`` on a real ``hrt serve`` (uvicorn, the real embedder) that holds nothing
but what the messages sent made: keys and scopes, validation naming the field, the ingest body
limit; then messages in, memory units out: retrievable by the muids the route answered, a resend
unchanged, an edited message replaced. The conversations here are made up for the tests.
The route x scope x user matrix (nothing written by a refusal) is in test_security.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hrt.contract import AugmentedMemoryContext
from hrt.extraction.messages import MAX_MESSAGES, ConversationResult
from tests.integration.conftest import ServerProcess, start_hrt_server

pytestmark = pytest.mark.integration

USER = "u-sailor"
BODY_LIMIT = 400_000  # HRT_MAX_INGEST_BODY_BYTES of this server; the default 1 MiB stays for other routes
TURNS = [
    {"role": "user", "content": "I finally bought a secondhand sailboat, a 1978 Albin Vega named Marlin.", "index": 0},
    {"role": "assistant", "content": "Congratulations on Marlin! Where will you keep her moored?", "index": 1},
    {"role": "user", "content": "At the marina in Horta, on Faial, from April onwards.", "index": 2},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("conversations")
    srv = start_hrt_server(tmp / "srv.db", tmp / "server.log", env={"HRT_MAX_INGEST_BODY_BYTES": str(BODY_LIMIT)})
    try:
        yield srv
    finally:
        srv.stop()


def post(server: ServerProcess, body: Any, token: str | None = "admin", **kwargs: Any) -> httpx.Response:
    headers = dict(server.headers) if token == "admin" else {"authorization": f"Bearer {token}"} if token else {}
    if not isinstance(body, bytes | str):
        kwargs["json"] = body
    else:
        kwargs["content"] = body
        headers["content-type"] = "application/json"
    return httpx.post(f"{server.base_url}/v1/conversations", headers=headers, timeout=120, **kwargs)


def stats(server: ServerProcess, user: str) -> dict[str, int]:
    r = httpx.get(f"{server.base_url}/v1/users/{user}/stats", headers=server.headers, timeout=30)
    assert r.status_code == 200, r.text
    return dict(r.json())


def make_key(server: ServerProcess, name: str, scopes: list[str], users: list[str]) -> str:
    r = httpx.post(
        f"{server.base_url}/v1/keys",
        json={"name": name, "scopes": scopes, "users": users},
        headers=server.headers,
        timeout=30,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["key"])


def body(**changes: Any) -> dict[str, Any]:
    return {"user_id": USER, "session_id": "s-boat", "messages": TURNS, **changes}


# ---------------------------------------------------------------------------------------------
# the front door: keys, validation, limits (nothing reaches HRTService.add_messages)
# ---------------------------------------------------------------------------------------------


def test_a_request_without_a_key_or_outside_the_keys_users_or_scope_is_refused_and_writes_nothing(server):
    other = make_key(server, "conv-other", ["ingest"], ["u-someone-else"])
    reader = make_key(server, "conv-reader", ["retrieve"], [USER])
    before = stats(server, USER)
    missing = post(server, body(), token=None)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "unauthenticated"
    assert missing.headers["www-authenticate"].startswith("Bearer")
    outside = post(server, body(), token=other)
    assert outside.status_code == 403 and outside.json()["error"] == {
        "code": "forbidden",
        "message": f"this API key may not act for user '{USER}'",
        "field": "user_id",
    }
    scope = post(server, body(), token=reader)
    assert scope.status_code == 403 and "'ingest' scope" in scope.json()["error"]["message"]
    assert stats(server, USER) == before


LONG = "x" * 100_001
BAD_BODIES = [
    # (name, body, status, field)
    ("no messages", body(messages=[]), 422, "messages"),
    ("too many messages", body(messages=[{"content": "hi"}] * (MAX_MESSAGES + 1)), 413, "messages"),
    ("bad timestamp", body(messages=[TURNS[0], {"content": "x", "timestamp": "Tue"}]), 422, "messages[1].timestamp"),
    ("a number as timestamp", body(messages=[{"content": "x", "timestamp": 1700000000}]), 422, "messages[0].timestamp"),
    # an unknown member is named by where it is, never by the name the caller sent (#45, M5)
    ("extra field", body(colour="blue"), 422, "body"),
    ("extra message field", body(messages=[{"content": "x", "tool_calls": []}]), 422, "messages[0]"),
    ("content too long", body(messages=[TURNS[0], TURNS[1], {"content": LONG}]), 422, "messages[2].content"),
    ("empty content", body(messages=[{"content": ""}]), 422, "messages[0].content"),
    ("unknown role", body(messages=[{"role": "robot", "content": "x"}]), 422, "messages[0].role"),
    ("index as text", body(messages=[{"content": "x", "index": "3"}]), 422, "messages[0].index"),
    ("bad user id", body(user_id="no spaces allowed"), 422, "user_id"),
    ("no session", {"user_id": USER, "messages": TURNS}, 422, "session_id"),
    ("not an object", [TURNS], 422, "body"),
    ("not JSON", b'{"user_id": "u-sailor", ', 400, "body"),
    ("NaN", b'{"user_id": "u-sailor", "session_id": "s", "messages": [{"content": "a", "index": NaN}]}', 400, "body"),
]


@pytest.mark.parametrize(("name", "sent", "status", "field"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_invalid_bodies_are_refused_naming_the_field(server, name, sent, status, field):
    before = stats(server, USER)
    r = post(server, sent)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["field"] == field and error["message"], error
    assert stats(server, USER) == before


def test_the_errors_list_names_every_invalid_message(server):
    r = post(server, body(messages=[{"content": ""}, TURNS[0], {"content": "x", "role": "robot"}]))
    assert r.status_code == 422
    assert [e["field"] for e in r.json()["error"]["errors"]] == ["messages[0].content", "messages[2].role"]


def test_the_body_is_bounded_by_the_ingest_limit_not_the_default(server):
    over = post(server, body(messages=[{"content": "y" * 90_000, "index": i} for i in range(5)]))
    assert over.status_code == 413 and over.json()["error"]["field"] == "body"
    assert str(BODY_LIMIT) in over.json()["error"]["message"]


def test_the_openapi_document_shows_the_request_and_the_response(server):
    spec = httpx.get(f"{server.base_url}/openapi.json", headers=server.headers, timeout=30).json()
    route = spec["paths"]["/v1/conversations"]["post"]
    assert route["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ConversationRequest"
    }
    assert route["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ConversationResult"
    }
    assert {"401", "403", "413", "422", "429"} <= set(route["responses"])
    request = spec["components"]["schemas"]["ConversationRequest"]
    assert request["properties"]["messages"]["items"] == {"$ref": "#/components/schemas/ConversationMessage"}
    assert "timestamp" in spec["components"]["schemas"]["ConversationMessage"]["properties"]


# ---------------------------------------------------------------------------------------------
# messages in, memory out: these need HRTService.add_messages (issue #32's core)
# ---------------------------------------------------------------------------------------------


def retrieve(server: ServerProcess, phrases: list[str]) -> AugmentedMemoryContext:
    r = httpx.post(
        f"{server.base_url}/v1/retrieve",
        json={"user_id": USER, "key_phrases": phrases, "limits": {"memory_units": 10}},
        headers=server.headers,
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return AugmentedMemoryContext.model_validate_json(r.content)


def test_messages_become_memory_units_a_retrieval_returns_by_their_muids(server):
    r = post(server, body())
    assert r.status_code == 200, r.text
    result = ConversationResult.model_validate_json(r.content)
    assert result.user_id == USER and result.session_id == "s-boat"
    assert [(m.index, m.status) for m in result.messages] == [(0, "added"), (1, "added"), (2, "added")]
    muids = [m.muid for m in result.messages]
    assert len(set(muids)) == 3
    assert stats(server, USER)["memory_unit"] >= 3
    found = retrieve(server, ["Albin Vega sailboat Marlin", "marina in Horta"])
    returned = [m.muid for m in found.retrieved_memory_units]
    assert returned and set(returned) <= set(muids)  # the server holds nothing else
    assert muids[0] in returned and muids[2] in returned
    # with the concepts the extractor linked, and what the graph walk reached, with its path
    assert found.retrieved_concepts and any(m.connected_concept_ids_and_names for m in found.retrieved_memory_units)
    assert any(p.hops for p in found.retrieval_metadata.provenance.values())

    # the same messages again: nothing changes
    again = ConversationResult.model_validate_json(post(server, body()).content)
    unchanged = [(m.index, m.muid, "unchanged") for m in result.messages]
    assert [(m.index, m.muid, m.status) for m in again.messages] == unchanged

    # an edited message at the same index: replaced, and what a retrieval returns is the new text
    edited = [TURNS[0], TURNS[1], {**TURNS[2], "content": "At the marina in Angra, on Terceira, from May onwards."}]
    changed = post(server, body(messages=edited))
    assert changed.status_code == 200, changed.text
    statuses = [(m.index, m.status) for m in ConversationResult.model_validate_json(changed.content).messages]
    assert statuses == [(0, "unchanged"), (1, "unchanged"), (2, "replaced")]
    replaced = ConversationResult.model_validate_json(changed.content).messages[2].muid
    now = retrieve(server, ["marina in Angra on Terceira"])
    unit = next(m for m in now.retrieved_memory_units if m.muid == replaced)
    assert "Angra" in unit.content_snippet and "Horta" not in unit.content_snippet
    # and it comes with the concepts the extractor linked it to
    assert {c.id for c in unit.connected_concept_ids_and_names} >= {"entity:angra", "entity:terceira"}


def test_messages_without_an_index_go_after_the_sessions_last_one(server):
    first = ConversationResult.model_validate_json(post(server, body(session_id="s-log", messages=TURNS[:2])).content)
    more = post(server, body(session_id="s-log", messages=[{"content": "The mast needs new rigging before summer."}]))
    assert more.status_code == 200, more.text
    [added] = ConversationResult.model_validate_json(more.content).messages
    assert added.index == max(m.index for m in first.messages) + 1 and added.status == "added"
