"""Faults (issue #22): stores stopped and started again, the server killed mid-ingest. Real
processes throughout; each test ends by comparing what the stores hold with what was acknowledged.

Each test starts the stores it breaks in a folder of its own (``hrt.devstack``), so the session's
shared stack is never touched, and brings a stopped store back as an operator does, with ``hrt dev up`` (which
starts it again on its old ports and data).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx
import pytest

from hrt import devstack
from hrt.cli import sample_data_path
from hrt.stores.postgres.migrate import migrate
from tests.helpers import scratch_stack
from tests.integration.conftest import ServerProcess, start_hrt_server

pytestmark = pytest.mark.integration

AS_OF = "2025-12-31T00:00:00Z"
REQUEST = {"user_id": "u-maya", "key_phrases": ["Project Phoenix timeline", "team bandwidth"], "as_of": AS_OF}
BUDGET_S = 8  # HRT_REQUEST_TIMEOUT_S of these servers


def memory(user: str, muid: str, text: str) -> dict[str, object]:
    return {
        "kind": "memory_unit",
        "user_id": user,
        "muid": muid,
        "content": text,
        "creation_ts": "2025-06-01T09:00:00Z",
    }


def stack_env(stack: devstack.Stack, dsn: str, tmp: Path) -> dict[str, str]:
    """stack.env's settings (the backends included), and this test's own collection and budgets."""
    return {
        **stack.env(),
        "HRT_POSTGRES_DSN": dsn,
        "HRT_WEAVIATE_COLLECTION": "HRTFaults" + uuid.uuid4().hex[:8],
        "HRT_DB_PATH": str(tmp / "unused.db"),
        "HRT_REQUEST_TIMEOUT_S": str(BUDGET_S),
        "HRT_RERANK_BUDGET_S": "5",
        "HRT_LOG_LEVEL": "WARNING",
    }


def doctor(env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "hrt.cli", "doctor"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert isinstance(report, dict)
    return report


def until(predicate, timeout: float, what: str, step: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"{what} within {timeout:.0f}s")


def ready(server: ServerProcess) -> bool:
    try:
        return httpx.get(f"{server.base_url}/readyz", headers=server.headers, timeout=5).status_code == 200
    except httpx.TransportError:
        return False


@pytest.fixture
def private_stack():
    """PostgreSQL, Neo4j and Weaviate for this test alone, so that each can be stopped."""
    with scratch_stack("hrt-faults-", devstack.SERVICES) as running:
        yield running


def operator_up(directory: Path) -> None:
    """What an operator runs once a store stopped: ``hrt dev up`` (through the CLI's entry point)."""
    done = subprocess.run(
        [sys.executable, "-m", "hrt.cli", "dev", "up", "--dir", str(directory)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def hrt_command(env: dict[str, str], *args: str) -> tuple[int, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "hrt.cli", *args], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode in (0, 1, 3), done.stderr[-2000:]
    return done.returncode, json.loads(done.stdout)


def timed_retrieve(c: httpx.Client) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    r = c.post("/v1/retrieve", json=REQUEST, timeout=60)
    return r, time.monotonic() - started


def degraded_by(response: httpx.Response, stage: str, store: str) -> bool:
    meta = response.json()["retrieval_metadata"]
    return (
        response.status_code == 200
        and meta["degraded"]
        and meta["stages"][stage] == "degraded"
        and any(r.startswith(f"{stage}: {store} unavailable") for r in meta["degraded_reasons"])
    )


def outage_answers(c: httpx.Client, server: ServerProcess, store: str, stage: str) -> bytes:
    """While ``store`` is down: the first retrieval answers degraded within the budget; once the
    store is known down (/readyz within a second, saying so) each answers degraded at once with the
    same bytes; a write is accepted without waiting for the store."""
    first, took = timed_retrieve(c)
    assert took < BUDGET_S and degraded_by(first, stage, store), (took, first.text[:500])
    started = time.monotonic()
    readyz = c.get("/readyz")
    assert time.monotonic() - started < 1.5 and readyz.status_code == 503, readyz.text
    port = {"Weaviate": "vectors", "Neo4j": "graph"}[store]
    assert readyz.json()["stores"][port] == "unavailable"
    for _ in range(5):
        again, took = timed_retrieve(c)
        assert took < 1.0, took  # known down: no wait on the store (docs/reliability.md has the figures)
        assert again.content == first.content  # the same outage, the same degraded bytes
    started = time.monotonic()
    written = c.post(
        "/v1/ingest", json={"records": [memory("u-fault", f"fault-{store}", f"written while {store} was down")]}
    )
    assert written.status_code == 200, written.text  # PostgreSQL holds it; the outbox waits
    assert time.monotonic() - started < 3.0
    return first.content


def test_stores_stopped_and_back_lose_nothing_and_answer_whole_again(private_stack, tmp_path):
    """Weaviate, then Neo4j, stopped under an HRT server by their PIDs and brought back with
    ``hrt dev up``, as an operator does; then the server itself killed (-9) in the middle of an
    ingest. During each outage retrieval answers degraded from what is up (the same bytes each
    time, at once once the store is known down), writes are accepted, ``hrt doctor`` and
    ``hrt project`` work on what is up (exit 3); ``hrt dev up`` restarts the store on its old
    ports, the same server reconnects by itself, answers the same bytes as before the fault, and
    the outage's writes reach both projections; ``hrt doctor`` finds no drift."""
    directory, stack = private_stack
    dsn = stack.postgres_dsn
    migrate(dsn)
    env = stack_env(stack, dsn, tmp_path)
    env_file = (directory / "stack.env").read_text()
    server = start_hrt_server(tmp_path / "unused.db", tmp_path / "server.log", env=env)
    try:
        with server.client(timeout=60) as c:
            r = c.post(
                "/v1/ingest", content=sample_data_path().read_bytes(), headers={"content-type": "application/x-ndjson"}
            )
            assert r.status_code == 200, r.text
            before = c.post("/v1/retrieve", json=REQUEST)
            assert before.status_code == 200 and not before.json()["retrieval_metadata"]["degraded"]
            for store, name, stage in (("weaviate", "Weaviate", "grounding"), ("neo4j", "Neo4j", "expansion")):
                pid = devstack.status(directory)["services"][store]["pid"]  # as `hrt dev status` shows it
                devstack.stop_pid(pid, grace=5)
                outage_answers(c, server, name, stage)
                code, report = hrt_command(env, "doctor")
                assert code == 3 and report["stores"][name] == "unavailable", report
                code, report = hrt_command(env, "project")
                assert code == 3 and report["unavailable"] == [name], report
                operator_up(directory)
                assert (directory / "stack.env").read_text() == env_file  # the same ports
                until(lambda: ready(server), 60, f"/readyz 200 after {store} came back, without a restart")
                # a Weaviate just back may still be loading the collection's index: that answer is
                # degraded (the store judged unavailable once more), the next whole one is the test
                after = until(
                    lambda: (
                        (x := c.post("/v1/retrieve", json=REQUEST)).status_code == 200
                        and not x.json()["retrieval_metadata"]["degraded"]
                        and x
                    ),
                    30,
                    f"an undegraded retrieval after {store} came back",
                )
                assert after.content == before.content, store  # whole again, byte for byte
            # the writes made during the outages reach both projections
            until(
                lambda: (
                    c.get("/v1/users/u-fault/stats").json()["memory_unit"] == 2
                    and c.post(
                        "/v1/retrieve", json={"user_id": "u-fault", "query": "written while Neo4j was down"}
                    ).json()["retrieved_memory_units"]
                ),
                30,
                "the outage's writes projected",
            )
        log = (tmp_path / "server.log").read_text()
        assert "Traceback" not in log
        # one line per transition, each opening closed again: at least the two stores' outages
        # (a Weaviate just back may refuse one more call while it loads, opening it for a probe)
        opened, closed = log.count("circuit open"), log.count("circuit closed")
        assert opened == closed and 2 <= opened <= 4, log[-3000:]
        # the server killed in the middle of an ingest: acknowledged batches whole, none in part
        acked = kill_mid_ingest(server, user="u-kill", batches=40, size=25)
        server = start_hrt_server(tmp_path / "unused.db", tmp_path / "server2.log", env=env)
        with server.client(timeout=60) as c:
            count = c.get("/v1/users/u-kill/stats").json()["memory_unit"]
        assert count % 25 == 0 and len(acked) * 25 <= count <= (len(acked) + 1) * 25, (count, len(acked))
        report = until(lambda: (d := doctor(env))["drift"] == [] and d, 120, "hrt doctor without drift")
        assert report["users_checked"] >= 5
    finally:
        server.stop()


def kill_mid_ingest(server: ServerProcess, user: str, batches: int, size: int) -> list[int]:
    """Send ``batches`` batches one after another and SIGKILL the server once three are
    acknowledged; returns the acknowledged batch numbers."""
    acked: list[int] = []

    def send() -> None:
        with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=60) as c:
            for b in range(batches):
                records = [memory(user, f"k-{b}-{i}", f"batch {b} record {i} " + "word " * 40) for i in range(size)]
                try:
                    if c.post("/v1/ingest", json={"records": records}).status_code == 200:
                        acked.append(b)
                except httpx.TransportError:
                    return

    sender = threading.Thread(target=send)
    sender.start()
    until(lambda: len(acked) >= 3, 120, "three acknowledged batches", step=0.05)
    os.kill(server.proc.pid, signal.SIGKILL)
    sender.join(timeout=60)
    server.proc.wait(timeout=30)
    assert len(acked) < batches  # the kill came mid-ingest
    return list(acked)


def test_kill_9_mid_ingest_embedded_keeps_acknowledged_batches_whole(tmp_path):
    db = tmp_path / "kill.db"
    server = start_hrt_server(db, tmp_path / "server.log")
    acked = kill_mid_ingest(server, user="u-kill", batches=40, size=25)
    server = start_hrt_server(db, tmp_path / "server2.log")
    try:
        with server.client(timeout=60) as c:
            count = c.get("/v1/users/u-kill/stats").json()["memory_unit"]
            assert count % 25 == 0 and len(acked) * 25 <= count <= (len(acked) + 1) * 25, (count, len(acked))
            # and the store still takes writes and answers
            assert (
                c.post("/v1/ingest", json={"records": [memory("u-kill", "after", "after the kill")]}).status_code == 200
            )
            assert c.get("/v1/users/u-kill/stats").json()["memory_unit"] == count + 1
    finally:
        server.stop()


def test_postgresql_restarted_under_load_recovers_without_restarting_hrt(tmp_path):
    """Requests in flight while PostgreSQL restarts fail cleanly (503, never a 500 or a hang); the
    pool reconnects by itself and every request after the restart succeeds."""
    with scratch_stack("hrt-pgfault-", ("postgres",)) as (directory, stack):
        migrate(stack.postgres_dsn)
        env = {
            "HRT_RECORD_STORE": "postgres",
            "HRT_POSTGRES_DSN": stack.postgres_dsn,
            "HRT_REQUEST_TIMEOUT_S": str(BUDGET_S),
            "HRT_RERANK_BUDGET_S": "5",
        }
        server = start_hrt_server(tmp_path / "projections.db", tmp_path / "server.log", env=env)
        statuses: list[int] = []
        slowest: list[float] = [0.0]
        spans: list[tuple[float, float, int]] = []  # (start, end, status) of each request
        stop = threading.Event()

        def load() -> None:
            with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=60) as c:
                while not stop.is_set():
                    started = time.monotonic()
                    try:
                        status = c.post("/v1/retrieve", json=REQUEST).status_code
                    except httpx.TransportError:
                        status = -1
                    spans.append((started, time.monotonic(), status))
                    statuses.append(status)
                    slowest[0] = max(slowest[0], time.monotonic() - started)

        try:
            with server.client(timeout=60) as c:
                r = c.post(
                    "/v1/ingest",
                    content=sample_data_path().read_bytes(),
                    headers={"content-type": "application/x-ndjson"},
                )
                assert r.status_code == 200, r.text
            clients = [threading.Thread(target=load) for _ in range(2)]
            for t in clients:
                t.start()
            until(lambda: len(statuses) >= 20, 60, "load before the restart")
            devstack.stop_pid(stack.services["postgres"].pid, grace=10)
            down_at = time.monotonic()
            time.sleep(3.0)
            devstack.up(directory, ("postgres",))  # what `hrt dev up` runs
            up_at = time.monotonic()
            mark = len(statuses)
            until(lambda: statuses[mark:].count(200) >= 20, 120, "twenty answers after the restart")
            stop.set()
            for t in clients:
                t.join(timeout=60)
            assert set(statuses) <= {200, 503}, sorted(set(statuses))  # clean failures only
            assert slowest[0] < BUDGET_S + 5  # never a hang
            # requests met the outage: each failed as a 503 or waited for the pool and succeeded
            met = [st for start, end, st in spans if start < up_at and end > down_at]
            assert met and set(met) <= {200, 503}, met
            assert statuses[-10:] == [200] * 10  # recovered, HRT never restarted
            assert server.proc.poll() is None
        finally:
            stop.set()
            server.stop()


def test_serve_starts_with_postgresql_down_and_serves_once_it_is_back(tmp_path):
    """``hrt serve`` with its record store down does not exit: /healthz answers, /readyz and every
    request say 503 (never a 401 for a valid key: the keys cannot be read), and once PostgreSQL is
    back the same process serves, without a restart."""
    from hrt.bench.server import provision_key
    from hrt.devstack import free_port

    with scratch_stack("hrt-pgdown-", ("postgres",)) as (directory, stack):
        migrate(stack.postgres_dsn)
        env = {
            **os.environ,
            "HRT_RECORD_STORE": "postgres",
            "HRT_POSTGRES_DSN": stack.postgres_dsn,
            "HRT_DB_PATH": str(tmp_path / "projections.db"),
            "HRT_REQUEST_TIMEOUT_S": str(BUDGET_S),
            "HRT_RERANK_BUDGET_S": "5",
            "HRT_LOG_LEVEL": "WARNING",
        }
        headers = {"authorization": f"Bearer {provision_key(env)}"}  # a key made while it was up
        devstack.stop_pid(stack.services["postgres"].pid, grace=10)
        port = free_port()
        log = (tmp_path / "server.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "hrt.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        server = ServerProcess(proc, f"http://127.0.0.1:{port}", tmp_path / "server.log", headers)
        try:

            def health() -> bool:
                assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
                try:
                    return httpx.get(f"{server.base_url}/healthz", timeout=2).status_code == 200
                except httpx.TransportError:
                    return False

            until(health, 120, "/healthz while PostgreSQL is down")
            with server.client(timeout=60) as c:
                assert c.get("/readyz").status_code == 503
                started = time.monotonic()
                r = c.post("/v1/retrieve", json=REQUEST)
                assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable", r.text
                assert time.monotonic() - started < BUDGET_S + 5
                devstack.up(directory, ("postgres",))  # what `hrt dev up` runs
                until(lambda: ready(server), 120, "/readyz 200 once PostgreSQL is back")
                ingested = c.post(
                    "/v1/ingest",
                    content=sample_data_path().read_bytes(),
                    headers={"content-type": "application/x-ndjson"},
                )
                assert ingested.status_code == 200, ingested.text
                # the projections follow the outbox (read-your-writes waits at most 5 s for them)
                until(
                    lambda: (
                        (d := c.post("/v1/retrieve", json=REQUEST)).status_code == 200
                        and d.json()["retrieved_memory_units"]
                    ),
                    120,
                    "the ingest projected and retrieved",
                )
                assert proc.poll() is None  # the same process throughout
        finally:
            server.stop()
    subprocess.run(["rm", "-rf", str(directory)], check=False)


def test_postgresql_stopped_is_refused_fast_and_readyz_answers_within_a_second(tmp_path):
    """PostgreSQL stopped as an operator does (``pg_ctl stop``'s fast shutdown) under a server:
    once its circuit is open every request that needs it is a 503 naming it with Retry-After, at
    once (no wait for the pool's timeout), writes too (nothing accepted, nothing lost); /readyz
    answers within a second, saying which store is down (the keys read last authenticate it);
    one log line when the circuit opens and one when it closes, no traceback; after ``hrt dev up``
    the same server is ready within the probe interval (fresh pools, not the old ones' reconnection
    backoff), answers the same bytes and takes writes."""
    with scratch_stack("hrt-pgcircuit-", ("postgres",)) as (directory, stack):
        migrate(stack.postgres_dsn)
        env = {
            "HRT_RECORD_STORE": "postgres",
            "HRT_POSTGRES_DSN": stack.postgres_dsn,
            "HRT_REQUEST_TIMEOUT_S": str(BUDGET_S),
            "HRT_RERANK_BUDGET_S": "5",
        }
        server = start_hrt_server(tmp_path / "projections.db", tmp_path / "server.log", env=env)
        try:
            with server.client(timeout=60) as c:
                r = c.post(
                    "/v1/ingest",
                    content=sample_data_path().read_bytes(),
                    headers={"content-type": "application/x-ndjson"},
                )
                assert r.status_code == 200, r.text
                before = c.post("/v1/retrieve", json=REQUEST)
                assert before.status_code == 200
                devstack.stop_postgres(stack.services["postgres"].pid, grace=10)
                first, took = timed_retrieve(c)
                assert first.status_code == 503 and took < 2.0, (took, first.text)
                assert first.json()["error"]["code"] == "store_unavailable" and "PostgreSQL" in first.text
                assert first.headers["retry-after"] == "1"
                started = time.monotonic()
                readyz = c.get("/readyz")
                assert time.monotonic() - started < 1.0 and readyz.status_code == 503, readyz.text
                assert readyz.json()["stores"]["records"] == "unavailable"
                times = []
                for _ in range(5):
                    again, took = timed_retrieve(c)
                    assert again.status_code == 503 and again.headers["retry-after"] == "1", again.text
                    times.append(took)
                assert sorted(times)[2] < 0.1, times  # known down: refused at once
                started = time.monotonic()
                written = c.post("/v1/ingest", json={"records": [memory("u-pg", "pg-down", "written while down")]})
                assert written.status_code == 503 and time.monotonic() - started < 0.5, written.text
                time.sleep(8.0)  # long enough for the pool's reconnection backoff to reach seconds
                devstack.up(directory, ("postgres",))  # what `hrt dev up` runs
                back = time.monotonic()
                until(lambda: ready(server), 30, "/readyz 200 once PostgreSQL is back", step=0.05)
                assert time.monotonic() - back < 2.5  # the circuit's probe (1 s), fresh pools: no backoff left
                started = time.monotonic()
                assert c.get("/readyz").status_code == 200 and time.monotonic() - started < 1.0
                after = until(
                    lambda: (x := c.post("/v1/retrieve", json=REQUEST)).status_code == 200 and x, 30, "a retrieval"
                )
                assert after.content == before.content
                written = c.post("/v1/ingest", json={"records": [memory("u-pg", "pg-up", "written once back")]})
                assert written.status_code == 200, written.text
                assert c.get("/v1/users/u-pg/stats").json()["memory_unit"] == 1  # the refused write is not there
            log = (tmp_path / "server.log").read_text()
            assert "Traceback" not in log, log[-3000:]
            assert log.count("PostgreSQL is unavailable: circuit open") == 1, log[-3000:]
            assert log.count("PostgreSQL answers again: circuit closed") == 1, log[-3000:]
            lines = [x for x in log.splitlines() if x.startswith(("WARNING", "ERROR"))]
            assert len(lines) == 2, lines  # those two: no line per request, per reconnection attempt
        finally:
            server.stop()
    subprocess.run(["rm", "-rf", str(directory)], check=False)
