"""One request never stalls the others, against a real ``hrt serve`` (embedded, real embedder):
while a large NDJSON ingest is in flight, ``/healthz`` and small retrievals keep answering, and a
write beyond ``HRT_MAX_CONCURRENT_INGESTS`` is refused with 429 and Retry-After.

A liveness assertion with a generous bound (2 s, where these requests take milliseconds), not a
benchmark: ``scripts/stall_probe.py`` (since removed; see git history) measured the latencies (docs/reliability.md).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from tests.integration.conftest import start_hrt_server

pytestmark = pytest.mark.integration

BOUND_S = 2.0
UNITS = 3000
WORDS = [
    "the",
    "team",
    "reviewed",
    "the",
    "phoenix",
    "timeline",
    "budget",
    "and",
    "the",
    "database",
    "migration",
    "plan",
    "for",
    "next",
    "quarter",
]


def ndjson(user: str, units: int, words: int) -> bytes:
    rows: list[dict[str, Any]] = [{"kind": "concept", "user_id": user, "id": f"{user}-c", "name": "phoenix"}]
    for i in range(units):
        text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(words)) + f" note {i}"
        rows.append(
            {
                "kind": "memory_unit",
                "user_id": user,
                "muid": f"{user}-m{i}",
                "title": f"note {i}",
                "content": text,
                "creation_ts": "2025-06-01T10:00:00Z",
            }
        )
        rows.append(
            {"kind": "relation", "user_id": user, "type": "MENTIONS", "source": f"{user}-m{i}", "target": f"{user}-c"}
        )
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def test_healthz_and_small_retrievals_answer_during_a_large_ingest(tmp_path):
    server = start_hrt_server(tmp_path / "s.db", tmp_path / "s.log", env={"HRT_MAX_CONCURRENT_INGESTS": "1"})
    nd = {**server.headers, "content-type": "application/x-ndjson"}
    try:
        with server.client(timeout=60) as client:
            seeded = client.post("/v1/ingest", content=ndjson("small", 30, 20), headers=nd)
            assert seeded.status_code == 200, seeded.text
            small = {"user_id": "small", "key_phrases": ["phoenix timeline"], "as_of": "2025-12-31T00:00:00Z"}
            assert client.post("/v1/retrieve", json=small).status_code == 200  # caches loaded

        body = ndjson("big", UNITS, 30)
        outcome: dict[str, Any] = {}
        done = threading.Event()

        def ingest() -> None:
            started = time.perf_counter()
            r = httpx.post(f"{server.base_url}/v1/ingest", content=body, headers=nd, timeout=300)
            outcome.update(status=r.status_code, body=r.json(), seconds=time.perf_counter() - started)
            done.set()

        writer = threading.Thread(target=ingest)
        writer.start()
        answers: list[tuple[str, int, float]] = []
        refused: list[httpx.Response] = []
        deadline = time.monotonic() + 120
        with server.client(timeout=BOUND_S * 5) as client:
            time.sleep(0.5)  # the ingest's body is in: it holds the only write slot
            refused.append(client.post("/v1/ingest", content=ndjson("other", 1, 5), headers=nd))
            while not done.is_set() and time.monotonic() < deadline:
                for name, send in (
                    ("healthz", lambda: client.get("/healthz")),
                    ("retrieve", lambda: client.post("/v1/retrieve", json=small)),
                ):
                    started = time.perf_counter()
                    try:
                        status = send().status_code
                    except httpx.TimeoutException:
                        status = 0
                    answers.append((name, status, time.perf_counter() - started))
                time.sleep(0.05)
        writer.join(300)

        assert outcome.get("status") == 200, outcome
        assert outcome["body"]["upserted"] == 1 + 2 * UNITS
        assert outcome["seconds"] > 3, "the ingest must outlast several probes for the test to mean anything"
        assert sum(1 for a in answers if a[0] == "healthz") >= 5
        slow = [a for a in answers if a[1] != 200 or a[2] > BOUND_S]
        assert not slow, f"{len(slow)} of {len(answers)} probes failed or took over {BOUND_S} s: {slow[:5]}"
        assert refused[0].status_code == 429, refused[0].text
        assert int(refused[0].headers["retry-after"]) >= 1

        with server.client(timeout=60) as client:  # the writer reads its write at once
            assert client.get("/v1/users/big/stats").json()["memory_unit"] == UNITS
            big = {"user_id": "big", "key_phrases": ["phoenix timeline"], "as_of": "2025-12-31T00:00:00Z"}
            doc = client.post("/v1/retrieve", json=big).json()
            assert doc["retrieved_memory_units"], doc
            assert all(m["muid"].startswith("big-m") for m in doc["retrieved_memory_units"])
    finally:
        server.stop()


def test_a_trickle_of_writes_is_taken_without_429s_and_each_is_read_at_once(tmp_path):
    """An agent's write after every turn (five a second to one user) beside two readers: no write
    is refused, each is returned by the first retrieval after it (with its concept, so the graph
    has it too), and every read is answered."""
    server = start_hrt_server(tmp_path / "t.db", tmp_path / "t.log")
    nd = {**server.headers, "content-type": "application/x-ndjson"}
    small = {"user_id": "tr", "key_phrases": ["phoenix timeline"], "as_of": "2025-12-31T00:00:00Z"}
    try:
        with server.client(timeout=120) as client:
            assert client.post("/v1/ingest", content=ndjson("tr", 500, 20), headers=nd).status_code == 200
            assert client.post("/v1/retrieve", json=small).status_code == 200  # caches loaded
        stop = threading.Event()
        reads: list[int] = []

        def reader() -> None:
            with server.client(timeout=60) as client:
                while not stop.is_set():
                    reads.append(client.post("/v1/retrieve", json=small).status_code)

        readers = [threading.Thread(target=reader) for _ in range(2)]
        for t in readers:
            t.start()
        statuses: list[int] = []
        unseen: list[str] = []
        try:
            with server.client(timeout=60) as client:
                for i in range(20):
                    started = time.monotonic()
                    muid = f"tr-w{i}"
                    content = f"turn {i}: the quokka {i} asked about the lighthouse keeper schedule number {i}"
                    records = [
                        {"kind": "memory_unit", "user_id": "tr", "muid": muid, "title": f"turn {i}",
                         "content": content, "creation_ts": "2025-07-01T10:00:00Z"},
                        {"kind": "relation", "user_id": "tr", "type": "MENTIONS", "source": muid, "target": "tr-c"},
                    ]  # fmt: skip
                    statuses.append(client.post("/v1/ingest", json={"records": records}).status_code)
                    ask = {**small, "key_phrases": [content], "limits": {"memory_units": 10}}
                    doc = client.post("/v1/retrieve", json=ask).json()
                    units = {m["muid"]: m for m in doc["retrieved_memory_units"]}
                    concepts = {c["id"] for c in units.get(muid, {}).get("connected_concept_ids_and_names", [])}
                    if "tr-c" not in concepts:
                        unseen.append(muid)
                    time.sleep(max(0.0, 0.2 - (time.monotonic() - started)))
        finally:
            stop.set()
            for t in readers:
                t.join(60)
        assert statuses == [200] * 20, statuses
        assert not unseen, f"writes not returned by the next retrieval: {unseen}"
        assert reads and set(reads) == {200}, sorted(set(reads))
        with server.client(timeout=60) as client:
            assert client.get("/v1/users/tr/stats").json()["memory_unit"] == 520
    finally:
        server.stop()
