"""What one tenant's work and refusals may take from the others (#45): its writes are held to a
share of time while another tenant is active (HRT_TENANT_WRITE_MS_PER_S), and a tenant that
retries before its Retry-After gets its next refusals held (HRT_REFUSAL_HOLD_MAX_S). The clocks
are the tests' own; the one wait measured over HTTP is a lower bound, never an upper one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import httpx
import pytest

from hrt.api import create_app
from hrt.auth import new_key
from hrt.config import Settings
from hrt.errors import RateLimited
from hrt.shares import Activity, Tarpit, WriteTime
from tests.helpers import bearer, mu


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def refuse(seconds: float) -> RateLimited:
    return RateLimited(f"owes {seconds:g}", retry_after_s=int(seconds) + 1, reason="write_time")


# --- who is active ------------------------------------------------------------------------------


def test_activity_knows_whether_another_tenant_came_within_its_window() -> None:
    clock = Clock()
    seen = Activity(10.0, clock)
    assert not seen.others("a")
    seen.note("a")
    assert not seen.others("a") and seen.others("b")
    for _ in range(3):  # a's own requests never make a's share apply
        seen.note("a")
    assert not seen.others("a")
    seen.note("b")
    clock.now += 5
    seen.note("a")
    assert seen.others("a") and seen.others("b")  # b five seconds ago; a just now
    clock.now += 6
    seen.note("a")
    assert not seen.others("a"), "b last came 11 s ago, past the window"
    seen.note("c")
    seen.note("a")
    assert seen.others("a") and seen.others("c")


# --- write time ---------------------------------------------------------------------------------


def test_write_time_is_charged_and_refused_only_while_another_tenant_is_active() -> None:
    clock = Clock()
    seen = Activity(10.0, clock)
    share = WriteTime(100, 400, seen, clock)  # 100 ms a second, a burst of 400 ms
    clock.now += 5
    share.charge("a", clock.now - 5)  # alone on the server: free
    share.check("a", refuse)
    seen.note("b")
    share.check("a", refuse)  # nothing owed yet
    clock.now += 1
    share.charge("a", clock.now - 1)  # 1,000 ms against a burst of 400: owes 600 ms, 6 s of its rate
    with pytest.raises(RateLimited) as owed:
        share.check("a", refuse)
    assert owed.value.reason == "write_time" and owed.value.retry_after_s == 7, owed.value.message
    share.check("b", refuse)  # the other tenant is not held
    clock.now += 6.5
    seen.note("b")
    share.check("a", refuse)  # paid back
    unbounded = WriteTime(0, 0, seen, clock)
    unbounded.charge("a", clock.now - 100)
    unbounded.check("a", refuse)  # 0: no bound


async def test_a_tenant_past_its_write_time_gets_429_while_another_is_active(loaded_service, settings):
    """Over HTTP: the Guard notes each request's tenant; a tenant that used its share of write time
    while another tenant made requests is refused with 429 write_time and a Retry-After before its
    write takes a slot; the other tenant writes on; alone, the same tenant writes freely."""
    now = time.time()
    heavy, heavy_rec = new_key("u1-writer", ["ingest", "retrieve"], ["u1"], now=now)
    light, light_rec = new_key("u2-writer", ["ingest", "retrieve"], ["u2"], now=now)
    for record in (heavy_rec, light_rec):
        await loaded_service.records.create_key(record)
    clock = Clock()
    loaded_service.write_time = WriteTime(100, 400, Activity(10.0, clock), clock)
    real_slot = loaded_service.ingest_slot

    @contextlib.contextmanager
    def slow_slot(tenant: str | None = None) -> Iterator[None]:
        with real_slot(tenant):
            clock.now += 1.0  # each write holds its slot for a second of the test's clock
            yield

    loaded_service.ingest_slot = slow_slot  # type: ignore[method-assign]
    app = create_app(settings, service=loaded_service)

    def write(user: str, n: int) -> dict[str, object]:
        return {"records": [mu(user, f"m-share-{user}-{n}", f"a note {n}")]}

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
        alone = [(await c.post("/v1/ingest", json=write("u1", n), headers=bearer(heavy))).status_code for n in range(3)]
        assert alone == [200, 200, 200], "a tenant alone on the server is not held"
        assert (
            await c.post("/v1/retrieve", json={"user_id": "u2", "key_phrases": ["x"]}, headers=bearer(light))
        ).status_code == 200
        first = await c.post("/v1/ingest", json=write("u1", 3), headers=bearer(heavy))
        refused = await c.post("/v1/ingest", json=write("u1", 4), headers=bearer(heavy))
        other = await c.post("/v1/ingest", json=write("u2", 5), headers=bearer(light))
    assert first.status_code == 200, first.text
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and "HRT_TENANT_WRITE_MS_PER_S" in error["message"], error
    assert int(refused.headers["retry-after"]) >= 2  # it owes at least 200 ms at 100 ms a second
    assert other.status_code == 200, other.text
    for muid, kept in (("m-share-u1-3", True), ("m-share-u1-4", False), ("m-share-u2-5", True)):
        user = muid.split("-")[2]
        found = await loaded_service.records.entity_detail(user, "memory_unit", muid, relation_limit=1)
        assert (found is not None) == kept, muid  # the refused write wrote nothing


# --- refusals held ------------------------------------------------------------------------------


def test_a_refusal_is_held_only_for_a_tenant_that_came_back_before_its_retry_after() -> None:
    clock = Clock()
    pit = Tarpit(1.0, clock, max_held=2)
    assert pit.hold("a", 1.0) == 0.0  # the first refusal: answered at once, retry in 1 s
    clock.now += 0.25
    assert pit.hold("a", 1.0) == pytest.approx(0.75)  # came back early: held until its time
    assert pit.hold("b", 1.0) == 0.0, "another tenant's refusals are its own"
    assert pit.hold("a", 5.0) == pytest.approx(1.0)  # never past HRT_REFUSAL_HOLD_MAX_S
    assert pit.hold("a", 1.0) is None, "past max_held: at once, the connection closed"
    pit.release("a")
    pit.release("a")
    clock.now += 20  # a client that waits as told is never held
    assert pit.hold("a", 1.0) == 0.0
    assert Tarpit(0.0, clock).hold("a", 1.0) == 0.0 and Tarpit(0.0, clock).hold("a", 1.0) == 0.0


async def test_a_key_retrying_at_once_gets_its_next_refusal_held_until_its_retry_after(loaded_service, settings):
    """A key over its rate that retries at once: its first 429 comes at once with a Retry-After,
    the next one not before about that time; with the hold at 0, the held count stays 0."""
    now = time.time()
    token, record = new_key("u1-burst", ["retrieve"], ["u1"], now=now, rate_limit=0.5)
    await loaded_service.records.create_key(record)
    ask = {"user_id": "u1", "key_phrases": ["alpha"]}
    for hold in (1.0, 0.0):
        app = create_app(settings.model_copy(update={"refusal_hold_max_s": hold}), service=loaded_service)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://hrt") as c:
            statuses, waits = [], []
            for _ in range(3):  # a burst of one (2 s at 0.5 a second), then refusals
                started = time.monotonic()
                r = await c.post("/v1/retrieve", json=ask, headers=bearer(token))
                statuses.append(r.status_code)
                waits.append(time.monotonic() - started)
        assert statuses == [200, 429, 429], statuses
        if hold:
            assert waits[2] >= 0.5, waits  # held (a lower bound: a loaded machine only adds)
        assert app.state.hrt.tarpit._total == 0, "every held place was given back"


def test_settings_bound_the_new_shares() -> None:
    with pytest.raises(ValueError):
        Settings(tenant_write_ms_per_s=-1)
    with pytest.raises(ValueError):
        Settings(refusal_hold_max_s=61)


def test_hrt_serve_sets_the_interpreters_switch_interval(monkeypatch, tmp_path) -> None:
    """HRT_SWITCH_INTERVAL_MS: what `hrt serve` gives sys.setswitchinterval before it serves."""
    import sys

    import uvicorn

    from hrt import cli

    seen: list[float] = []
    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: seen.append(sys.getswitchinterval()))
    monkeypatch.setattr(cli, "configure_server_logging", lambda settings: None)  # the process's loggers: not here
    monkeypatch.setenv("HRT_SWITCH_INTERVAL_MS", "2.5")
    monkeypatch.setenv("HRT_AUTH", "off")
    monkeypatch.setenv("HRT_DB_PATH", str(tmp_path / "hrt.db"))
    before = sys.getswitchinterval()
    try:
        assert cli.main(["serve", "--host", "127.0.0.1", "--port", "0"]) == 0
    finally:
        sys.setswitchinterval(before)
    assert seen == [pytest.approx(0.0025)]
    assert Settings().switch_interval_ms == 2.5 and Settings.model_fields["switch_interval_ms"].default == 1.0
