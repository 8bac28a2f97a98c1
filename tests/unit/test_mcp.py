"""The MCP tools in process: the SDK's own client over streamable HTTP to ``/mcp`` of the FastAPI app
(its lifespan running, through the Guard) and straight to the server object. Scopes and users
apply to each tool call as to the REST routes; errors carry the REST error body; the retrieve
tool's JSON is the REST route's canonical JSON. Over real processes (``hrt serve``, ``hrt mcp``
over stdio): tests/integration/test_agents.py."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from hrt.api import create_app
from hrt.auth import SCOPES, new_key
from hrt.mcp_server import build_server, operator_principal
from tests.helpers import concept

RETRIEVE = {"user_id": "u1", "key_phrases": ["Project Phoenix", "bandwidth"], "as_of": "2025-08-01T00:00:00Z"}


@pytest.fixture
async def keys(loaded_service):
    made = {}
    for name, scopes, users in [
        ("u1-all", SCOPES, ["u1"]),
        ("u1-read", ["retrieve"], ["u1"]),
        ("u1-write", ["retrieve", "ingest"], ["u1"]),
        ("root", SCOPES, None),
    ]:
        token, record = new_key(name, scopes, users)
        await loaded_service.records.create_key(record)
        made[name] = token
    return made


@pytest.fixture
async def app(loaded_service, settings, keys):
    """The app with its lifespan running in a task of its own (the MCP session manager's task group
    must be left in the task that entered it; a fixture's teardown runs in another)."""
    application = create_app(settings, service=loaded_service)
    started, stop = asyncio.Event(), asyncio.Event()

    async def serve() -> None:
        async with application.router.lifespan_context(application):
            started.set()
            await stop.wait()

    task = asyncio.create_task(serve())
    await asyncio.wait([task, asyncio.create_task(started.wait())], return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # the lifespan failed: raise why
    yield application
    stop.set()
    await task


@asynccontextmanager
async def mcp_over_http(app: Any, token: str | None) -> AsyncIterator[Client]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url="http://hrt", headers=headers, timeout=30
        ) as http,
        Client(streamable_http_client("http://hrt/mcp", http_client=http)) as client,
    ):
        yield client


async def rest(app: Any, token: str, method: str, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        return await c.request(method, path, headers={"authorization": f"Bearer {token}"}, **kwargs)


def error_of(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    body = json.loads(result.content[0].text)
    assert result.structured_content == body and set(body["error"]) == {"code", "message", "field"}
    return dict(body["error"])


async def test_the_tools_are_described_for_a_model_to_choose(loaded_service):
    server = build_server(lambda: loaded_service, lambda _ctx: operator_principal())
    async with Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {"retrieve_memory", "remember", "forget", "memory_stats", "recall_entity"}
    for tool in tools.values():
        assert tool.description and len(tool.description) > 150, tool.name
        assert "$ref" not in json.dumps(tool.input_schema), tool.name  # the contract's schemas, inlined
        assert all(p.get("description") for p in tool.input_schema["properties"].values()), tool.name
    assert tools["retrieve_memory"].annotations.read_only_hint is True
    assert tools["memory_stats"].annotations.read_only_hint is True
    assert tools["forget"].annotations.destructive_hint is True
    phrases = tools["retrieve_memory"].input_schema["properties"]["key_phrases"]
    assert phrases["maxItems"] == 20 and phrases["items"]["maxLength"] == 200  # from RetrieveRequest


async def test_retrieve_memory_answers_the_rest_routes_canonical_json_and_the_rendered_text(app, keys):
    body = {**RETRIEVE, "render": {"max_chars": 1200}}
    expected = await rest(app, keys["u1-read"], "POST", "/v1/retrieve", json=body)
    assert expected.status_code == 200
    async with mcp_over_http(app, keys["u1-read"]) as client:
        result = await client.call_tool("retrieve_memory", body)
        again = await client.call_tool("retrieve_memory", body)
    assert not result.is_error
    text, canonical = result.content[0].text, result.content[1].text
    assert canonical.encode() == expected.content  # byte for byte
    assert again.content[1].text == canonical  # deterministic
    assert result.structured_content == json.loads(expected.content)
    assert text == expected.json()["retrieval_metadata"]["rendered"]["text"] and len(text) <= 1200
    assert "Project Phoenix" in text


async def test_a_user_with_nothing_stored_is_an_empty_context_for_a_key_acting_for_them_only(app, keys):
    body = {**RETRIEVE, "user_id": "nobody", "render": {"format": "compact"}}
    async with mcp_over_http(app, keys["u1-read"]) as client:  # not the key's user: refused, as REST refuses
        assert error_of(await client.call_tool("retrieve_memory", body))["code"] == "forbidden"
    expected = await rest(app, keys["root"], "POST", "/v1/retrieve", json=body)
    async with mcp_over_http(app, keys["root"]) as client:
        result = await client.call_tool("retrieve_memory", body)
    assert not result.is_error and result.content[1].text.encode() == expected.content
    assert result.structured_content["retrieval_metadata"]["user_known"] is False
    assert "Nothing is stored about this user yet." in result.content[0].text


async def test_each_tool_call_is_checked_against_the_key_like_the_rest_routes(app, keys, loaded_service):
    async with mcp_over_http(app, keys["u1-read"]) as client:
        # a user outside the key: the same refusal as POST /v1/retrieve
        outside = error_of(await client.call_tool("retrieve_memory", {**RETRIEVE, "user_id": "u2"}))
        refused = await rest(app, keys["u1-read"], "POST", "/v1/retrieve", json={**RETRIEVE, "user_id": "u2"})
        assert refused.status_code == 403 and outside == refused.json()["error"]
        # a scope the key lacks: nothing written
        before = await loaded_service.records.counts("u1")
        scope = error_of(await client.call_tool("remember", {"records": [concept("u1", "c-new", "New")]}))
        assert scope["code"] == "forbidden" and "'ingest' scope" in scope["message"]
        assert (
            error_of(await client.call_tool("forget", {"what": "entity", "kind": "concept", "entity_id": "c-phx"}))[
                "code"
            ]
            == "forbidden"
        )
        assert await loaded_service.records.counts("u1") == before
        # the one user the key acts for is the default
        stats = await client.call_tool("memory_stats", {})
        assert stats.structured_content == before
    async with mcp_over_http(app, keys["u1-write"]) as client:
        done = await client.call_tool("remember", {"records": [concept("u1", "c-new", "New thing")]})
        assert done.structured_content == {"upserted": 1, "deleted": 0}
        mixed = [concept("u1", "c-ok", "Fine"), concept("u2", "c-no", "Not yours")]
        assert error_of(await client.call_tool("remember", {"records": mixed}))["field"] == "user_id"
        gone = await client.call_tool("forget", {"what": "entity", "kind": "concept", "entity_id": "c-new"})
        assert gone.structured_content == {"upserted": 0, "deleted": 1}
        # forgetting a whole user needs admin
        assert error_of(await client.call_tool("forget", {"what": "user", "user_id": "u1"}))["code"] == "forbidden"
    assert (await loaded_service.records.counts("u1"))["concept"] == before["concept"]
    assert (await loaded_service.records.counts("u2"))["concept"] > 0
    async with mcp_over_http(app, keys["root"]) as client:
        wiped = await client.call_tool("forget", {"what": "user", "user_id": "u2"})
        assert wiped.structured_content["deleted"] > 0
    assert (await loaded_service.records.counts("u2"))["concept"] == 0


async def test_bad_arguments_are_answered_in_the_rest_error_format(app, keys):
    bad = {**RETRIEVE, "key_phrases": ["x" * 201]}
    async with mcp_over_http(app, keys["root"]) as client:
        mcp_error = error_of(await client.call_tool("retrieve_memory", bad))
        depth = error_of(await client.call_tool("retrieve_memory", {**RETRIEVE, "max_depth": 9}))
        preset = error_of(await client.call_tool("retrieve_memory", {**RETRIEVE, "preset": "fastest"}))
        relevance = await client.call_tool("retrieve_memory", {**RETRIEVE, "preset": "relevance"})
        no_user = error_of(await client.call_tool("retrieve_memory", {"key_phrases": ["x"]}))
        record = error_of(await client.call_tool("remember", {"records": [{"kind": "concept", "user_id": "u1"}]}))
        what = error_of(await client.call_tool("forget", {"user_id": "u1"}))
    rest_error = (await rest(app, keys["root"], "POST", "/v1/retrieve", json=bad)).json()["error"]
    assert mcp_error == {k: rest_error[k] for k in ("code", "message", "field")}
    assert mcp_error["field"] == "key_phrases.0"
    assert depth["field"] == "max_depth" and depth["code"] == "invalid_input"
    assert preset["field"] == "preset" and not relevance.is_error
    assert no_user["field"] == "user_id"  # a key for every user: which one must be said
    assert record["field"] == "records[0].id"  # as POST /v1/ingest names it
    assert what["field"] == "what"


async def test_mcp_needs_a_key_and_writes_are_audited(app, keys, caplog):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        missing = await c.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        wrong = await c.post("/mcp", json={}, headers={"authorization": "Bearer hrt_000000000000_nope"})
    assert missing.status_code == wrong.status_code == 401
    assert missing.json()["error"]["code"] == "unauthenticated"
    with caplog.at_level(logging.INFO, logger="hrt.audit"):
        async with mcp_over_http(app, keys["u1-write"]) as client:
            await client.call_tool("remember", {"records": [concept("u1", "c-aud", "Audited")]})
            await client.call_tool("forget", {"what": "user", "user_id": "u1"})
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "hrt.audit"]
    ok = next(line for line in lines if line["route"] == "mcp:remember")
    assert ok["key"] == "u1-write" and ok["outcome"] == "ok" and ok["users"] == ["u1"] and ok["upserted"] == 1
    refused = next(line for line in lines if line["route"] == "mcp:forget")
    assert refused["status"] == 403 and refused["outcome"] == "refused" and refused["reason"] == "scope"


async def test_the_endpoint_answers_503_until_the_app_has_started(loaded_service, settings):
    application = create_app(settings.model_copy(update={"auth": "off"}), service=loaded_service)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=application), base_url="http://127.0.0.1") as c:
        r = await c.post("/mcp", json={})
    assert r.status_code == 503 and r.json()["error"]["code"] == "unavailable"


async def test_the_stdio_operator_is_narrowed_by_user_and_scope(loaded_service):
    server = build_server(lambda: loaded_service, lambda _ctx: operator_principal(["u1"], ["retrieve"]))
    async with Client(server) as client:
        ok = await client.call_tool("retrieve_memory", {"key_phrases": ["Project Phoenix"], "include_json": False})
        assert not ok.is_error and len(ok.content) == 1 and ok.content[0].text.startswith("## Memory context")
        assert error_of(await client.call_tool("memory_stats", {"user_id": "u2"}))["field"] == "user_id"
        assert error_of(await client.call_tool("remember", {"records": []}))["code"] == "forbidden"
    everyone = build_server(lambda: loaded_service, lambda _ctx: operator_principal())
    async with Client(everyone) as client:
        assert not (await client.call_tool("memory_stats", {"user_id": "u2"})).is_error


@pytest.mark.parametrize(
    "body",
    [
        '{"jsonrpc":"2.0","id":1,"method":"nope","params":"SECRET-INPUT"}',
        '{"SECRET-INPUT": 1}',
        '["SECRET-INPUT"]',
        "not json SECRET-INPUT",
    ],
)
async def test_jsonrpc_errors_keep_the_envelope_without_echoing_input_or_internals(app, keys, body):
    headers = {
        "authorization": f"Bearer {keys['u1-all']}",
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        r = await c.post("/mcp", content=body, headers=headers)
    assert r.status_code == 400
    doc = r.json()
    assert doc["jsonrpc"] == "2.0" and set(doc["error"]) == {"code", "message"}
    assert doc["error"]["code"] in (-32700, -32600, -32602)
    assert "SECRET-INPUT" not in r.text and "pydantic" not in r.text.lower()
    assert int(r.headers["content-length"]) == len(r.content)


async def test_remember_takes_exactly_one_of_text_messages_or_records_checked_like_the_rest_route(
    app, keys, loaded_service
):
    before = await loaded_service.records.counts("u1")
    async with mcp_over_http(app, keys["u1-write"]) as client:
        both = error_of(await client.call_tool("remember", {"text": "hi", "records": []}))
        neither = error_of(await client.call_tool("remember", {"session_id": "s1"}))
        empty = error_of(await client.call_tool("remember", {"text": ""}))
        not_text = error_of(await client.call_tool("remember", {"text": ["a list"]}))
        bad = error_of(
            await client.call_tool("remember", {"messages": [{"content": "fine"}, {"role": "robot", "content": "x"}]})
        )
        outside = error_of(await client.call_tool("remember", {"text": "hello", "user_id": "u2"}))
    assert both["field"] == "records" and "exactly one" in both["message"] and neither["field"] == "records"
    assert empty["field"] == not_text["field"] == "text" and empty["code"] == "invalid_input"
    assert bad["field"] == "messages[1].role"  # as POST /v1/conversations names it
    assert outside == {"code": "forbidden", "message": "this API key may not act for user 'u2'", "field": "user_id"}
    async with mcp_over_http(app, keys["u1-read"]) as client:
        scope = error_of(await client.call_tool("remember", {"text": "hello"}))
    assert scope["code"] == "forbidden" and "'ingest' scope" in scope["message"]
    assert await loaded_service.records.counts("u1") == before  # nothing written


async def test_remember_text_and_messages_answer_the_conversation_result(app, keys, caplog):
    """Needs HRTService.add_messages (issue #32's core)."""
    with caplog.at_level(logging.INFO, logger="hrt.audit"):
        async with mcp_over_http(app, keys["u1-write"]) as client:
            said = await client.call_tool("remember", {"text": "I am learning the cello.", "session_id": "s-mcp"})
            turns = [
                {"role": "user", "content": "My cello teacher is Ilse.", "index": 5},
                {"role": "assistant", "content": "Noted: Ilse teaches you the cello.", "index": 6},
            ]
            both = await client.call_tool("remember", {"messages": turns, "session_id": "s-mcp", "agent_id": "a-1"})
            again = await client.call_tool("remember", {"messages": turns, "session_id": "s-mcp", "agent_id": "a-1"})
    assert not said.is_error, said
    first = said.structured_content
    assert first["user_id"] == "u1" and first["session_id"] == "s-mcp"
    assert [m["status"] for m in first["messages"]] == ["added"] and first["messages"][0]["muid"]
    assert [m["index"] for m in both.structured_content["messages"]] == [5, 6]
    assert [m["status"] for m in again.structured_content["messages"]] == ["unchanged", "unchanged"]
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "hrt.audit"]
    audited = [line for line in lines if line["route"] == "mcp:remember"]
    assert [line["messages"] for line in audited] == [1, 2, 2] and audited[0]["users"] == ["u1"]
