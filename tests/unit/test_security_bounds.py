"""#45, in process: bodies measured before they are built (H3), no echo of the caller's input over
HTTP and MCP (M5), MCP ``remember(records)`` within the ingest bounds (L5), upstream answers read
within a byte bound (L2), and the audit and input details of L7. Memory is measured with
``tracemalloc`` around a real request through the app (or a real loopback socket for upstream
servers): the peak of what Python allocated while it ran."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
from mcp import Client

from hrt.api import create_app
from hrt.auth import SCOPES, new_key
from hrt.config import Settings
from hrt.errors import StoreError
from hrt.extraction.llm import ChatLLMExtractor, ExtractionFailed
from hrt.ingest import parse_ingest_body
from hrt.jsonbounds import BODY_VALUES, RECORD
from hrt.mcp_server import build_server, operator_principal
from hrt.openai_compat import MAX_ANSWER_BYTES
from hrt.rerankers.qwen3 import Qwen3Reranker
from tests.helpers import asgi_get, bearer, concept, mu

MiB = 1 << 20
SECRET = "SECRET-INPUT"


@pytest.fixture
async def keys(loaded_service: Any) -> dict[str, str]:
    made = {}
    for name, scopes, users in [("root", SCOPES, None), ("u1-write", ["retrieve", "ingest", "export"], ["u1"])]:
        token, record = new_key(name, scopes, users)
        await loaded_service.records.create_key(record)
        made[name] = token
    return made


@pytest.fixture
async def client(loaded_service: Any, settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings, service=loaded_service)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt", timeout=60) as c:
        yield c


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "hrt.audit"]


async def peak_of(run: Callable[[], Awaitable[Any]]) -> tuple[Any, float]:
    """What ``run()`` answers, and the peak of the memory Python allocated meanwhile, in MiB."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = await run()
        return result, (tracemalloc.get_traced_memory()[1] - base) / MiB
    finally:
        tracemalloc.stop()


def junk(size: int) -> str:
    """``[[],[],...]`` of about ``size`` characters: millions of lists once decoded."""
    return "[" + ",".join(["[]"] * (size // 3)) + "]"


# --- H3: bodies measured before they are built ------------------------------------------------------

# 4 MiB keeps the test quick; before #45 each of these peaked at about 70 times its size (16 MiB:
# +1.1 GB), now at the size of its text
HOSTILE_BODIES = [
    (
        "/v1/conversations",
        "application/json",
        '{"user_id":"u1","session_id":"s","messages":[{"content":"x","metadata":{"a":' + junk(4 * MiB) + "}}]}",
        413,
        "messages[0]",
    ),
    (
        "/v1/ingest",
        "application/json",
        '{"records":[' + json.dumps(mu("u1", "m-junk", "x"))[:-1] + ',"metadata":{"a":' + junk(4 * MiB) + "}}]}",
        413,
        "records[0]",
    ),
    (
        "/v1/ingest",
        "application/x-ndjson",
        json.dumps(mu("u1", "m-junk", "x"))[:-1] + ',"metadata":{"a":' + junk(4 * MiB) + "}}\n",
        413,
        "line 1",
    ),
    ("/v1/ingest", "application/json", '{"records":[],"junk":' + junk(4 * MiB) + "}", 422, "body"),
    ("/v1/ingest", "application/json", junk(4 * MiB), 413, "body"),
]


@pytest.mark.parametrize(("path", "ctype", "body", "status", "field"), HOSTILE_BODIES)
async def test_a_hostile_body_is_refused_before_a_tree_of_it_is_built(
    client, keys, loaded_service, path, ctype, body, status, field
):
    raw = body.encode()
    before = await loaded_service.records.counts("u1")
    headers = {**bearer(keys["root"]), "content-type": ctype}

    r, peak = await peak_of(lambda: client.post(path, content=raw, headers=headers))
    assert r.status_code == status and r.json()["error"]["field"] == field, r.text[:300]
    # the body (4 MiB, copied by the test client and the server) and its text: no tree of it
    assert peak < 32, f"{peak:.0f} MiB for a {len(raw) / MiB:.0f} MiB body"
    assert await loaded_service.records.counts("u1") == before


@pytest.mark.parametrize("path", ["/v1/ingest", "/v1/conversations"])
async def test_an_unknown_top_level_member_is_refused_by_its_position_never_its_name(client, keys, path):
    valid = (
        {"records": [mu("u1", "m-new", "hello")]}
        if path == "/v1/ingest"
        else {"user_id": "u1", "session_id": "s", "messages": [{"content": "hello"}]}
    )
    body = json.dumps({**valid, SECRET * 10_000: 1})
    r = await client.post(path, content=body, headers={**bearer(keys["root"]), "content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "body", r.text[:300]
    assert SECRET not in r.text and len(r.content) < 1000
    assert "member 2" in r.json()["error"]["message"] or "member 4" in r.json()["error"]["message"]


def test_a_body_stops_at_its_budget_of_values():
    """Valid records whose metadata is 64 KiB of empty objects: what validated records keep grows
    with the values of the body, which stop at BODY_VALUES (before #45 a 16 MiB body of them was
    kept whole)."""
    metadata = {f"k{i}": {} for i in range(7000)}
    while len(json.dumps(metadata)) > 65_000:
        metadata.popitem()
    records = [mu("u1", f"m{i}", "x", metadata=metadata) for i in range(BODY_VALUES // (3 * len(metadata)) + 2)]
    raw = json.dumps({"records": records}).encode()
    assert len(raw) < 16 * MiB
    with pytest.raises(Exception) as refused:
        parse_ingest_body(raw, "application/json", 10_000)
    assert getattr(refused.value, "code", None) == "payload_too_large" and "JSON values" in str(refused.value)
    assert len(parse_ingest_body(json.dumps({"records": records[:10]}).encode(), "application/json", 10_000)) == 10


def test_what_a_valid_record_may_hold_is_inside_the_bounds():
    """The largest fields a record may have, written as escapes and pretty-printed, parse."""
    deep: Any = 1
    for _ in range(15):
        deep = {"a": deep}
    record = mu("u1", "m-big", "\U0001f600" * 100_000, metadata={"deep": deep, "zeros": [0] * 20_000})
    raw = json.dumps({"records": [record]}, indent=4).encode()  # ensure_ascii: 12 characters a smiley
    assert len(raw) < RECORD.chars
    [parsed] = parse_ingest_body(raw, "application/json", 10)
    assert parsed.content == "\U0001f600" * 100_000


# --- M5: no echo of the caller's input -------------------------------------------------------------


async def test_422s_name_schema_fields_never_the_callers_keys_or_values(client, keys):
    headers = bearer(keys["root"])
    r = await client.post(
        "/v1/retrieve", json={"user_id": "u1", "key_phrases": ["a"], SECRET * 20_000: 1}, headers=headers
    )
    assert r.status_code == 422 and r.json()["error"]["field"] == "body"
    assert SECRET not in r.text and len(r.content) < 1000  # a 200 KB key answered 600 KB before #45
    bad_property = concept("u1", "c-x", "X", properties={SECRET: [1]})
    r = await client.post("/v1/ingest", json={"records": [bad_property]}, headers=headers)
    assert r.status_code == 422 and r.json()["error"]["field"] == "records[0].properties.*", r.text
    assert SECRET not in r.text
    r = await client.delete(f"/v1/users/u1/entities/memory_unit/{SECRET}%20x", headers=headers)
    assert r.status_code == 422 and r.json()["error"]["field"] == "entity_id" and SECRET not in r.text
    for field, value in [("name", f"{SECRET} x"), ("scopes", [SECRET]), ("users", [f"{SECRET} x"])]:
        body = {"name": "k", "scopes": ["retrieve"], field: value}
        r = await client.post("/v1/keys", json=body, headers=headers)
        assert r.status_code == 422 and SECRET not in r.text, r.text


async def test_mcp_errors_never_echo_the_callers_input(loaded_service, settings, keys):
    server = build_server(lambda: loaded_service, lambda _ctx: operator_principal())
    async with Client(server) as mcp:
        unknown = await mcp.call_tool(SECRET, {})
        bad_id = await mcp.call_tool(
            "forget", {"what": "entity", "user_id": "u1", "kind": "concept", "entity_id": f"{SECRET} x"}
        )
        bad_user = await mcp.call_tool("memory_stats", {"user_id": [SECRET]})
    for result in (unknown, bad_id, bad_user):
        assert result.is_error and SECRET not in result.content[0].text, result.content[0].text
    assert json.loads(unknown.content[0].text)["error"]["field"] == "name"

    app = create_app(settings, service=loaded_service)
    headers = {
        **bearer(keys["root"]),
        "accept": "application/json, text/event-stream",
        "content-type": "application/json",
    }
    long_method = SECRET * (200_000 // len(SECRET))  # its echo would be past the small-error size
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c,
    ):
        for method in (SECRET, long_method):
            body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {}}
            r = await c.post("/mcp", json=body, headers=headers)
            doc = r.json()
            assert doc["error"] == {"code": -32601, "message": "Method not found"}, r.text[:300]  # data held it
            assert SECRET not in r.text and int(r.headers["content-length"]) == len(r.content)


# --- L5: MCP remember(records) within the ingest bounds ---------------------------------------------


async def test_mcp_records_obey_the_record_bound_and_the_body_places(loaded_service, settings):
    settings = settings.model_copy(update={"max_ingest_records": 3, "max_ingest_bodies": 2})
    loaded_service.settings = settings  # the record bound is read at each call
    app = create_app(settings, service=loaded_service)
    places = app.state.hrt.ingest_bodies
    caller = operator_principal(users=["u1"], scopes=["ingest"])
    records = [mu("u1", f"m-mcp{i}", "hello") for i in range(4)]
    before = await loaded_service.records.counts("u1")
    server = build_server(lambda: loaded_service, lambda _ctx: caller, places=places.place)
    async with Client(server) as mcp:
        over = await mcp.call_tool("remember", {"records": records})
        with places.place(caller.tenant):  # the tenant's share of the places (half of 2) is taken
            busy = await mcp.call_tool("remember", {"records": records[:3]})
        done = await mcp.call_tool("remember", {"records": records[:3]})
    assert over.is_error and json.loads(over.content[0].text)["error"]["field"] == "records"
    assert json.loads(over.content[0].text)["error"]["code"] == "payload_too_large"
    assert busy.is_error and json.loads(busy.content[0].text)["error"]["code"] == "rate_limited"
    assert not done.is_error and json.loads(done.content[0].text)["upserted"] == 3
    after = await loaded_service.records.counts("u1")
    assert after["memory_unit"] == before["memory_unit"] + 3


# --- L2: upstream answers read within a byte bound --------------------------------------------------


class RawServer:
    """An HTTP server on 127.0.0.1 that answers every request with the same head and body, the body
    written 64 KiB at a time (so the server itself holds no copy of it)."""

    def __init__(self, head: str, body: bytes) -> None:
        self.head = head.encode()
        self.body = memoryview(body)
        self.base_url = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            length = next(int(h.split(":")[1]) for h in head.split("\r\n") if h.lower().startswith("content-length"))
            await reader.readexactly(length)
            writer.write(self.head)
            for i in range(0, len(self.body), 65_536):
                writer.write(self.body[i : i + 65_536])
                await writer.drain()
        writer.close()


# 128 MiB of spaces, gzipped to about 128 KiB: a bomb; and 48 MiB sent plain, without a length
BOMB = gzip.compress(b" " * (128 * MiB), compresslevel=9)
ANSWERS = [
    ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nConnection: close\r\n\r\n", BOMB),
    ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n", b" " * (48 * MiB)),
]


@pytest.mark.parametrize(("head", "body"), ANSWERS, ids=["gzip bomb", "48 MiB"])
async def test_an_llm_answer_is_read_within_its_bound(head, body):
    async with RawServer(head, body) as server:
        llm = ChatLLMExtractor(base_url=server.base_url, timeout_s=30.0)
        try:
            failed, peak = await peak_of(lambda: refused(llm.extract("Ana", "hello")))
        finally:
            await llm.aclose()
    assert isinstance(failed, ExtractionFailed) and str(MAX_ANSWER_BYTES) in failed.message
    assert peak < 16, f"{peak:.0f} MiB"  # the whole answer was read before #45: +518 / +192 MiB


@pytest.mark.parametrize(("head", "body"), ANSWERS, ids=["gzip bomb", "48 MiB"])
async def test_a_rerank_answer_is_read_within_its_bound(head, body):
    async with RawServer(head, body) as server:
        reranker = Qwen3Reranker(base_url=server.base_url, timeout_s=30.0)
        try:
            failed, peak = await peak_of(lambda: refused(reranker._score_one("q", "doc", asyncio.Event())))
        finally:
            await reranker.aclose()
    assert isinstance(failed, StoreError) and str(MAX_ANSWER_BYTES) in failed.message
    assert peak < 16, f"{peak:.0f} MiB"


async def refused(call: Awaitable[Any]) -> Exception:
    try:
        await call
    except Exception as exc:
        return exc
    raise AssertionError("the answer was taken")


# --- L7: audit lines and input details --------------------------------------------------------------


async def test_a_refused_write_is_audited_with_its_users(client, keys, caplog):
    caplog.set_level(logging.INFO, logger="hrt.audit")
    headers = bearer(keys["root"])
    bad = mu("u1", "m-bad", "x") | {"importance_score": 42}
    assert (await client.post("/v1/ingest", json={"records": [bad]}, headers=headers)).status_code == 422
    body = {"user_id": "u2", "session_id": "s", "messages": [{"content": ""}]}
    assert (await client.post("/v1/conversations", json=body, headers=headers)).status_code == 422
    ingest, conversation = audit_lines(caplog)
    assert ingest["outcome"] == "rejected" and ingest["users"] == ["u1"]
    assert conversation["outcome"] == "rejected" and conversation["users"] == ["u2"]


async def test_an_export_cut_short_is_audited_as_cut(loaded_service, settings, keys, caplog):
    caplog.set_level(logging.INFO, logger="hrt.audit")
    app = create_app(settings, service=loaded_service)
    scope = asgi_get("/v1/users/u1/export", keys["root"])

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            raise OSError("the client went away")  # after the 200 and before the first line arrived

    with contextlib.suppress(Exception):
        await app(scope, receive, send)
    [line] = audit_lines(caplog)
    assert line["status"] == 200 and line["complete"] is False and line["outcome"] == "cut"


@pytest.mark.parametrize("name", ["s\u202e", "a\u2028b", "a\u2066b", "a\x85b", "\ufeffs"])
async def test_names_refuse_bidi_and_line_separator_characters(client, keys, name):
    for field in ("session_id", "user_name", "agent_id"):
        body = {"user_id": "u1", "session_id": "s", "messages": [{"content": "x"}], field: name}
        r = await client.post("/v1/conversations", json=body, headers=bearer(keys["root"]))
        assert r.status_code == 422 and r.json()["error"]["field"] == field, (field, r.text)
    body = {"user_id": "u1", "session_id": "s", "messages": [{"content": "x", "name": name}]}
    r = await client.post("/v1/conversations", json=body, headers=bearer(keys["root"]))
    assert r.status_code == 422 and r.json()["error"]["field"] == "messages[0].name"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/retrieve", '{"user_id":"u1","key_phrases":["a\\ud800b"]}'),
        ("/v1/ingest", '{"records":[' + json.dumps(mu("u1", "m-s", "x"))[:-1] + ',"title":"\\udc00"}]}'),
        ("/v1/conversations", '{"user_id":"u1","session_id":"s","messages":[{"content":"a\\ud83d"}]}'),
        ("/v1/conversations", '{"user_id":"u1","session_id":"\\ud800","messages":[{"content":"a"}]}'),
        ("/v1/keys", '{"name":"k\\ud800","scopes":["retrieve"]}'),
    ],
)
async def test_a_lone_surrogate_is_a_400_as_a_body_that_is_not_utf8(client, keys, path, body):
    headers = {**bearer(keys["root"]), "content-type": "application/json"}
    r = await client.post(path, content=body.encode(), headers=headers)
    assert r.status_code == 400 and r.json()["error"]["code"] == "malformed_body", r.text
    pair = body.replace("\\ud800b", "\\ud83d\\ude00")  # a pair is one character, and fine
    if pair != body:
        assert (await client.post(path, content=pair.encode(), headers=headers)).status_code == 200


async def test_a_client_request_id_is_kept_only_when_safe(client, keys, caplog):
    caplog.set_level(logging.INFO, logger="hrt.audit")
    for given in ["trace-1.a:b", "x" * 65, "a\u202eb", "a b", "a\r\nb"]:
        headers = {**bearer(keys["root"]), "x-request-id": given.encode("utf-8")}
        with contextlib.suppress(httpx.LocalProtocolError):
            await client.post("/v1/ingest", json={"records": []}, headers=headers)
    ids = [line["request_id"] for line in audit_lines(caplog)]
    assert ids[0] == "trace-1.a:b"
    assert all(len(i) == 32 and i.isalnum() for i in ids[1:]), ids
