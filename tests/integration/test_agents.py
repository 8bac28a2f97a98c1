"""Agents plug in, against real processes and the real embedding model: hrt.client against a real
``hrt serve``, the MCP tools through the SDK's own client over streamable HTTP (``/mcp`` on that
server) and over stdio (``hrt mcp`` spawned on its own store), and examples/dialogue_agent.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from hrt.cli import sample_data_path
from hrt.client import NO_RETRY, AsyncHRTClient, HRTClient, RetryPolicy
from hrt.contract import AugmentedMemoryContext
from hrt.errors import Conflict, Forbidden, InvalidInput, NotFound, RateLimited, Unauthenticated
from hrt.prompts import render_second_pass
from tests.integration.conftest import ServerProcess, start_hrt_server

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AS_OF = "2025-12-31T00:00:00Z"
BODY = {"user_id": "u-maya", "key_phrases": ["Project Phoenix timeline", "team bandwidth"], "as_of": AS_OF}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One ``hrt serve`` over the sample graph, ingested through the client."""
    tmp = tmp_path_factory.mktemp("agents")
    srv = start_hrt_server(tmp / "srv.db", tmp / "server.log")
    try:
        with HRTClient(srv.base_url, key_of(srv), timeout=120) as hrt:
            written = hrt.ingest_jsonl(sample_data_path().read_bytes())
        assert written.upserted == 1051  # 1,047 lines, and the 4 SUPERSEDES relations `supersedes` names
        yield srv
    finally:
        srv.stop()


def key_of(server: ServerProcess) -> str:
    return server.headers["authorization"].removeprefix("Bearer ")


def test_the_client_speaks_every_route_of_a_real_server(server):
    with HRTClient(server.base_url, key_of(server)) as hrt:
        assert hrt.healthz().status == "ok"
        ready = hrt.readyz()
        assert ready.status == "ready" and ready.auth == "on"
        raw = hrt.retrieve_json(BODY)
        assert raw == httpx.post(f"{server.base_url}/v1/retrieve", json=BODY, headers=server.headers).content
        doc = hrt.retrieve(**BODY)
        assert isinstance(doc, AugmentedMemoryContext) and doc.canonical_json().encode() == raw  # lossless
        assert [m.muid for m in doc.retrieved_memory_units] and all(
            m.muid.startswith("maya-") for m in doc.retrieved_memory_units
        )
        assert hrt.stats("u-tom").memory_unit > 0
        # writes, with the counts the server reports
        note = {
            "kind": "memory_unit",
            "user_id": "u-agent",
            "muid": "agent-m1",
            "content": "The agent client wrote this note about Project Phoenix.",
            "creation_ts": "2025-12-01T10:00:00Z",
        }
        assert (
            hrt.ingest([note, {"kind": "concept", "user_id": "u-agent", "id": "agent-c1", "name": "Phoenix"}]).upserted
            == 2
        )
        assert hrt.stats("u-agent").memory_unit == 1
        assert hrt.delete_entity("u-agent", "memory_unit", "agent-m1").deleted == 1
        assert hrt.delete_user("u-agent").deleted == 1
        assert hrt.stats("u-agent").concept == 0
        assert 'hrt_requests_total{route="/v1/ingest",status="200"}' in hrt.metrics()
        # errors are HRT's types with the server's code and field
        with pytest.raises(InvalidInput) as bad:
            hrt.retrieve(user_id="u-maya", key_phrases=["x"], max_depth=9)
        assert bad.value.field == "max_depth" and bad.value.code == "invalid_input"
        with pytest.raises(Conflict) as clash:  # an id already used by another kind
            hrt.ingest([{**note, "user_id": "u-maya", "muid": "maya-c-phoenix"}])
        assert clash.value.code == "conflict"
        with pytest.raises(NotFound):
            hrt.revoke_key("no-such-key")
        # keys over HTTP: a narrow one is refused outside its user, then revoked
        made = hrt.create_key("agent-maya", ["retrieve"], ["u-maya"], expires="1d")
        assert made.key.startswith("hrt_") and made.users == ["u-maya"]
        assert "agent-maya" in [k.name for k in hrt.list_keys()]
    with HRTClient(server.base_url, made.key) as narrow:
        assert narrow.retrieve(**BODY).retrieval_metadata.user_id == "u-maya"
        with pytest.raises(Forbidden) as outside:
            narrow.retrieve(**{**BODY, "user_id": "u-tom"})
        assert outside.value.field == "user_id" and outside.value.reason == "user"
        with pytest.raises(Forbidden) as scope:
            narrow.delete_user("u-maya")
        assert scope.value.code == "forbidden"
    with HRTClient(server.base_url, key_of(server)) as hrt:
        assert hrt.revoke_key("agent-maya").status == "revoked"
    time.sleep(0.1)
    with HRTClient(server.base_url, made.key) as narrow, pytest.raises(Unauthenticated) as revoked:
        narrow.stats("u-maya")
    assert revoked.value.code == "unauthenticated"


def test_a_rate_limited_key_is_waited_for_as_retry_after_says(server):
    with HRTClient(server.base_url, key_of(server)) as admin:
        slow = admin.create_key("agent-slow", ["retrieve"], ["u-maya"], rate_limit=0.5).key
    try:
        with HRTClient(server.base_url, slow, retry=NO_RETRY) as once:
            once.stats("u-maya")
            with pytest.raises(RateLimited) as limited:
                for _ in range(3):
                    once.stats("u-maya")
        assert limited.value.retry_after_s >= 1 and limited.value.code == "rate_limited"
        waits: list[float] = []

        def sleep(seconds: float) -> None:
            waits.append(seconds)
            time.sleep(seconds)

        with HRTClient(server.base_url, slow, retry=RetryPolicy(jitter=False), sleep=sleep) as patient:
            assert patient.stats("u-maya").memory_unit > 0  # refused at first, then served
        assert waits and waits[0] >= 1  # the server's Retry-After, not the 0.25 s backoff
    finally:
        with HRTClient(server.base_url, key_of(server)) as admin:
            admin.revoke_key("agent-slow")


async def test_the_async_client_against_the_real_server(server):
    async with AsyncHRTClient(server.base_url, key_of(server)) as hrt:
        first, again = await asyncio.gather(hrt.retrieve_json(BODY), hrt.retrieve_json(BODY))
        assert first == again
        assert (await hrt.stats("u-sara")).concept > 0
        with pytest.raises(InvalidInput) as bad:
            await hrt.retrieve(user_id="u-maya", key_phrases=[" "])
        assert bad.value.field == "key_phrases.0"


def rest_answer(server: ServerProcess, body: dict[str, Any]) -> bytes:
    r = httpx.post(f"{server.base_url}/v1/retrieve", json=body, headers=server.headers, timeout=30)
    assert r.status_code == 200, r.text
    return r.content


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> Any:
    return await client.call_tool(tool, arguments)


def error_of(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    return dict(json.loads(result.content[0].text)["error"])


async def test_mcp_over_streamable_http_on_hrt_serve(server):
    expected = rest_answer(server, {**BODY, "render": {"max_tokens": 600}})
    with HRTClient(server.base_url, key_of(server)) as admin:
        reader = admin.create_key("agent-mcp-read", ["retrieve"], ["u-maya"]).key
    try:
        async with (
            httpx2.AsyncClient(headers=server.headers, timeout=60) as http,
            Client(streamable_http_client(f"{server.base_url}/mcp", http_client=http)) as client,
        ):
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"retrieve_memory", "remember", "forget", "memory_stats", "recall_entity"}
            result = await call(client, "retrieve_memory", {**BODY, "render": {"max_tokens": 600}})
            assert not result.is_error
            assert result.content[1].text.encode() == expected  # the REST route's canonical JSON
            assert result.content[0].text == json.loads(expected)["retrieval_metadata"]["rendered"]["text"]
            note = {"kind": "concept", "user_id": "u-mcp", "id": "mcp-c1", "name": "Remembered over MCP"}
            assert (await call(client, "remember", {"records": [note]})).structured_content["upserted"] == 1
            stats = await call(client, "memory_stats", {"user_id": "u-mcp"})
            assert stats.structured_content["concept"] == 1
            gone = await call(client, "forget", {"what": "user", "user_id": "u-mcp"})
            assert gone.structured_content["deleted"] == 1
        async with (
            httpx2.AsyncClient(headers={"authorization": f"Bearer {reader}"}, timeout=60) as http,
            Client(streamable_http_client(f"{server.base_url}/mcp", http_client=http)) as client,
        ):
            assert not (await call(client, "retrieve_memory", {"key_phrases": ["Project Phoenix"]})).is_error
            outside = error_of(await call(client, "retrieve_memory", {**BODY, "user_id": "u-tom"}))
            assert outside == {
                "code": "forbidden",
                "message": "this API key may not act for user 'u-tom'",
                "field": "user_id",
            }
            write = error_of(await call(client, "remember", {"records": [{**note, "user_id": "u-maya"}]}))
            assert write["code"] == "forbidden" and "'ingest' scope" in write["message"]
    finally:
        with HRTClient(server.base_url, key_of(server)) as admin:
            admin.revoke_key("agent-mcp-read")
    # without a key, /mcp is refused before the SDK sees the request
    refused = httpx.post(f"{server.base_url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthenticated"
    metrics = httpx.get(f"{server.base_url}/metrics", headers=server.headers).text
    assert 'hrt_requests_total{route="/mcp",status="200"}' in metrics


async def test_mcp_over_stdio_from_hrt_mcp(server, tmp_path):
    db = tmp_path / "stdio.db"
    ingested = subprocess.run(
        [sys.executable, "-m", "hrt.cli", "ingest", str(sample_data_path()), "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert ingested.returncode == 0, ingested.stderr
    body = {**BODY, "render": {"format": "text", "max_chars": 3000}}
    expected = rest_answer(server, body)  # another process, another store, the same data
    params = StdioServerParameters(command=sys.executable, args=["-m", "hrt.cli", "mcp", "--db", str(db)], cwd=ROOT)
    async with Client(params) as client:
        result = await call(client, "retrieve_memory", body)
        assert not result.is_error and result.content[1].text.encode() == expected
        assert (await call(client, "memory_stats", {"user_id": "u-sara"})).structured_content["memory_unit"] > 0
        note = {"kind": "concept", "user_id": "u-sara", "id": "sara-c-stdio", "name": "Stdio note"}
        assert (await call(client, "remember", {"records": [note]})).structured_content["upserted"] == 1
        gone = await call(
            client, "forget", {"what": "entity", "user_id": "u-sara", "kind": "concept", "entity_id": "sara-c-stdio"}
        )
        assert gone.structured_content["deleted"] == 1
    narrow = StdioServerParameters(
        command=sys.executable,
        args=["-m", "hrt.cli", "mcp", "--db", str(db), "--user", "u-maya", "--scope", "retrieve"],
        cwd=ROOT,
    )
    async with Client(narrow) as client:
        ok = await call(client, "retrieve_memory", {"key_phrases": ["Project Phoenix"], "as_of": AS_OF})
        assert not ok.is_error and json.loads(ok.content[1].text)["retrieval_metadata"]["user_id"] == "u-maya"
        assert error_of(await call(client, "memory_stats", {"user_id": "u-tom"}))["field"] == "user_id"
        assert error_of(await call(client, "forget", {"what": "user", "user_id": "u-maya"}))["code"] == "forbidden"


def test_the_dialogue_agent_example_prints_the_second_pass_prompt(server):
    message = "How is Project Phoenix doing, and does the team have bandwidth for the pricing decision?"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "dialogue_agent.py"),
            "--url",
            server.base_url,
            "--key",
            key_of(server),
            "--user",
            "u-maya",
            "--as-of",
            AS_OF,
            message,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert "['Project Phoenix', 'team', 'bandwidth', 'pricing decision']" in run.stderr
    request = {
        "user_id": "u-maya",
        "key_phrases": ["Project Phoenix", "team", "bandwidth", "pricing decision"],
        "render": {"format": "compact", "max_tokens": 1500},
        "as_of": AS_OF,
    }
    with HRTClient(server.base_url, key_of(server)) as hrt:
        expected = render_second_pass(message, hrt.retrieve(request))
    assert run.stdout == expected + "\n"
    assert f"<final_input_text>\n{message}\n</final_input_text>" in run.stdout
    assert "- Project Phoenix (project): " in run.stdout and "{memory_context}" not in run.stdout
    assert "maya-c-phoenix" not in run.stdout  # the compact text: no ids


# ---------------------------------------------------------------------------------------------
# the memory loop: these need HRTService.add_messages (issue #32's core)
# ---------------------------------------------------------------------------------------------


def test_the_clients_add_messages_and_the_memory_loop(server):
    turn = [
        {"role": "user", "content": "Our kayak club meets at Lake Orta every second Sunday.", "index": 0},
        {"role": "assistant", "content": "Noted: the kayak club meets at Lake Orta.", "index": 1},
    ]
    with HRTClient(server.base_url, key_of(server)) as hrt:
        written = hrt.add_messages("u-loop", "s-club", turn, agent_id="agent-loop")
        assert [m.status for m in written.messages] == ["added", "added"]
        again = hrt.add_messages("u-loop", "s-club", turn, agent_id="agent-loop")
        assert [m.status for m in again.messages] == ["unchanged", "unchanged"]
        found = hrt.retrieve(user_id="u-loop", key_phrases=["kayak club Lake Orta"])
        assert {m.muid for m in found.retrieved_memory_units} & {m.muid for m in written.messages}
        with pytest.raises(InvalidInput) as bad:
            hrt.add_messages("u-loop", "s-club", [{"content": ""}])
        assert bad.value.field == "messages[0].content"
        hrt.delete_user("u-loop")


async def test_the_async_client_adds_messages(server):
    async with AsyncHRTClient(server.base_url, key_of(server)) as hrt:
        written = await hrt.add_messages("u-loop-async", "s-1", [{"content": "I run the Lisbon half in March."}])
        assert written.messages[0].status == "added" and written.messages[0].index == 0
        await hrt.delete_user("u-loop-async")


async def test_mcp_remember_takes_a_message_over_streamable_http(server):
    async with (
        httpx2.AsyncClient(headers=server.headers, timeout=60) as http,
        Client(streamable_http_client(f"{server.base_url}/mcp", http_client=http)) as client,
    ):
        said = await call(client, "remember", {"user_id": "u-mcp-loop", "text": "My bike is a green Brompton."})
        assert not said.is_error, said
        assert said.structured_content["session_id"] == "mcp"
        assert said.structured_content["messages"][0]["status"] == "added"
        stats = await call(client, "memory_stats", {"user_id": "u-mcp-loop"})
        assert stats.structured_content["memory_unit"] >= 1
        await call(client, "forget", {"what": "user", "user_id": "u-mcp-loop"})


def test_the_dialogue_agent_example_writes_the_turn_back_with_an_answer(server):
    def turn(message: str, answer: str) -> subprocess.CompletedProcess[str]:
        example = str(ROOT / "examples" / "dialogue_agent.py")
        args = ["--url", server.base_url, "--key", key_of(server), "--user", "u-loop-example", "--answer", answer]
        run = subprocess.run(
            [sys.executable, example, *args, message], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert run.returncode == 0, run.stderr
        return run

    # the user's first turn: nothing to retrieve yet, the turn is written
    first = turn("I am planning a trip to Kyoto in April.", "Kyoto in April is cherry blossom season.")
    assert "nothing remembered of u-loop-example yet" in first.stderr
    assert "# message 0: added as " in first.stderr and "# message 1: added as " in first.stderr
    muids = {line.rsplit(" ", 1)[-1] for line in first.stderr.splitlines() if line.startswith("# message ")}
    assert len(muids) == 2 and "Nothing is stored about this user yet." in first.stdout
    # the next turn's retrieval finds it, before the second pass
    second = turn("Where was I planning to travel in April?", "To Kyoto.")
    assert "<final_input_text>" in second.stdout and "trip to Kyoto in April" in second.stdout
    assert "# message 2: added as " in second.stderr  # after the session's last message
    with HRTClient(server.base_url, key_of(server)) as hrt:
        assert hrt.stats("u-loop-example").memory_unit >= 4
        hrt.delete_user("u-loop-example")
