"""Measure what docs/bench.md reports for the embedded default on the bundled sample graph:
model load, sample ingest, and retrieval latency in process and over HTTP (a real ``hrt serve``).

    python scripts/sample_latency.py [--rounds 100] [--out bench-results/sample-latency.json]

A measurement, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hrt.cli import DEMO_AS_OF, DEMO_REQUESTS, sample_data_path  # noqa: E402
from hrt.config import load_settings  # noqa: E402
from hrt.contract import RetrieveRequest  # noqa: E402
from hrt.ingest import parse_jsonl  # noqa: E402
from hrt.service import HRTService  # noqa: E402
from tests.integration.conftest import start_hrt_server  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summary(ms: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p95_ms": round(pct(ms, 0.95), 2),
        "p99_ms": round(pct(ms, 0.99), 2),
        "n": len(ms),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--out", default=str(ROOT / "bench-results" / "sample-latency.json"))
    args = ap.parse_args()
    bodies = [{**b, "as_of": DEMO_AS_OF} for b in DEMO_REQUESTS]
    results: dict[str, object] = {"machine": f"{platform.machine()} {platform.python_version()}"}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        svc = HRTService(load_settings(db_path=Path(tmp) / "s.db"))
        t1 = time.perf_counter()
        records = parse_jsonl(sample_data_path().read_text().splitlines())
        asyncio.run(svc.ingest(records))
        t2 = time.perf_counter()
        results["model_load_s"] = round(t1 - t0, 2)
        results["sample_ingest_s"] = round(t2 - t1, 2)
        results["sample_records"] = len(records)
        requests = [RetrieveRequest.model_validate(b) for b in bodies]

        async def in_process() -> tuple[list[float], list[float]]:
            cold: list[float] = []
            for r in requests:  # first time: the phrases are not in the embedding cache yet
                s = time.perf_counter()
                await svc.retrieve(r)
                cold.append((time.perf_counter() - s) * 1000)
            warm: list[float] = []
            for _ in range(args.rounds):
                for r in requests:
                    s = time.perf_counter()
                    await svc.retrieve(r)
                    warm.append((time.perf_counter() - s) * 1000)
            return cold, warm

        cold, warm = asyncio.run(in_process())
        results["in_process_uncached_phrases"] = summary(cold)
        results["in_process_cached_phrases"] = summary(warm)
        stages: dict[str, list[float]] = {}
        for r in requests:
            for _ in range(20):
                _, timings = asyncio.run(svc.retrieve_timed(r))
                for k, v in timings.items():
                    stages.setdefault(k, []).append(v * 1000)
        results["stage_p50_ms"] = {k: round(statistics.median(v), 3) for k, v in stages.items()}
        asyncio.run(svc.close())

        t3 = time.perf_counter()
        server = start_hrt_server(Path(tmp) / "h.db", Path(tmp) / "h.log")
        results["server_start_to_ready_s"] = round(time.perf_counter() - t3, 2)
        try:
            with server.client(timeout=60) as c:
                c.post(
                    "/v1/ingest",
                    content=sample_data_path().read_bytes(),
                    headers={"content-type": "application/x-ndjson"},
                ).raise_for_status()
                http: list[float] = []
                for b in bodies:
                    c.post("/v1/retrieve", json=b).raise_for_status()
                for _ in range(args.rounds):
                    for b in bodies:
                        s = time.perf_counter()
                        c.post("/v1/retrieve", json=b).raise_for_status()
                        http.append((time.perf_counter() - s) * 1000)
            results["http_cached_phrases"] = summary(http)
        finally:
            server.stop()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
