"""The load generator: ``POST /v1/retrieve`` one at a time or from closed loops of concurrent
clients, with the end-to-end latency and the stages of ``Server-Timing``.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx

from hrt.bench.stats import summary

STAGES = ("intake", "grounding", "expansion", "scoring", "hydration", "rerank", "selection", "assembly", "total")


@dataclass
class Sample:
    ms: float
    stages: dict[str, float]
    seeds: int
    candidates: int
    returned: int
    unmatched: int


def parse_server_timing(header: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in header.split(","):
        name, _, rest = part.strip().partition(";")
        if rest.startswith("dur="):
            with contextlib.suppress(ValueError):
                out[name] = float(rest[4:])
    return out


def request_body(user_id: str, phrases: list[str], as_of: str, depth: int) -> dict[str, Any]:
    return {"user_id": user_id, "key_phrases": phrases, "max_depth": depth, "as_of": as_of}


def post_retrieve(client: httpx.Client, body: dict[str, Any]) -> Sample:
    t = time.perf_counter()
    r = client.post("/v1/retrieve", json=body)
    ms = (time.perf_counter() - t) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"/v1/retrieve answered {r.status_code}: {r.text[:500]}")
    doc = r.json()
    details = doc.get("scoring_details", {})
    returned = sum(len(doc.get(k, [])) for k in ("retrieved_memory_units", "retrieved_concepts", "retrieved_artifacts"))
    return Sample(
        ms=ms,
        stages=parse_server_timing(r.headers.get("server-timing", "")),
        seeds=int(details.get("seed_entities_identified_from_key_phrases", 0)),
        candidates=int(details.get("total_candidates_considered", 0)),
        returned=returned,
        unmatched=len(doc.get("unmatched_key_phrases", [])),
    )


def describe(samples: list[Sample]) -> dict[str, Any]:
    stages = {s: summary([x.stages[s] for x in samples if s in x.stages]) for s in STAGES}
    return {
        "end_to_end": summary([x.ms for x in samples]),
        "stages": {k: v for k, v in stages.items() if v.get("n")},
        "workload": {
            "seeds_p50": statistics.median(x.seeds for x in samples),
            "candidates_p50": statistics.median(x.candidates for x in samples),
            "candidates_max": max(x.candidates for x in samples),
            "returned_p50": statistics.median(x.returned for x in samples),
            "unmatched_phrases_per_request": round(statistics.fmean(x.unmatched for x in samples), 3),
        },
    }


def run_closed_loop(
    base_url: str, bodies: list[dict[str, Any]], clients: int, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """``clients`` threads, each with its own connection, sharing the bodies; throughput and latency."""
    lock = threading.Lock()
    todo: Iterator[dict[str, Any]] = iter(bodies)
    samples: list[Sample] = []
    errors: list[str] = []

    def worker() -> None:
        with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
            while True:
                with lock:
                    body = next(todo, None)
                if body is None:
                    return
                try:
                    s = post_retrieve(client, body)
                except Exception as exc:
                    with lock:
                        errors.append(str(exc)[:300])
                    continue
                with lock:
                    samples.append(s)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    out: dict[str, Any] = {
        "clients": clients,
        "requests": len(samples),
        "errors": len(errors),
        "wall_s": round(wall, 2),
    }
    out["throughput_rps"] = round(len(samples) / wall, 1) if wall > 0 else 0.0
    out.update({k: v for k, v in summary([s.ms for s in samples]).items() if k != "n"})
    if errors:
        out["first_error"] = errors[0]
    return out


def concurrency_levels(top: int) -> list[int]:
    levels, c = [], 1
    while c < top:
        levels.append(c)
        c *= 2
    levels.append(top)
    return levels
