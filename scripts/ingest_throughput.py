"""Ingest throughput with real embeddings: memory units of ``--words`` words per second into a real
``hrt serve`` (embedded, a fresh file), posted as NDJSON batches while a light read load runs.

    PYTHONPATH=. python scripts/ingest_throughput.py --units 1000 --words 150 --label fp32
    HRT_EMBEDDING_QUANTIZE=int8 PYTHONPATH=. python scripts/ingest_throughput.py --label int8

The records are those of ``scripts/stall_probe.py`` (one concept per 20 units, each unit mentioning
two); ``--sentences`` ends every 12th word with a full stop, so each unit is also embedded sentence
by sentence (its passages, at most 8). Batches of ``--batch`` units are posted one after another;
beside them, one client retrieves for a small seeded user every ``--read-interval`` seconds. Units
per second: the units over the seconds from the first post to the last answer. The server gets the
environment (``HRT_EMBEDDING_QUANTIZE``, ``HRT_EMBEDDING_THREADS``...).

``--intake N`` measures instead, in process, what the intake stage pays on a cache miss: 3 fresh
key phrases embedded per request, fp32 and int8 alternated N times, p50 and p95 of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stall_probe import Server, ndjson, records


def with_sentences(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every 12th word of each unit's content ends a sentence."""
    for row in rows:
        if row["kind"] == "memory_unit":
            words = row["content"].split()
            row["content"] = " ".join(w + "." if (i + 1) % 12 == 0 else w for i, w in enumerate(words)) + "."
    return rows


def measure(base: str, units: int, words: int, batch: int, sentences: bool, read_interval: float) -> dict[str, Any]:
    nd = {"content-type": "application/x-ndjson"}
    httpx.post(f"{base}/v1/ingest", content=ndjson(records("tp-small", 200, 40, 1)), headers=nd, timeout=600)
    small = {"user_id": "tp-small", "key_phrases": ["project timeline"], "as_of": "2025-12-31T00:00:00Z"}
    httpx.post(f"{base}/v1/retrieve", json=small, timeout=60).raise_for_status()  # caches loaded
    rows = records("tp-big", units, words, 2)
    if sentences:
        rows = with_sentences(rows)
    # each batch: its units, with the concepts and relations that follow them in ``rows``
    bodies: list[bytes] = []
    concepts = [r for r in rows if r["kind"] == "concept"]
    rest = [r for r in rows if r["kind"] != "concept"]
    current: list[dict[str, Any]] = list(concepts)
    count = 0
    for r in rest:
        if r["kind"] == "memory_unit":
            if count and count % batch == 0:
                bodies.append(ndjson(current))
                current = []
            count += 1
        current.append(r)
    bodies.append(ndjson(current))

    done = threading.Event()
    reads: list[float] = []
    statuses: list[int] = []

    def read_load() -> None:
        with httpx.Client(timeout=60) as client:
            while not done.is_set():
                t = time.perf_counter()
                statuses.append(client.post(f"{base}/v1/retrieve", json=small).status_code)
                reads.append(time.perf_counter() - t)
                done.wait(read_interval)

    reader = threading.Thread(target=read_load)
    reader.start()
    posts: list[float] = []
    started = time.perf_counter()
    try:
        with httpx.Client(timeout=3600) as client:
            for body in bodies:
                t = time.perf_counter()
                client.post(f"{base}/v1/ingest", content=body, headers=nd).raise_for_status()
                posts.append(time.perf_counter() - t)
    finally:
        seconds = time.perf_counter() - started
        done.set()
        reader.join()
    ordered = sorted(reads)
    return {
        "units": units,
        "words": words,
        "sentences": sentences,
        "batch": batch,
        "seconds": round(seconds, 1),
        "units_per_s": round(units / seconds, 1),
        "post_p50_s": round(statistics.median(posts), 2),
        "reads": len(reads),
        "read_p50_ms": round(ordered[len(ordered) // 2] * 1000, 1) if ordered else None,
        "read_p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))] * 1000, 1) if ordered else None,
        "reads_not_200": sum(1 for s in statuses if s != 200),
    }


def intake(requests: int) -> dict[str, Any]:
    import random

    from stall_probe import WORDS

    from hrt.onnx_embedder import OnnxEmbedder

    variants = {"fp32": OnnxEmbedder(threads=2), "int8": OnnxEmbedder(threads=2, quantize="int8")}
    rng = random.Random(7)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(requests):
        phrases = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))) + f" {i}-{k}" for k in range(3)]
        for name in sorted(variants, reverse=bool(i % 2)):  # alternately first
            t = time.perf_counter()
            variants[name].embed(phrases)
            times[name].append((time.perf_counter() - t) * 1000)
    return {
        name: {"p50_ms": round(statistics.median(v), 2), "p95_ms": round(sorted(v)[int(0.95 * (len(v) - 1))], 2)}
        for name, v in times.items()
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=1000)
    ap.add_argument("--words", type=int, default=150)
    ap.add_argument("--batch", type=int, default=100, help="memory units per POST")
    ap.add_argument("--sentences", action="store_true", help="units of 12-word sentences (embedded per sentence too)")
    ap.add_argument("--read-interval", type=float, default=0.2, help="seconds between the light load's reads")
    ap.add_argument("--label", default="")
    ap.add_argument("--out", type=Path, default=Path("bench-results/ingest-throughput.json"))
    ap.add_argument("--intake", type=int, default=0, help="only the intake A/B, this many requests")
    args = ap.parse_args()
    if args.intake:
        print(json.dumps({"intake_3_phrases": intake(args.intake)}))
        return 0
    with tempfile.TemporaryDirectory(prefix="hrt-ingest-") as tmp:
        server = Server(Path(tmp) / "tp.db", Path(tmp) / "server.log", env={})
        try:
            ready = httpx.get(f"{server.base}/readyz", timeout=10).json()
            result = measure(server.base, args.units, args.words, args.batch, args.sentences, args.read_interval)
        finally:
            server.stop()
    result = {
        "label": args.label,
        "embedder": ready.get("embedder"),
        "code": os.environ.get("PYTHONPATH", ""),
        **result,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    previous: list[Any] = json.loads(args.out.read_text()) if args.out.exists() else []
    args.out.write_text(json.dumps([*previous, result], indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
