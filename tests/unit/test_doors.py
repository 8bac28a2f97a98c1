"""The doors over one use-case layer (:mod:`hrt.usecases`): the HTTP routes, the MCP tools and the
CLI each call the same use case, so a refused user is refused with the same error by every door,
and a write takes the write slot exactly once whichever door it came through."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from hrt import usecases
from hrt.api import create_app
from hrt.auth import Principal, new_key, users_tenant
from hrt.cli import ingest_file
from hrt.mcp_server import build_server
from hrt.service import HRTService
from tests.helpers import bearer, concept, mu

U1 = frozenset(["u1"])


@contextlib.asynccontextmanager
async def doors(svc: HRTService, settings: Any) -> AsyncIterator[tuple[httpx.AsyncClient, Client]]:
    """An HTTP client and an MCP client acting for the same key: user u1, retrieve and ingest (the
    MCP client's task group is left in the task that entered it: a context, not a fixture)."""
    token, record = new_key("u1-writer", ["retrieve", "ingest"], ["u1"])
    await svc.records.create_key(record)
    principal = Principal(name=record.name, key_id=record.key_id, scopes=frozenset(record.scopes), users=U1)
    app = create_app(settings, service=svc)
    server = build_server(lambda: svc, lambda _ctx: principal)
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://hrt", headers=bearer(token)) as http,
        Client(server) as mcp,
    ):
        yield http, mcp


def tool_error(result: Any) -> dict[str, Any]:
    assert result.is_error, result
    return dict(json.loads(result.content[0].text)["error"])


@pytest.fixture
def slots_taken(loaded_service: HRTService, monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The tenant of every write slot taken from now on."""
    taken: list[str | None] = []
    place = loaded_service.write_slots.place

    @contextlib.contextmanager
    def counted(tenant: str | None, refusal: Any) -> Iterator[Any]:
        taken.append(tenant)
        with place(tenant, refusal) as held:
            yield held

    monkeypatch.setattr(loaded_service.write_slots, "place", counted)
    return taken


async def test_a_refused_user_is_refused_alike_by_http_and_mcp(loaded_service: HRTService, settings: Any) -> None:
    async with doors(loaded_service, settings) as (http, mcp):
        await refused_alike(http, mcp)


async def refused_alike(http: httpx.AsyncClient, mcp: Client) -> None:
    deleted = await http.delete("/v1/users/u2/entities/concept/xc-phx")
    forgot = await mcp.call_tool(
        "forget", {"what": "entity", "user_id": "u2", "kind": "concept", "entity_id": "xc-phx"}
    )
    assert deleted.status_code == 403
    assert tool_error(forgot) == deleted.json()["error"]

    said = {"user_id": "u2", "session_id": "s1", "messages": [{"role": "user", "content": "hello"}]}
    sent = await http.post("/v1/conversations", json=said)
    remembered = await mcp.call_tool("remember", {"user_id": "u2", "session_id": "s1", "messages": said["messages"]})
    assert sent.status_code == 403
    assert tool_error(remembered) == sent.json()["error"]


async def test_http_mcp_and_cli_go_through_the_same_use_case(
    loaded_service: HRTService, settings: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[str] = []
    for name in ("delete_entity", "ingest_records", "add_messages"):
        real = getattr(usecases, name)

        async def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return await _real(*args, **kwargs)

        monkeypatch.setattr(usecases, name, spy)
    async with doors(loaded_service, settings) as (http, mcp):
        await write_through_every_door(http, mcp, loaded_service, tmp_path)
    assert calls == ["delete_entity", "delete_entity", "ingest_records", "ingest_records"] + ["add_messages"] * 2


async def write_through_every_door(http: httpx.AsyncClient, mcp: Client, svc: HRTService, tmp_path: Path) -> None:
    assert (await http.delete("/v1/users/u1/entities/concept/c-phx")).status_code == 200
    assert not (await mcp.call_tool("forget", {"what": "entity", "kind": "concept", "entity_id": "c-bw"})).is_error
    assert not (await mcp.call_tool("remember", {"records": [concept("u1", "c-door", "Door")]})).is_error
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(concept("u1", "c-cli", "From the CLI")) + "\n", encoding="utf-8")
    assert await ingest_file(svc, path, None) == (1, 0)
    said = [{"role": "user", "content": "a note through every door"}]
    conversation = {"user_id": "u1", "session_id": "s", "messages": said}
    assert (await http.post("/v1/conversations", json=conversation)).is_success
    assert not (await mcp.call_tool("remember", {"session_id": "s", "messages": said})).is_error


async def test_every_write_takes_the_write_slot_exactly_once(
    loaded_service: HRTService, settings: Any, slots_taken: list[str | None], tmp_path: Path
) -> None:
    async with doors(loaded_service, settings) as (http, mcp):
        await write_once_each(http, mcp, slots_taken)
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(mu("u1", "m-door-3", "from the CLI")) + "\n", encoding="utf-8")
    await ingest_file(loaded_service, path, None)
    assert slots_taken[5:] == [None]  # the operator's share, once


async def write_once_each(http: httpx.AsyncClient, mcp: Client, slots_taken: list[str | None]) -> None:
    tenant = users_tenant(["u1"])
    assert (await http.post("/v1/ingest", json={"records": [mu("u1", "m-door-1", "over HTTP")]})).is_success
    assert len(slots_taken) == 1
    said = {"user_id": "u1", "session_id": "s", "messages": [{"role": "user", "content": "said over HTTP"}]}
    assert (await http.post("/v1/conversations", json=said)).is_success
    assert len(slots_taken) == 2
    assert (await http.delete("/v1/users/u1/entities/memory_unit/m-door-1")).is_success
    assert len(slots_taken) == 3
    assert not (await mcp.call_tool("remember", {"records": [mu("u1", "m-door-2", "over MCP")]})).is_error
    assert not (await mcp.call_tool("remember", {"text": "said over MCP"})).is_error
    assert len(slots_taken) == 5
    assert slots_taken == [tenant] * 5
