"""Reading a user in bulk (#45, M2, M4): browse pages bounded in bytes as well as count and made off
the event loop; whole records in bulk only for a key with the read (or export) scope, a retrieve
key getting ids and titles."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from hrt.api import create_app
from hrt.auth import KeyRing, new_key
from hrt.ingest import parse_jsonl
from tests.helpers import bearer, jsonl, mu

BIG = 20_000  # characters of content per memory unit below


@pytest.fixture
async def keys(loaded_service) -> dict[str, str]:
    made = {}
    for name, scopes in [
        ("agent", ["retrieve"]),
        ("reader", ["retrieve", "read"]),
        ("exporter", ["retrieve", "export"]),
    ]:
        token, record = new_key(name, scopes, ["u1"])
        await loaded_service.records.create_key(record)
        made[name] = token
    return made


async def test_a_retrieve_key_browses_ids_and_titles_not_whole_records(api, keys):
    agent = await api.get("/v1/users/u1/entities", params={"limit": 500}, headers=bearer(keys["agent"]))
    assert agent.status_code == 200, agent.text
    page = agent.json()
    assert page["entities"] and page["records_omitted"] is True
    assert all(e["record"] is None and e["id"] and e["title"] for e in page["entities"])
    assert "read or export scope" in agent.headers["warning"]  # the changed default, said on each page
    for name in ("reader", "exporter"):
        full = await api.get("/v1/users/u1/entities", params={"limit": 500}, headers=bearer(keys[name]))
        body = full.json()
        assert body["records_omitted"] is False and "warning" not in full.headers
        assert [e["id"] for e in body["entities"]] == [e["id"] for e in page["entities"]]
        assert all(e["record"]["user_id"] == "u1" for e in body["entities"])


async def test_a_page_is_bounded_in_bytes_and_the_walk_still_sees_everything(loaded_service, settings, keys):
    await loaded_service.ingest(
        parse_jsonl(jsonl([mu("u1", f"big-{i:02d}", "word " * (BIG // 5), title=f"Big {i}") for i in range(12)]))
    )
    bound = 65_536
    app = create_app(settings.model_copy(update={"browse_max_page_bytes": bound}), service=loaded_service)
    seen: list[str] = []
    cursor = None
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        while True:
            params: dict[str, str | int] = {"limit": 500, "include_invalidated": "true"}
            if cursor:
                params["cursor"] = cursor
            r = await c.get("/v1/users/u1/entities", params=params, headers=bearer(keys["reader"]))
            assert r.status_code == 200, r.text
            assert len(r.content) <= bound + BIG + 4096  # the bound, plus at most the entity that crossed it
            seen += [e["id"] for e in r.json()["entities"]]
            cursor = r.json()["next_cursor"]
            if cursor is None:
                break
    expected = sorted((await loaded_service.records.ids("u1")).keys())
    assert seen == expected  # every entity once, in order, over several pages
    assert len(seen) > 12


async def test_a_page_is_read_and_built_off_the_event_loop(api, keys, loaded_service, monkeypatch):
    loop_thread = threading.get_ident()
    readers: set[int] = set()
    store = loaded_service.records
    real = store.browse

    async def browse(*args: object) -> object:
        readers.add(threading.get_ident())
        return await real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "browse", browse)
    r = await api.get("/v1/users/u1/entities", headers=bearer(keys["reader"]))
    assert r.status_code == 200 and json.loads(r.content)["entities"]
    assert readers and loop_thread not in readers


async def test_one_tenant_builds_at_most_its_share_of_browse_pages_at_once(loaded_service, settings, keys):
    """Pages are read and built off the loop, but each holds CPU and a page of memory: with 2 pages
    at once, one tenant gets 1 and a second is a 429; another tenant's page is built meanwhile."""
    other, other_rec = new_key("other", ["retrieve", "read"], ["u2"])
    await loaded_service.records.create_key(other_rec)
    app = create_app(settings.model_copy(update={"max_concurrent_browse_pages": 2}), service=loaded_service)
    tenant = (await KeyRing(loaded_service.records).authenticate(f"Bearer {keys['reader']}")).tenant
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        first = await c.get("/v1/users/u1/entities", headers=bearer(keys["reader"]))
        assert first.status_code == 200, first.text
        with app.state.hrt.browse_page(tenant):  # the tenant's one page is being built
            busy = await c.get("/v1/users/u1/entities", headers=bearer(keys["agent"]))
            free = await c.get("/v1/users/u2/entities", headers=bearer(other))
    assert busy.status_code == 429 and "browse pages" in busy.json()["error"]["message"], busy.text
    assert "retry-after" in busy.headers
    assert free.status_code == 200, free.text
    assert app.state.hrt.browse_pages.total == 0


async def test_one_tenant_past_its_bytes_a_second_waits_and_the_others_do_not(loaded_service, settings, keys):
    """HRT_BROWSE_TENANT_BYTES_PER_S: a tenant's pages are charged once built, by their size or the
    records read to make them, whichever is more; past its burst (two pages) it is refused with
    429 browse_rate and a Retry-After, before anything is read; another tenant browses meanwhile;
    0 turns the bound off."""
    await loaded_service.ingest(
        parse_jsonl(jsonl([mu("u1", f"big-{i:02d}", "word " * (BIG // 5), title=f"Big {i}") for i in range(12)]))
    )
    other, other_rec = new_key("other", ["retrieve", "read"], ["u2"])
    await loaded_service.records.create_key(other_rec)
    page_bytes, per_s = 65_536, 70_000  # a burst of 131,072 bytes: about two full pages
    update = {"browse_max_page_bytes": page_bytes, "browse_tenant_bytes_per_s": per_s}
    app = create_app(settings.model_copy(update=update), service=loaded_service)
    params = {"limit": 500, "include_invalidated": "true"}
    statuses, sizes = [], []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        for _ in range(4):
            r = await c.get("/v1/users/u1/entities", params=params, headers=bearer(keys["reader"]))
            statuses.append(r.status_code)
            sizes.append(len(r.content))
            if r.status_code == 429:
                refused = r
                break
        free = await c.get("/v1/users/u2/entities", params=params, headers=bearer(other))
    assert statuses[-1] == 429 and statuses[:-1] == [200] * (len(statuses) - 1), statuses
    assert refused.json()["error"]["code"] == "rate_limited" and "BYTES_PER_S" in refused.json()["error"]["message"]
    read = 13 * BIG  # the 12 big units (and a little more) were read for the first page
    assert int(refused.headers["retry-after"]) >= (read - 2 * page_bytes) / per_s
    assert free.status_code == 200, free.text
    unbounded = create_app(
        settings.model_copy(update={**update, "browse_tenant_bytes_per_s": 0}), service=loaded_service
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=unbounded), base_url="http://hrt") as c:
        for _ in range(4):
            r = await c.get("/v1/users/u1/entities", params=params, headers=bearer(keys["reader"]))
            assert r.status_code == 200, r.text


def test_a_tenants_bytes_refill_at_the_rate_and_idle_tenants_are_forgotten() -> None:
    from hrt.errors import RateLimited
    from hrt.shares import ByteRates

    now = [0.0]
    rates = ByteRates(100, 200, lambda: now[0])

    def refuse(seconds: float) -> RateLimited:
        return RateLimited(f"{seconds:.1f}", retry_after_s=int(seconds) + 1, reason="browse_rate")

    rates.check("a", refuse)
    rates.charge("a", 350)  # 200 - 350: owes 150 bytes, 1.5 s at 100 a second
    with pytest.raises(RateLimited, match=r"1\.5"):
        rates.check("a", refuse)
    rates.check("b", refuse)  # another tenant is not slowed
    now[0] = 1.6
    rates.check("a", refuse)  # paid
    rates.charge("b", 10)
    now[0] = 100.0
    rates.charge("b", 10)  # "a" is full again: its bucket is forgotten
    assert set(rates._buckets) == {"b"}


async def test_pages_of_ids_and_titles_are_charged_the_records_they_read(loaded_service, settings, keys):
    """A retrieve key's page holds ids and titles, but the store reads whole records to make it: a
    page over large records is charged what it read, so the key cannot read the user whole over
    and over at the price of its titles."""
    await loaded_service.ingest(
        parse_jsonl(jsonl([mu("u1", f"big-{i:02d}", "word " * (BIG // 5), title=f"Big {i}") for i in range(12)]))
    )
    per_s = 100_000  # a burst of two 64 KiB pages (131,072): each page reads 12 x 20,000 bytes
    update = {"browse_max_page_bytes": 65_536, "browse_tenant_bytes_per_s": per_s}
    app = create_app(settings.model_copy(update=update), service=loaded_service)
    statuses, sizes = [], []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        for _ in range(2):
            r = await c.get("/v1/users/u1/entities", params={"limit": 500}, headers=bearer(keys["agent"]))
            statuses.append(r.status_code)
            sizes.append(len(r.content))
    assert statuses == [200, 429], statuses
    assert sizes[0] < 20_000, "the page itself is small: ids and titles"
