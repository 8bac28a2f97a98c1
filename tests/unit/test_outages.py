"""Store outages without servers (issue #50): the per-store circuit, the guarded ports and their
fallbacks to the record store, /readyz bounded, the 503's Retry-After and its one log line, and
``hrt dev up`` bringing a stopped server back on its old ports. Fakes stand in for the stores
here only; tests/integration/test_faults.py drives real processes."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from hrt import devstack
from hrt.errors import StoreDown, StoreUnavailable
from hrt.metrics import Metrics
from hrt.records import Concept, EdgeType, Kind, MemoryUnit, Relation
from hrt.stores.base import EntityRow, ExpansionCaps, SearchFilter
from hrt.stores.circuit import StoreCircuit
from hrt.stores.fallback import RecordGraph, RecordVectors, collecting
from hrt.stores.guarded import GuardedGraphStore, GuardedVectorIndex

DIM = 4


class Switch:
    """A store's reachability: up, refusing (connection refused), or hanging (a killed host)."""

    def __init__(self) -> None:
        self.mode = "up"
        self.calls = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.mode == "refusing":
            raise StoreUnavailable("connection refused at 127.0.0.1:1", store="Fake")
        if self.mode == "hanging":
            await asyncio.sleep(60)


def circuit(switch: Switch, **kw: Any) -> StoreCircuit:
    return StoreCircuit("Fake", switch, probe_every_s=0.05, probe_timeout_s=0.05, suspect_after_s=0.05, **kw)


async def test_the_first_refusal_opens_the_circuit_then_calls_fail_at_once_until_a_probe_closes_it(caplog) -> None:
    caplog.set_level(logging.INFO, logger="hrt.stores.circuit")
    switch, metrics = Switch(), Metrics()
    c = circuit(switch, metrics=metrics)
    closed: list[bool] = []
    c.on_close.append(lambda: closed.append(True))
    switch.mode = "refusing"
    with pytest.raises(StoreUnavailable):
        await c.call(switch)
    assert c.is_open
    before = switch.calls
    started = time.perf_counter()
    for _ in range(100):
        with pytest.raises(StoreDown) as refused:
            await c.call(switch)
    assert (time.perf_counter() - started) / 100 < 0.01  # refused without a call, well under 100 ms
    assert refused.value.store == "Fake" and refused.value.retry_after_s == 1
    assert switch.calls - before <= 3  # only the background probe reached the store
    switch.mode = "up"
    deadline = time.monotonic() + 2
    while c.is_open and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert not c.is_open and closed == [True]
    await c.call(switch)
    lines = [r.getMessage() for r in caplog.records if r.name == "hrt.stores.circuit"]
    assert len(lines) == 2 and "circuit open" in lines[0] and "circuit closed" in lines[1]
    assert all(r.exc_info is None for r in caplog.records)
    await c.close()


async def test_a_call_hanging_on_a_store_that_refuses_its_ping_ends_at_once() -> None:
    """A store killed under load: calls in flight wait on the driver's retries; the suspicion ping
    finds it refusing, the circuit opens and the waiting calls end with StoreDown."""
    switch = Switch()
    c = circuit(switch)

    async def stuck() -> None:
        await asyncio.sleep(30)

    switch.mode = "refusing"  # the ping is refused
    started = time.perf_counter()
    with pytest.raises(StoreDown):
        await c.call(stuck)
    assert time.perf_counter() - started < 1.0
    await c.close()


async def test_a_slow_store_that_answers_its_ping_is_not_cut_off() -> None:
    switch = Switch()
    c = circuit(switch)

    async def slow() -> str:
        await asyncio.sleep(0.3)
        return "done"

    assert await c.call(slow) == "done"
    assert not c.is_open
    await c.close()


# --- the fallbacks -------------------------------------------------------------------------------


def unit(ident: str, text: str, ts: str = "2025-06-01T09:00:00Z", **kw: Any) -> MemoryUnit:
    return MemoryUnit(muid=ident, user_id="u1", title=ident, content=text, creation_ts=ts, **kw)


def vec(*values: float) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    return v / np.linalg.norm(v)


class FakeRecords:
    """The record store's fallback reads over a few records (a naive text match stands in for
    PostgreSQL's full text)."""

    def __init__(self, rows: dict[str, EntityRow], relations: Sequence[Relation] = ()) -> None:
        self.rows = rows
        self.relations = list(relations)

    async def text_candidates(
        self, user_id: str, queries: Sequence[Sequence[str]], limit: int
    ) -> list[list[EntityRow]]:
        out = []
        for words in queries:
            found = [
                r
                for i, r in sorted(self.rows.items())
                if any(w in (getattr(r[0], "content", "") + getattr(r[0], "name", "")).lower() for w in words)
            ]
            out.append(found[:limit])
        return out

    async def entity_rows(self, user_id: str, ids: Sequence[str]) -> dict[str, EntityRow]:
        return {i: self.rows[i] for i in ids if i in self.rows}

    async def relations_of(self, user_id: str, ids: Sequence[str]) -> list[Relation]:
        return [r for r in self.relations if r.source in ids or r.target in ids]


def records() -> FakeRecords:
    rows: dict[str, EntityRow] = {
        "m1": (unit("m1", "Phoenix launch moved to May"), vec(1, 0, 0, 0), 1, None),
        "m2": (unit("m2", "Phoenix budget approved"), vec(0.9, 0.1, 0, 0), 1, None),
        "m3": (unit("m3", "lunch with Sam", tags=["social"]), vec(0, 1, 0, 0), 1, None),
        "m4": (unit("m4", "Phoenix retro", ts="2026-03-01T00:00:00Z"), vec(1, 0, 0.1, 0), 1, None),
        "c1": (Concept(id="c1", user_id="u1", name="Phoenix", type="project"), vec(0.8, 0.2, 0, 0), 1, None),
    }
    relations = [
        Relation(user_id="u1", source=s, target="c1", type=EdgeType.MENTIONS, weight=1.0) for s in ("m1", "m2", "m4")
    ]
    return FakeRecords(rows, relations)


class Down:
    """A port whose every call finds the store unreachable (closing it works)."""

    async def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable("connection refused", store="Fake")

        return refuse


async def test_the_vector_fallback_searches_the_records_text_and_ranks_by_the_stored_vectors() -> None:
    fallback = RecordVectors(records())
    not_after = 1767225600.0  # 2026-01-01: m4 is later
    hits = await fallback.search("u1", ["Phoenix"], vec(1, 0, 0, 0)[None, :], list(Kind), 10, not_after)
    by_id = {h.id: h for h in hits[0]}
    assert sorted(by_id) == ["c1", "m1", "m2"]  # m3 shares no word, m4 is after not_after
    assert by_id["m1"].vector_rank == 1 and by_id["m1"].similarity == pytest.approx(1.0)
    assert [by_id[i].lexical_rank for i in ("c1", "m1", "m2")] == [1, 2, 3]  # the store's own order
    tagged = await fallback.search(
        "u1", ["lunch Phoenix"], vec(0, 1, 0, 0)[None, :], list(Kind), 10, where=SearchFilter(tags=("social",))
    )
    assert {h.id for h in tagged[0]} == {"m3", "c1"}  # memory units need the tag; concepts pass
    again = await fallback.search("u1", ["Phoenix"], vec(1, 0, 0, 0)[None, :], list(Kind), 10, not_after)
    assert again == hits  # deterministic


async def test_the_graph_fallback_returns_the_seeds_alone_and_neighbours_in_the_graphs_order() -> None:
    fallback = RecordGraph(records())
    caps = ExpansionCaps(depth=2, fanout_per_node=10, max_per_kind=10, hop_decay=0.5)
    found = await fallback.expand("u1", {"m1": 0.9, "c1": 0.5}, caps)
    assert [(c.node.id, c.hops, c.path_score) for c in found] == [("c1", 0, 0.5), ("m1", 0, 0.9)]
    assert found[1].mentions == ("c1",)
    neighbours = await fallback.neighbors("u1", ["c1"], EdgeType.MENTIONS, False, 2, not_after=1767225600.0)
    assert [n.id for n in neighbours["c1"]] == ["m1", "m2"]  # newest first (equal), then id; m4 is later


async def test_guarded_ports_fall_back_and_say_so_and_fail_fast_without_a_fallback() -> None:
    switch = Switch()
    switch.mode = "refusing"  # its probe too
    vectors = GuardedVectorIndex(Down(), circuit(switch), RecordVectors(records()))  # type: ignore[arg-type]
    with collecting() as notes:
        hits = await vectors.search("u1", ["Phoenix"], vec(1, 0, 0, 0)[None, :], list(Kind), 10)
    assert {h.id for h in hits[0]} >= {"m1", "m2"}
    assert [(n.stage, n.store) for n in notes] == [("grounding", "Fake")]
    assert vectors.circuit.is_open
    started = time.perf_counter()
    with pytest.raises(StoreDown):
        await vectors.upsert("u1", [])  # a write has no fallback: refused at once
    assert time.perf_counter() - started < 0.1
    graph = GuardedGraphStore(Down(), circuit(Switch()), None)  # type: ignore[arg-type]
    caps = ExpansionCaps(depth=1, fanout_per_node=10, max_per_kind=10, hop_decay=0.5)
    with pytest.raises(StoreUnavailable):
        await graph.expand("u1", {"m1": 1.0}, caps)
    await vectors.close()
    await graph.close()


# --- the HTTP edge -------------------------------------------------------------------------------


async def keyed_client(service: Any, settings: Any) -> httpx.AsyncClient:
    from hrt.api import create_app
    from hrt.auth import SCOPES, new_key

    token, record = new_key("test-admin", SCOPES, None)
    await service.records.create_key(record)
    app = create_app(settings, service=service)
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://hrt", headers={"authorization": f"Bearer {token}"}
    )


async def test_a_store_refused_by_its_circuit_is_a_503_with_retry_after_and_no_log_line(
    loaded_service, settings, caplog
) -> None:
    async def down(*args: Any, **kwargs: Any) -> Any:
        raise StoreDown("Neo4j's circuit is open (connection refused)", store="Neo4j", retry_after_s=1)

    loaded_service.tool.graph.expand = down
    caplog.set_level(logging.WARNING)
    async with await keyed_client(loaded_service, settings) as c:
        r = await c.post("/v1/retrieve", json={"user_id": "u1", "key_phrases": ["Phoenix"]})
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["code"] == "store_unavailable" and "Neo4j" in r.json()["error"]["message"]
    assert "connection refused" not in r.text
    assert not [x for x in caplog.records if x.name.startswith("hrt.api")]


async def test_readyz_reports_a_hanging_store_within_a_second(loaded_service, settings) -> None:
    async def hang() -> None:
        await asyncio.sleep(30)

    loaded_service.vectors.ping = hang
    async with await keyed_client(loaded_service, settings) as c:
        started = time.perf_counter()
        r = await c.get("/readyz")
    assert time.perf_counter() - started < 1.0
    assert r.status_code == 503 and r.json()["stores"]["vectors"] == "unavailable"


# --- the dev stack -------------------------------------------------------------------------------


def test_dev_up_brings_a_stopped_server_back_on_its_old_ports_and_keeps_stack_env(tmp_path: Path, monkeypatch) -> None:
    started: list[tuple[str, dict[str, int] | None]] = []

    def fake_starter(name: str, ports: dict[str, int]) -> Any:
        def start(root: Path, credentials: devstack.Credentials, ports: Any = None, **kw: Any) -> devstack.ServiceInfo:
            started.append((name, dict(ports) if ports else None))
            return devstack.ServiceInfo(name, 999_999_999, dict(ports or fresh[name]), "", "")

        return start

    fresh = {
        "postgres": {"port": devstack.free_port()},
        "neo4j": {"bolt": devstack.free_port(), "http": devstack.free_port()},
    }
    old = {
        "postgres": {"port": devstack.free_port()},
        "neo4j": {"bolt": devstack.free_port(), "http": devstack.free_port()},
    }
    stack = devstack.Stack(
        dir=str(tmp_path),
        services={n: devstack.ServiceInfo(n, 999_999_999, p, "", "") for n, p in old.items()},  # no such pid: stopped
        credentials=devstack.Credentials.generate(),
    )
    stack.save()
    env_before = (tmp_path / "stack.env").read_text()
    monkeypatch.setattr(devstack, "INSTALLERS", {n: (lambda: None) for n in devstack.SERVICES})
    monkeypatch.setattr(devstack, "STARTERS", {n: fake_starter(n, p) for n, p in fresh.items()})
    monkeypatch.setattr(devstack, "start_neo4j", fake_starter("neo4j", fresh["neo4j"]))
    devstack.up(tmp_path, ("postgres", "neo4j"))
    assert sorted(started) == sorted((n, p) for n, p in old.items())
    assert (tmp_path / "stack.env").read_text() == env_before
    env = dict(line.split("=", 1) for line in env_before.splitlines())
    assert (env["HRT_RECORD_STORE"], env["HRT_GRAPH_STORE"], env["HRT_VECTOR_INDEX"]) == (
        "'postgres'",
        "'neo4j'",
        "'embedded'",
    )


def test_a_dev_stack_that_fails_half_way_stops_the_servers_it_started(tmp_path: Path, monkeypatch) -> None:
    """``devstack.running`` (the fixtures', the drill's): one server fails to start, the one that
    did start is stopped, not left running with nobody to stop it."""
    pids: list[int] = []

    def start_ok(root: Path, credentials: devstack.Credentials, ports: Any = None, **kw: Any) -> devstack.ServiceInfo:
        proc = devstack._spawn(["sleep", "300"], tmp_path / "sleep.log")
        pids.append(proc.pid)
        return devstack.ServiceInfo("postgres", proc.pid, {"port": devstack.free_port()}, "", "")

    def start_fails(root: Path, creds: devstack.Credentials, ports: Any = None, **kw: Any) -> devstack.ServiceInfo:
        raise devstack.DevStackError("Neo4j exited with 1")

    monkeypatch.setattr(devstack, "INSTALLERS", {n: (lambda: None) for n in devstack.SERVICES})
    monkeypatch.setattr(devstack, "STARTERS", {"postgres": start_ok, "neo4j": start_fails})
    monkeypatch.setattr(devstack, "start_neo4j", start_fails)
    with pytest.raises(devstack.DevStackError, match="neo4j"), devstack.running(tmp_path, ("postgres", "neo4j")):
        pass
    assert len(pids) == 1 and not devstack._alive(pids[0])


# --- PostgreSQL: a circuit around blocks, the keys read last --------------------------------------


async def test_a_block_waiting_on_a_store_that_refuses_its_ping_ends_at_once_then_blocks_are_refused() -> None:
    """PostgreSQL's calls are blocks (a pooled connection and its statements): one waiting for the
    pool's timeout ends once the suspicion ping is refused; the next is refused without a call."""
    switch = Switch()
    c = circuit(switch)
    switch.mode = "refusing"
    started = time.perf_counter()
    with pytest.raises(StoreDown) as ended:
        async with c.guarding():
            await asyncio.sleep(30)  # the pool waiting for a connection
    assert time.perf_counter() - started < 1.0 and ended.value.store == "Fake"
    assert c.is_open
    started = time.perf_counter()
    with pytest.raises(StoreDown):
        async with c.guarding():
            raise AssertionError("a refused block never runs")
    assert time.perf_counter() - started < 0.1
    await c.close()


async def test_a_block_failing_on_its_store_opens_the_circuit_and_another_stores_failure_does_not() -> None:
    c = circuit(Switch())
    with pytest.raises(StoreUnavailable):
        async with c.guarding():
            raise StoreUnavailable("Neo4j is down", store="Neo4j")  # a projection write inside a lease
    assert not c.is_open
    slow_done = False
    async with c.guarding():  # a slow block whose store answers the ping is not cut off
        await asyncio.sleep(0.2)
        slow_done = True
    assert slow_done and not c.is_open
    with pytest.raises(StoreUnavailable):
        async with c.guarding():
            raise StoreUnavailable("connection refused", store="Fake")
    assert c.is_open
    await c.close()


class KeysDown:
    """A key store whose record store's circuit is open once ``down`` is set."""

    def __init__(self, keys: list[Any]) -> None:
        self._keys = keys
        self.down = False

    async def keys(self) -> list[Any]:
        if self.down:
            raise StoreDown("PostgreSQL's circuit is open (refused)", store="PostgreSQL", retry_after_s=1)
        return list(self._keys)

    async def touch_keys(self, used: Any) -> None:
        if self.down:
            raise StoreDown("PostgreSQL's circuit is open (refused)", store="PostgreSQL", retry_after_s=1)


async def test_keys_read_last_serve_while_the_record_store_is_down_within_the_grace_only(caplog) -> None:
    from hrt.auth import SCOPES, KeyRing, new_key

    token, record = new_key("ops", SCOPES, None)
    revoked_token, revoked = new_key("gone", SCOPES, None)
    revoked = dataclasses.replace(revoked, revoked_at=time.time() - 1)
    other_token, _ = new_key("made-elsewhere", SCOPES, None)
    store = KeysDown([record, revoked])
    ring = KeyRing(store, refresh_s=0.0, outage_grace_s=0.3)  # type: ignore[arg-type]
    await ring.authenticate(f"Bearer {token}")
    store.down = True
    caplog.set_level(logging.INFO)
    started = time.perf_counter()
    assert (await ring.authenticate(f"Bearer {token}")).key_id == record.key_id  # the keys read last
    assert time.perf_counter() - started < 0.1
    from hrt.errors import Unauthenticated

    with pytest.raises(Unauthenticated):
        await ring.authenticate(f"Bearer {revoked_token}")  # revoked before the outage: still refused
    with pytest.raises(StoreDown):
        await ring.authenticate(f"Bearer {other_token}")  # not among them: 503, never 401
    await asyncio.sleep(0.35)
    with pytest.raises(StoreDown):
        await ring.authenticate(f"Bearer {token}")  # past the grace: 503
    assert not [r for r in caplog.records if r.name == "hrt.auth"]  # the circuit logged the outage


async def test_a_key_store_that_cannot_be_reached_is_a_503_with_one_line_and_no_traceback(
    loaded_service, settings, caplog
) -> None:
    from hrt.api import create_app
    from hrt.auth import SCOPES, new_key

    token, record = new_key("ops", SCOPES, None)
    await loaded_service.records.create_key(record)

    async def unreachable() -> list[Any]:
        raise StoreUnavailable("PostgreSQL unavailable during keys: couldn't get a connection", store="PostgreSQL")

    loaded_service.records.keys = unreachable
    caplog.set_level(logging.WARNING)
    app = create_app(settings, service=loaded_service)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://hrt") as c:
        r = await c.get("/readyz", headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
    assert "PostgreSQL" in r.json()["error"]["message"] and "connection" not in r.text
    lines = [x for x in caplog.records if x.name == "hrt.api.guard"]
    assert len(lines) == 1 and lines[0].exc_info is None


def test_the_dev_stacks_postgresql_runs_durable_when_asked(monkeypatch, tmp_path: Path) -> None:
    """Fast and not crash-safe for tests (an acknowledged commit may be lost to a SIGKILL);
    HRT_DEV_POSTGRES_DURABLE=1 (the drill's --postgres-crash): PostgreSQL's own safe defaults."""
    monkeypatch.delenv("HRT_DEV_POSTGRES_DURABLE", raising=False)
    command = devstack._pg_command(tmp_path, tmp_path, tmp_path / "data", 5432)
    assert "synchronous_commit=off" in command and "fsync=off" in command
    monkeypatch.setenv("HRT_DEV_POSTGRES_DURABLE", "1")
    command = devstack._pg_command(tmp_path, tmp_path, tmp_path / "data", 5432)
    assert {"fsync=on", "synchronous_commit=on", "full_page_writes=on"} <= set(command)
    assert not [c for c in command if c.endswith("=off")]


def test_dev_stack_secrets_never_start_with_a_dash(monkeypatch) -> None:
    """neo4j-admin's set-initial-password reads a password starting with '-' as an option."""
    tokens = iter(["-abc", "-def", "ghi"])
    monkeypatch.setattr(devstack.secrets, "token_urlsafe", lambda n: next(tokens))
    assert devstack._secret() == "ghi"


async def test_a_projection_delayed_by_an_outage_is_logged_once_until_it_changes(caplog) -> None:
    """Writes during an outage each leave their events in the outbox; the log says so once (and once
    more when the reason changes, and when projection is at once again), not once per write."""
    from types import SimpleNamespace

    from hrt.projector import DrainReport
    from hrt.service import HRTService

    reports = [
        DrainReport(failed={"vector": "Weaviate's circuit is open (connection refused)"}),
        DrainReport(failed={"vector": "Weaviate's circuit is open (connection refused)"}),
        DrainReport(failed={"vector": "Weaviate's circuit is open (connection refused)"}),
        DrainReport(busy=True),
        DrainReport(busy=True),
        DrainReport(),
        DrainReport(),
    ]

    async def drain(*, wait: float | None = None) -> DrainReport:
        return reports.pop(0)

    service = SimpleNamespace(
        projector=SimpleNamespace(drain=drain),
        settings=SimpleNamespace(read_your_writes_timeout_s=0.1),
        _projection_note=None,
    )
    caplog.set_level(logging.INFO, logger="hrt.service")
    for _ in range(7):
        await HRTService._project_now(service)  # type: ignore[arg-type]
    lines = [r.getMessage() for r in caplog.records if r.name == "hrt.service"]
    assert len(lines) == 3, lines
    assert "projection delayed" in lines[0] and "connection refused" in lines[0]
    assert "background projector" in lines[1] and "at once again" in lines[2]
