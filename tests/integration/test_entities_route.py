"""``GET /v1/users/{user_id}/entities/{kind}/{id}`` and ``GET /v1/users/{user_id}/entities`` (#33) on
a real ``hrt serve`` (uvicorn, the real embedder): keys and scopes as ``/stats`` has them (403 for
a key outside its users, whether the user exists or not), another user's id a 404 reading as an
absent one, validation naming the parameter, the writer recorded from the key that wrote, pages
stable while writes happen between them, byte-identical answers, and the Python client's
``get_entity`` / ``list_entities`` (sync and async) over the same server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from hrt.client import AsyncHRTClient, HRTClient
from hrt.errors import InvalidInput, NotFound
from tests.helpers import mu, small_graph
from tests.integration.conftest import ServerProcess, start_hrt_server

pytestmark = pytest.mark.integration

PAGED = "u-pager"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("entities")
    srv = start_hrt_server(tmp / "srv.db", tmp / "server.log")
    try:
        records = small_graph("u1") + small_graph("u2", prefix="x")
        records += [mu(PAGED, f"p-{i:03d}", f"note {i}", title=f"Note {i}") for i in range(0, 60, 2)]
        r = httpx.post(f"{srv.base_url}/v1/ingest", json={"records": records}, headers=srv.headers, timeout=120)
        assert r.status_code == 200, r.text
        yield srv
    finally:
        srv.stop()


def key_id(token: str) -> str:
    return token.split("_")[1]  # hrt_<key id>_<secret>


def make_key(server: ServerProcess, name: str, scopes: list[str], users: list[str]) -> str:
    r = httpx.post(
        f"{server.base_url}/v1/keys",
        json={"name": name, "scopes": scopes, "users": users},
        headers=server.headers,
        timeout=30,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["key"])


def get(server: ServerProcess, path: str, token: str | None = "admin", **params: Any) -> httpx.Response:
    headers = dict(server.headers) if token == "admin" else {"authorization": f"Bearer {token}"} if token else {}
    return httpx.get(f"{server.base_url}{path}", headers=headers, params=params, timeout=30)


def test_keys_act_for_their_users_and_scope_as_on_stats(server):
    other = make_key(server, "ent-other", ["retrieve"], ["u2"])
    writer = make_key(server, "ent-writer", ["ingest"], ["u1"])
    for path in ("/v1/users/u1/entities/concept/c-phx", "/v1/users/u1/entities"):
        missing = get(server, path, token=None)
        assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
        outside = get(server, path, token=other)
        stats = get(server, "/v1/users/u1/stats", token=other)
        assert outside.status_code == stats.status_code == 403
        assert (
            outside.json()
            == stats.json()
            == {"error": {"code": "forbidden", "message": "this API key may not act for user 'u1'", "field": "user_id"}}
        )
        # for a user nobody has: the same refusal (nothing said about who exists)
        nobody = get(server, path.replace("/u1/", "/u-nobody/"), token=other)
        assert nobody.status_code == 403 and nobody.json()["error"]["field"] == "user_id"
        scope = get(server, path, token=writer)
        assert scope.status_code == 403 and "'retrieve' scope" in scope.json()["error"]["message"]


def test_one_entity_reads_as_ingested_with_relations_and_its_writer(server):
    r = get(server, "/v1/users/u1/entities/concept/c-phx")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["record"]["name"] == "Project Phoenix" and body["record"]["user_id"] == "u1"
    assert body["written_by"] == key_id(server.headers["authorization"].split()[1])
    assert body["written_at"] is not None and body["version"] == 1
    assert body["mentioned_by"] >= 1 and body["relation_count"] == len(body["relations"])
    assert all(not rel["id"].startswith("x") for rel in body["relations"]), "another user's entity leaked"
    assert {rel["direction"] for rel in body["relations"]} <= {"in", "out"}
    assert r.content == get(server, "/v1/users/u1/entities/concept/c-phx").content  # byte-identical
    limited = get(server, "/v1/users/u1/entities/concept/c-phx", relation_limit=1).json()
    assert len(limited["relations"]) == 1 and limited["relation_count"] == body["relation_count"]


def test_another_users_entity_is_a_404_that_reads_as_an_absent_one(server):
    reader = make_key(server, "ent-u1-reader", ["retrieve"], ["u1"])
    theirs = get(server, "/v1/users/u1/entities/concept/xc-phx", token=reader)  # u2 holds xc-phx
    absent = get(server, "/v1/users/u1/entities/concept/xc-pho", token=reader)
    wrong_kind = get(server, "/v1/users/u1/entities/memory_unit/c-phx", token=reader)
    assert theirs.status_code == absent.status_code == wrong_kind.status_code == 404
    assert theirs.text.replace("xc-phx", "ID") == absent.text.replace("xc-pho", "ID")
    assert theirs.json()["error"]["code"] == "not_found" and theirs.json()["error"]["field"] == "entity_id"
    assert "xc-phx" not in get(server, "/v1/users/u1/entities", token=reader, include_invalidated="true").text


BAD = [
    # (path, params, status, field)
    ("/v1/users/u1/entities/robot/c-phx", {}, 422, "kind"),
    ("/v1/users/u1/entities/concept/bad%20id", {}, 422, "entity_id"),
    ("/v1/users/u1/entities/concept/c-phx", {"relation_limit": 0}, 422, "relation_limit"),
    ("/v1/users/u1/entities", {"kind": "robot"}, 422, "kind"),
    ("/v1/users/u1/entities", {"limit": 0}, 422, "limit"),
    ("/v1/users/u1/entities", {"limit": 501}, 422, "limit"),
    ("/v1/users/u1/entities", {"limit": "many"}, 422, "limit"),
    ("/v1/users/u1/entities", {"cursor": "not-a-cursor"}, 422, "cursor"),
    ("/v1/users/u1/entities", {"cursor": "eyJhZnRlciI6IDF9"}, 422, "cursor"),  # {"after": 1}
    ("/v1/users/u1/entities", {"created_after": "yesterday"}, 422, "created_after"),
    ("/v1/users/u1/entities", {"created_after": "2025-02-01", "created_before": "2025-01-01"}, 422, "created_before"),
    ("/v1/users/u1/entities", {"valid_at": "2025-13-01T00:00:00Z"}, 422, "valid_at"),
    (
        "/v1/users/u1/entities",
        {"valid_at": "2025-01-01T00:00:00Z", "include_invalidated": "true"},
        422,
        "include_invalidated",
    ),
    ("/v1/users/u1/entities", {"include_invalidated": "perhaps"}, 422, "include_invalidated"),
    ("/v1/users/u1/entities", {"prefix": ""}, 422, "prefix"),
    ("/v1/users/bad%20user/entities", {}, 422, "user_id"),
]


@pytest.mark.parametrize(("path", "params", "status", "field"), BAD, ids=[f"{b[0][-20:]}-{b[3]}" for b in BAD])
def test_bad_input_is_a_4xx_naming_the_field(server, path, params, status, field):
    r = get(server, path, **params)
    assert r.status_code == status, r.text
    assert r.json()["error"]["field"] == field


def test_a_cursor_made_for_other_filters_is_refused(server):
    page = get(server, "/v1/users/u1/entities", limit=2).json()
    assert page["next_cursor"] is not None
    r = get(server, "/v1/users/u1/entities", limit=2, kind="concept", cursor=page["next_cursor"])
    assert r.status_code == 422 and r.json()["error"]["field"] == "cursor"


def test_pages_concatenated_are_every_entity_once_in_order_while_writes_happen(server):
    before = [f"p-{i:03d}" for i in range(0, 60, 2)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 7, **({"cursor": cursor} if cursor else {})}
        page = get(server, f"/v1/users/{PAGED}/entities", **params).json()
        seen += [e["id"] for e in page["entities"]]
        pages += 1
        if pages == 2:  # between pages: ids behind the cursor, ahead of it, and one of those still ahead deleted
            new = [mu(PAGED, "p-001", "behind"), mu(PAGED, "p-041", "ahead"), mu(PAGED, "p-999", "last")]
            r = httpx.post(f"{server.base_url}/v1/ingest", json={"records": new}, headers=server.headers, timeout=60)
            assert r.status_code == 200, r.text
            gone = httpx.delete(
                f"{server.base_url}/v1/users/{PAGED}/entities/memory_unit/p-050", headers=server.headers, timeout=60
            )
            assert gone.status_code == 200 and gone.json()["deleted"] == 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(set(seen)), "out of order or twice"
    assert set(before) - {"p-050"} <= set(seen) and "p-050" not in seen
    assert {"p-041", "p-999"} <= set(seen) and "p-001" not in seen  # behind the cursor: next walk
    assert pages == -(-len(seen) // 7)


def test_filters_over_http(server):
    concepts = get(server, "/v1/users/u1/entities", kind="concept").json()
    assert [e["kind"] for e in concepts["entities"]] == ["concept"] * len(concepts["entities"])
    assert concepts["next_cursor"] is None and concepts["entities"]
    phoenix = get(server, "/v1/users/u1/entities", prefix="PROJECT p").json()["entities"]
    assert [e["id"] for e in phoenix] == ["c-phx"]
    notes = get(server, f"/v1/users/{PAGED}/entities", created_after="2025-06-01T10:00:00Z", limit=500).json()
    assert len(notes["entities"]) > 20  # the helper's memory units are created then


def test_the_python_client_reads_and_walks_pages(server):
    token = server.headers["authorization"].split()[1]
    with HRTClient(server.base_url, token) as client:
        view = client.get_entity("u1", "concept", "c-phx")
        assert view.record["name"] == "Project Phoenix" and view.written_by == key_id(token)
        with pytest.raises(NotFound):
            client.get_entity("u1", "concept", "xc-phx")
        walked = [e.id for e in client.list_entities(PAGED, "memory_unit", limit=4)]
        assert walked == sorted(walked) and len(walked) == len(set(walked)) > 8
        assert [e.id for e in client.list_entities("u1", prefix="project p")] == ["c-phx"]
        with pytest.raises(InvalidInput) as bad:
            list(client.list_entities("u1", limit=0))
        assert bad.value.field == "limit"
        with pytest.raises(TypeError):
            list(client.list_entities("u1", colour="blue"))

    async def walk() -> list[str]:
        async with AsyncHRTClient(server.base_url, token) as aclient:
            assert (await aclient.get_entity("u1", "concept", "c-phx")).id == "c-phx"
            return [e.id async for e in aclient.list_entities(PAGED, limit=5)]

    assert asyncio.run(walk()) == walked
