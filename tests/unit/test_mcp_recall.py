"""The MCP tool ``recall_entity`` (#33) in process, over ``/mcp`` of the FastAPI app as in
test_mcp.py: the REST route's answer, the key's scope and users checked, another user's id the
same not-found, and the key that wrote an entity through ``remember`` recorded (the operator's
writes over stdio under none)."""

from __future__ import annotations

from mcp import Client

from hrt.mcp_server import build_server, operator_principal
from tests.helpers import concept
from tests.unit.test_mcp import app, error_of, keys, mcp_over_http, rest  # noqa: F401  (fixtures)


def key_id(token: str) -> str:
    return token.split("_")[1]  # hrt_<key id>_<secret>


async def test_recall_entity_answers_what_the_rest_route_does(app, keys):  # noqa: F811
    expected = await rest(app, keys["u1-read"], "GET", "/v1/users/u1/entities/concept/c-phx")
    assert expected.status_code == 200
    async with mcp_over_http(app, keys["u1-read"]) as client:
        found = await client.call_tool("recall_entity", {"kind": "concept", "entity_id": "c-phx"})
        theirs = error_of(await client.call_tool("recall_entity", {"kind": "concept", "entity_id": "xc-phx"}))
        absent = error_of(await client.call_tool("recall_entity", {"kind": "concept", "entity_id": "xc-pho"}))
        outside = error_of(
            await client.call_tool("recall_entity", {"user_id": "u2", "kind": "concept", "entity_id": "xc-phx"})
        )
        kind = error_of(await client.call_tool("recall_entity", {"kind": "person", "entity_id": "c-phx"}))
        limit = error_of(
            await client.call_tool("recall_entity", {"kind": "concept", "entity_id": "c-phx", "relation_limit": 0})
        )
    assert not found.is_error and found.structured_content == expected.json()
    assert found.structured_content["record"]["name"] == "Project Phoenix"
    assert theirs["code"] == absent["code"] == "not_found"
    assert theirs["message"].replace("xc-phx", "ID") == absent["message"].replace("xc-pho", "ID")
    assert outside["code"] == "forbidden" and outside["field"] == "user_id"
    assert kind["field"] == "kind" and limit["field"] == "relation_limit"


async def test_recall_entity_needs_the_retrieve_scope(loaded_service):
    writer_only = build_server(lambda: loaded_service, lambda _ctx: operator_principal(["u1"], ["ingest"]))
    async with Client(writer_only) as client:
        refused = error_of(await client.call_tool("recall_entity", {"kind": "concept", "entity_id": "c-phx"}))
    assert refused["code"] == "forbidden" and "'retrieve' scope" in refused["message"]


async def test_the_writer_is_the_key_that_remembered_it_or_none_for_the_operator(app, keys, loaded_service):  # noqa: F811
    async with mcp_over_http(app, keys["u1-write"]) as client:
        done = await client.call_tool("remember", {"records": [concept("u1", "c-kept", "Kept by a key")]})
        assert not done.is_error
        view = await client.call_tool("recall_entity", {"kind": "concept", "entity_id": "c-kept"})
    assert view.structured_content["written_by"] == key_id(keys["u1-write"])
    assert view.structured_content["written_at"] == "2025-08-01T00:00:00Z"  # the service clock (FIXED_NOW)
    operator = build_server(lambda: loaded_service, lambda _ctx: operator_principal(["u1"]))
    async with Client(operator) as client:
        await client.call_tool("remember", {"records": [concept("u1", "c-kept", "Kept by the operator")]})
        again = await client.call_tool("recall_entity", {"kind": "concept", "entity_id": "c-kept"})
    assert again.structured_content["written_by"] is None and again.structured_content["version"] == 2
