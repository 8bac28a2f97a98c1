"""Fair shares of what the server holds for writers (#45, H1, H2, M3): a tenant is the users a key
acts for, child keys included, and holds at most half of the write slots and ingest body places;
a conversation call takes its user's lock before a write slot; the LLM extractor's time per call is
bounded and its invalid answers count against it; planning never runs on the event loop; export
slots per tenant, and an export nobody reads cut after HRT_EXPORT_IDLE_S.
Concurrency is checked by events and ordering, never by timing."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import httpx
import numpy as np
import pytest

from hrt.api import create_app
from hrt.api.bodies import IngestBodies
from hrt.auth import KeyRing, new_key
from hrt.config import Settings
from hrt.errors import RateLimited
from hrt.export import ExportSlots
from hrt.extraction.conversation import LLMOutcome
from hrt.extraction.messages import ConversationRequest
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from tests.helpers import HashingEmbedder, asgi_get, bearer, jsonl, mu

BLOCK = "gatekeeper"


class GatedEmbedder(HashingEmbedder):
    """Embeds at once, but for texts naming :data:`BLOCK`: those wait for ``gate`` (in the write's
    worker thread), saying so by ``entered``. The embedder is not what these tests are about."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if any(BLOCK in t for t in texts):
            self.entered.set()
            self.gate.wait(30)
        return super().embed(texts)


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[HRTService]:
    svc = HRTService(Settings(db_path=tmp_path / "hrt.db", max_concurrent_ingests=2), embedder=GatedEmbedder())
    yield svc
    assert isinstance(svc.embedder, GatedEmbedder)
    svc.embedder.gate.set()
    await svc.close()


def said(user: str, *texts: str) -> ConversationRequest:
    return ConversationRequest.model_validate(
        {"user_id": user, "session_id": "s1", "messages": [{"role": "user", "content": t} for t in texts]}
    )


async def until(condition: object, rounds: int = 100) -> None:
    """Let the loop run until ``condition()`` holds (ordering, not time)."""
    for _ in range(rounds):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


# --- M3: a tenant is the users of its key's line; a child key adds no share -----------------------


async def test_a_child_key_draws_on_its_makers_share_of_ingest_bodies(loaded_service, api):
    now = time.time()
    admin, admin_rec = new_key("u1-admin", ["admin", "ingest"], ["u1"], now=now)
    other, other_rec = new_key("u2-writer", ["ingest"], ["u2"], now=now)
    for record in (admin_rec, other_rec):
        await loaded_service.records.create_key(record)
    made = await api.post(
        "/v1/keys", json={"name": "child", "scopes": ["ingest"], "users": ["u1"]}, headers=bearer(admin)
    )
    assert made.status_code == 201, made.text
    ring = KeyRing(loaded_service.records)
    parent, child, stranger = [await ring.authenticate(f"Bearer {t}") for t in (admin, made.json()["key"], other)]
    assert parent.tenant == child.tenant != stranger.tenant

    bodies = IngestBodies(limit=4, retry_after_s=1)  # a tenant's share: 2
    with bodies.place(parent.tenant), bodies.place(parent.tenant):
        with pytest.raises(RateLimited) as refused, bodies.place(child.tenant):  # the child gets none of its own
            pass
        assert refused.value.reason == "ingest_bodies"
        with bodies.place(stranger.tenant), bodies.place(stranger.tenant):  # the others' half is free
            pass
    assert bodies.shares.total == 0


async def test_keys_an_every_user_key_makes_for_different_users_are_different_tenants(loaded_service, api):
    """A platform's admin key (every user) mints one key per customer: each customer is a tenant of
    its own (not one tenant of all the admin's keys), and a key a customer mints shares its share."""
    platform, platform_rec = new_key("platform", ["admin", "ingest"], None, now=time.time())
    await loaded_service.records.create_key(platform_rec)

    async def make(token: str, name: str, users: list[str]) -> str:
        made = await api.post(
            "/v1/keys", json={"name": name, "scopes": ["admin", "ingest"], "users": users}, headers=bearer(token)
        )
        assert made.status_code == 201, made.text
        return str(made.json()["key"])

    first = await make(platform, "customer-1", ["u1"])
    second = await make(platform, "customer-2", ["u2"])
    first_child = await make(first, "customer-1-agent", ["u1"])
    ring = KeyRing(loaded_service.records)
    admin, one, two, one_child = [
        await ring.authenticate(f"Bearer {t}") for t in (platform, first, second, first_child)
    ]
    assert len({admin.tenant, one.tenant, two.tenant}) == 3
    assert one_child.tenant == one.tenant
    bodies = IngestBodies(limit=4, retry_after_s=1)
    # the first customer's share is taken (by its key and its agent's); the other keeps its half
    with bodies.place(one.tenant), bodies.place(one_child.tenant), bodies.place(two.tenant), bodies.place(two.tenant):
        pass
    assert bodies.shares.total == 0


async def test_a_tenant_past_its_body_bytes_a_second_is_refused_unread_and_the_others_are_not(loaded_service, settings):
    """HRT_TENANT_BODY_BYTES_PER_S: every body chunk a tenant sends is charged (any route, any
    answer, junk refused by validation included); past its burst (twice the ingest body bound) its
    next request is 429 body_rate, with a Retry-After covering the debt and the connection closed,
    before its body is read; a child key shares its maker's bytes; another tenant is not slowed;
    0 turns the bound off."""
    now = time.time()
    admin, admin_rec = new_key("u1-admin", ["admin", "retrieve"], ["u1"], now=now)
    other, other_rec = new_key("u2-reader", ["retrieve"], ["u2"], now=now)
    for record in (admin_rec, other_rec):
        await loaded_service.records.create_key(record)
    per_s, body_max = 1_000, 4_096  # a burst of 8,192 bytes, refilled at 1,000 a second
    update = {"tenant_body_bytes_per_s": per_s, "max_ingest_body_bytes": body_max}
    junk = {"user_id": "u1", "key_phrases": ["phoenix " * 375]}  # ~3 KB, refused by validation (422)

    async def flood(app_settings: Settings) -> tuple[list[int], list[object], str, int]:
        app = create_app(app_settings, service=loaded_service)
        statuses: list[int] = []
        refusals: list[object] = []
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
            made = await c.post(
                "/v1/keys",
                json={"name": f"child-{app_settings.tenant_body_bytes_per_s}", "scopes": ["retrieve"], "users": ["u1"]},
                headers=bearer(admin),
            )
            assert made.status_code == 201, made.text
            for token in (admin, made.json()["key"], admin, made.json()["key"]):
                r = await c.post("/v1/retrieve", json=junk, headers=bearer(token))
                statuses.append(r.status_code)
                if r.status_code == 429:
                    refusals.append((r.json()["error"], r.headers["retry-after"], r.headers.get("connection")))
            free = await c.post("/v1/retrieve", json={**junk, "user_id": "u2"}, headers=bearer(other))
        return statuses, refusals, free.text, free.status_code

    statuses, refusals, free_text, free_status = await flood(settings.model_copy(update=update))
    assert statuses[:3] == [422, 422, 422] and statuses[3] == 429, statuses  # ~9 KB sent: past 8,192
    error, retry_after, connection = refusals[0]  # type: ignore[misc]
    assert error["code"] == "rate_limited" and "HRT_TENANT_BODY_BYTES_PER_S" in error["message"], error
    assert "phoenix" not in str(error)
    assert int(retry_after) >= 1 and connection == "close"
    assert free_status == 422, free_text  # the other tenant's body is read and answered
    unbounded, _, _, _ = await flood(settings.model_copy(update={**update, "tenant_body_bytes_per_s": 0}))
    assert unbounded == [422] * 4, unbounded


# --- H1: write slots per tenant; the user's lock before a slot ------------------------------------


async def test_a_tenant_holds_at_most_half_of_the_write_slots(loaded_service):
    records = parse_jsonl(jsonl([mu("u2", "m-fair", "a fair share")]))
    gate = asyncio.Event()

    async def hold() -> None:
        with loaded_service.ingest_slot("tenant-a"):
            await gate.wait()

    holder = asyncio.ensure_future(hold())
    await until(lambda: loaded_service.write_slots.held("tenant-a") == 1)
    with pytest.raises(RateLimited) as refused:
        await loaded_service.ingest(records, tenant="tenant-a")
    assert refused.value.reason == "ingest_concurrency" and "tenant" in refused.value.message
    assert (await loaded_service.ingest(records, tenant="tenant-b")).upserted == 1
    gate.set()
    await holder


async def test_a_second_call_for_a_busy_user_waits_for_its_lock_holding_no_slot(gated):
    """One heavy call and one trivial call for the same user used to take both slots (the second
    waited for the user's lock inside its slot): every other write was refused meanwhile."""
    embedder = gated.embedder
    assert isinstance(embedder, GatedEmbedder)
    first = asyncio.ensure_future(gated.add_messages(said("u1", f"The {BLOCK} holds this write.")))
    await asyncio.to_thread(embedder.entered.wait, 30)
    second = asyncio.ensure_future(gated.add_messages(said("u1", "A trivial second message.")))
    await until(lambda: gated._conversation_locks["u1"].locked() and gated.write_slots.total == 1, rounds=20)
    # another writer gets the second slot while the same user's second call waits
    other = parse_jsonl(jsonl([mu("u2", "m-other", "another tenant writes")]))
    assert (await gated.ingest(other)).upserted == 1
    assert not second.done()
    embedder.gate.set()
    done = await asyncio.gather(first, second)
    assert [len(r.messages) for r in done] == [1, 1] and gated.write_slots.total == 0


async def test_a_wait_for_a_busy_user_is_bounded(tmp_path):
    svc = HRTService(Settings(db_path=tmp_path / "hrt.db", user_write_wait_s=0.0), embedder=HashingEmbedder())
    try:
        async with svc.user_write("u1"):
            with pytest.raises(RateLimited) as refused:
                await svc.add_messages(said("u1", "waits for nothing"))
        assert refused.value.retry_after_s == svc.settings.ingest_retry_after_s
        assert svc.write_slots.total == 0
    finally:
        await svc.close()


# --- H1: the LLM extractor's time per call is bounded ---------------------------------------------


async def test_the_llm_time_of_one_call_is_bounded_then_the_rules_alone(tmp_path):
    # 2 s: the first message is asked within it even on a loaded machine (planning comes first)
    svc = HRTService(Settings(db_path=tmp_path / "hrt.db", extractor_call_budget_s=2.0), embedder=HashingEmbedder())
    asked: list[str] = []
    never = asyncio.Event()

    async def stuck(speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
        asked.append(text)
        await never.wait()  # a model that takes forever
        return LLMOutcome()

    svc.llm_extractor = stuck
    try:
        async with asyncio.timeout(20):  # the bound, not a measurement: without it this never ends
            result = await svc.add_messages(said("u1", "First message.", "Second one.", "Third one."))
        assert result.llm_fallbacks == 3 and [m.status for m in result.messages] == ["added"] * 3
        assert asked == ["First message."]  # once the budget is spent, nothing more is asked
    finally:
        await svc.close()


# --- H2: with the LLM extractor on, planning still runs off the event loop -------------------------


async def test_planning_with_the_llm_extractor_reads_the_statistics_off_the_loop(loaded_service, monkeypatch):
    loop_thread = threading.get_ident()
    readers: set[int] = set()
    asked_on: set[int] = set()
    store = loaded_service.records
    real_get, real_scan, real_read = store.state_get, store.state_scan, store.state_read

    async def state_get(*args: object) -> dict[str, str]:
        readers.add(threading.get_ident())
        return await real_get(*args)  # type: ignore[arg-type]

    async def state_scan(*args: object) -> dict[str, str]:
        readers.add(threading.get_ident())
        return await real_scan(*args)  # type: ignore[arg-type]

    async def state_read(*args: object) -> dict[str, dict[str, str]]:
        readers.add(threading.get_ident())
        return await real_read(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "state_get", state_get)
    monkeypatch.setattr(store, "state_scan", state_scan)
    monkeypatch.setattr(store, "state_read", state_read)

    async def llm(speaker: str, text: str, context: Sequence[str]) -> LLMOutcome | None:
        asked_on.add(threading.get_ident())  # the extractor's client belongs to the server's loop
        return LLMOutcome(entities=[("Clayworks", "place")])

    loaded_service.llm_extractor = llm
    result = await loaded_service.add_messages(said("u1", "I booked pottery at Clayworks."))
    assert result.extractor == "rules+llm" and result.llm_fallbacks == 0
    assert readers and loop_thread not in readers
    assert asked_on == {loop_thread}


# --- M1: export slots per tenant; a stream nobody reads is cut --------------------------------------


def test_a_tenant_holds_at_most_one_of_the_two_export_slots():
    slots = ExportSlots()
    with slots.slot("tenant-a"):
        with pytest.raises(RateLimited) as refused, slots.slot("tenant-a"):
            pass
        assert refused.value.reason == "export_concurrency" and "tenant" in refused.value.message
        with slots.slot("tenant-b"):
            assert slots.running == 2
    assert slots.running == 0


async def test_an_export_nobody_reads_is_cut_and_gives_back_its_slot(loaded_service, settings):
    token, record = new_key("u1-export", ["export"], ["u1"])
    await loaded_service.records.create_key(record)
    app = create_app(settings.model_copy(update={"export_idle_s": 0.05}), service=loaded_service)
    state = app.state.hrt
    started = asyncio.Event()
    stalled = asyncio.Event()  # never set: the client's buffers are full, forever
    scope = asgi_get("/v1/users/u1/export", token)

    async def receive() -> dict[str, object]:
        await stalled.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        if message["type"] == "http.response.start":
            assert message["status"] == 200
            started.set()
        elif message.get("body"):
            assert state.export_slots.running == 1  # held while the first chunk waits
            await stalled.wait()

    async with asyncio.timeout(20):  # the bound of the test, not a measurement
        await app(scope, receive, send)
    assert started.is_set() and state.export_slots.running == 0
    # and the slot is there for the next export
    with state.export_slots.slot("another"):
        pass
