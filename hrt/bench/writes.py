"""Writes as an agent makes them: one memory after a turn, read on the next (docs/bench.md).

Two measurements against the served store of a run, after its read measurements:

- **write to visible**: one memory unit of fifteen words (fourteen drawn per note and a word of its
  own, so a search finds it only once it is written, and a ``MENTIONS`` of a concept of the graph)
  posted to ``/v1/ingest``, then at once a retrieval with its text as the key phrase: the time from
  sending the write to a response that returns the unit with its concept (found by search, so the
  vector and lexical legs hold it, and with its mention, so the graph does). p50 and p95 over
  ``writes`` of them.
- **a trickle beside readers**: ``rate`` writes a second for ``seconds`` while ``readers`` clients
  retrieve without pause; the read latency beside the trickle against the same readers alone, the
  writes refused (429) and any error, and each write's time to visible.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from hrt.bench.loadgen import post_retrieve, request_body
from hrt.bench.server import Server
from hrt.bench.stats import summary
from hrt.bench.synth import SynthConfig

# a note is fourteen words of these, drawn per note, then a word of its own
_VOCABULARY = (
    "asked about the quarterly plan agreed to revisit notes after lunch with team budget review hiring "
    "garden trip dentist invoice launch draft slides kitchen repair flight booking birthday gift tennis "
    "lesson migration rollout incident pager password rotation coffee supplier contract renewal offsite "
    "agenda roadmap feedback mentor onboarding laptop upgrade holiday schedule recipe training"
)
WORDS = _VOCABULARY.split()


@dataclass
class WriteLog:
    visible_ms: list[float] = field(default_factory=list)
    ingest_ms: list[float] = field(default_factory=list)
    refused: int = 0
    errors: list[str] = field(default_factory=list)


def memory(user_id: str, n: int, concept: str, stamp: str) -> list[dict[str, Any]]:
    token = f"zqx{n:06d}"
    content = " ".join([*random.Random(n).sample(WORDS, 14), token])
    muid = f"w-{n:06d}"
    return [
        {
            "kind": "memory_unit",
            "user_id": user_id,
            "muid": muid,
            "title": f"note {token}",
            "content": content,
            "creation_ts": stamp,
        },
        {"kind": "relation", "user_id": user_id, "type": "MENTIONS", "source": muid, "target": concept},
    ]


def write_then_read(client: httpx.Client, user_id: str, n: int, concept: str, stamp: str, log: WriteLog) -> None:
    """One write, then retrievals of its word until it is returned with its concept."""
    records = memory(user_id, n, concept, stamp)
    t0 = time.perf_counter()
    r = client.post("/v1/ingest", json={"records": records})
    ingest_ms = (time.perf_counter() - t0) * 1000
    if r.status_code == 429:
        log.refused += 1
        return
    if r.status_code != 200:
        log.errors.append(f"/v1/ingest answered {r.status_code}: {r.text[:200]}")
        return
    body = {
        "user_id": user_id,
        "key_phrases": [records[0]["content"]],
        "max_depth": 1,
        "as_of": stamp,
        "limits": {"memory_units": 20},
    }
    for _ in range(50):
        found = client.post("/v1/retrieve", json=body)
        if found.status_code == 200 and _holds(found.json(), records[0]["muid"], concept):
            log.visible_ms.append((time.perf_counter() - t0) * 1000)
            log.ingest_ms.append(ingest_ms)
            return
    log.errors.append(f"{records[0]['muid']} not visible after 50 retrievals")


def _holds(doc: dict[str, Any], muid: str, concept: str) -> bool:
    for unit in doc.get("retrieved_memory_units", []):
        if unit["muid"] == muid:
            return concept in {c["id"] for c in unit.get("connected_concept_ids_and_names", [])}
    return False


def measure_server(
    server: Server,
    cfg: SynthConfig,
    phrases: list[list[str]],
    depth: int,
    writes: int,
    seconds: float,
    first: int = 0,
) -> dict[str, Any]:
    """:func:`measure_writes` on a served bench store: the user, a concept and the time of ``cfg``,
    readers asking ``phrases`` at ``depth``; ``first``: the first memory's number (a reused store
    holds the memories of earlier runs: written again, they would be rewrites, not new ones)."""
    as_of = cfg.as_of().strftime("%Y-%m-%dT%H:%M:%SZ")
    bodies = [request_body(cfg.user_id, p, as_of, depth) for p in phrases]
    return measure_writes(
        server.base_url,
        server.headers,
        cfg.user_id,
        f"{cfg.id_prefix}c0",
        as_of,
        bodies,
        writes,
        seconds=seconds,
        first=first,
    )


def measure_writes(
    base_url: str,
    headers: dict[str, str],
    user_id: str,
    concept: str,
    stamp: str,
    read_bodies: list[dict[str, Any]],
    writes: int = 20,
    rate: float = 5.0,
    seconds: float = 20.0,
    readers: int = 2,
    first: int = 0,
) -> dict[str, Any]:
    """Both measurements (module docstring); ``read_bodies`` feed the readers; the memories are
    numbered from ``first``."""
    alone = WriteLog()
    with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
        for n in range(first, first + writes):
            write_then_read(client, user_id, n, concept, stamp, alone)
    figures: dict[str, Any] = {"write_to_visible": {**_figures(alone), "writes": writes}}
    if seconds <= 0:
        return figures
    idle = _reads(base_url, headers, read_bodies, readers, seconds / 2, None)
    trickle = WriteLog()
    beside = _reads(
        base_url, headers, read_bodies, readers, seconds, (rate, user_id, concept, stamp, trickle, first + writes)
    )
    return {
        **figures,
        "trickle": {
            "rate_per_s": rate,
            "seconds": seconds,
            "readers": readers,
            **_figures(trickle),
            "reads_idle": idle,
            "reads_beside_writes": beside,
            "read_p95_ratio": round(beside["p95_ms"] / idle["p95_ms"], 3) if idle.get("p95_ms") else None,
        },
    }


def _figures(log: WriteLog) -> dict[str, Any]:
    return {
        "visible_ms": summary(log.visible_ms),
        "ingest_ms": summary(log.ingest_ms),
        "refused_429": log.refused,
        "errors": log.errors[:5],
        "n_errors": len(log.errors),
    }


def _reads(
    base_url: str,
    headers: dict[str, str],
    bodies: list[dict[str, Any]],
    clients: int,
    seconds: float,
    writer: tuple[float, str, str, str, WriteLog, int] | None,
) -> dict[str, Any]:
    """``clients`` readers for ``seconds`` (cycling over ``bodies``), beside a paced writer if given."""
    stop = time.perf_counter() + seconds
    lock = threading.Lock()
    samples: list[float] = []
    errors: list[str] = []

    def reader(offset: int) -> None:
        i = offset
        with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
            while time.perf_counter() < stop:
                try:
                    ms = post_retrieve(client, bodies[i % len(bodies)]).ms
                except Exception as exc:
                    with lock:
                        errors.append(str(exc)[:200])
                    continue
                with lock:
                    samples.append(ms)
                i += clients

    def paced_writer(rate: float, user_id: str, concept: str, stamp: str, log: WriteLog, first: int) -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
            n, start = first, time.perf_counter()
            while time.perf_counter() < stop:
                write_then_read(client, user_id, n, concept, stamp, log)
                n += 1
                wait = start + (n - first) / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(clients)]
    if writer is not None:
        threads.append(threading.Thread(target=paced_writer, args=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {**summary(samples), "errors": len(errors)}
