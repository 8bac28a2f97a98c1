"""Does one request stall the others? Latency of ``/healthz`` and of small retrievals while a large
NDJSON ingest and maximal retrievals run against a real ``hrt serve`` (embedded, a fresh file).

    PYTHONPATH=. python scripts/stall_probe.py --units 8000 --words 150 --out bench-results/stall-probe.json

The server runs with ``HRT_AUTH=off`` on a loopback port. Before the ingest, a small user (the
target of the small retrievals and of the maximal ones) is seeded. Then, at once: one ingest of
``--units`` memory units of ``--words`` words each (with concepts and mentions) for a second user;
a loop of maximal retrievals (20 key phrases, depth 3, every limit at its maximum); and a poller
alternating ``GET /healthz`` and a small retrieval, each with a ``--timeout`` client timeout, until
the ingest answers. A request that times out counts with the timeout as its latency.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

WORDS = [
    "project",
    "phoenix",
    "timeline",
    "budget",
    "review",
    "design",
    "database",
    "migration",
    "latency",
    "memory",
    "graph",
    "vector",
    "search",
    "deploy",
    "release",
    "customer",
    "support",
    "invoice",
    "meeting",
    "planning",
    "roadmap",
    "hiring",
    "onboarding",
    "security",
    "audit",
    "backup",
    "restore",
    "incident",
    "postmortem",
    "kubernetes",
    "postgres",
    "neo4j",
    "weaviate",
    "python",
    "testing",
    "benchmark",
    "feature",
    "request",
    "priority",
    "quarter",
    "revenue",
    "marketing",
    "launch",
    "partner",
    "contract",
    "travel",
    "conference",
    "talk",
    "paper",
    "draft",
    "feedback",
    "mentor",
    "team",
    "bandwidth",
    "sprint",
    "retro",
    "goal",
    "metric",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def records(user: str, units: int, words: int, seed: int) -> list[dict[str, Any]]:
    """``units`` memory units of ``words`` words, one concept per 20 units, each unit mentioning two."""
    rng = random.Random(seed)
    concepts = max(2, units // 20)
    out: list[dict[str, Any]] = [
        {"kind": "concept", "user_id": user, "id": f"{user}-c{i}", "name": f"{WORDS[i % len(WORDS)]} {i}"}
        for i in range(concepts)
    ]
    for i in range(units):
        day = 1 + i % 28
        out.append(
            {
                "kind": "memory_unit",
                "user_id": user,
                "muid": f"{user}-m{i}",
                "title": f"note {i}",
                "content": " ".join(rng.choice(WORDS) for _ in range(words)),
                "creation_ts": f"2025-06-{day:02d}T10:00:00Z",
            }
        )
        for c in (i % concepts, (i * 7 + 3) % concepts):
            out.append(
                {
                    "kind": "relation",
                    "user_id": user,
                    "type": "MENTIONS",
                    "source": f"{user}-m{i}",
                    "target": f"{user}-c{c}",
                }
            )
    return out


def ndjson(rows: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(r) for r in rows) + "\n").encode()


def summary(latencies: list[float], statuses: list[int], bound_s: float) -> dict[str, Any]:
    ordered = sorted(latencies)

    def pct(p: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000, 1) if ordered else None

    return {
        "count": len(ordered),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "max_ms": round(ordered[-1] * 1000, 1) if ordered else None,
        "over_bound": sum(1 for x in ordered if x > bound_s),
        "not_200": sum(1 for s in statuses if s != 200),
    }


class Server:
    def __init__(self, db: Path, log: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        full = {**os.environ, "HRT_DB_PATH": str(db), "HRT_AUTH": "off", "HRT_LOG_LEVEL": "WARNING", **env}
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hrt.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=full,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"hrt serve exited: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise SystemExit("hrt serve was not ready within 180 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def probe(base: str, units: int, words: int, timeout_s: float, bound_s: float) -> dict[str, Any]:
    small_user, big_user = "probe-small", "probe-big"
    nd = {"content-type": "application/x-ndjson"}
    seed = httpx.post(f"{base}/v1/ingest", content=ndjson(records(small_user, 200, 40, 1)), headers=nd, timeout=600)
    seed.raise_for_status()
    small = {"user_id": small_user, "key_phrases": ["project timeline"], "as_of": "2025-12-31T00:00:00Z"}
    maximal = {
        "user_id": small_user,
        "key_phrases": [f"{WORDS[i]} {WORDS[i + 20]}" for i in range(20)],
        "max_depth": 3,
        "limits": {"memory_units": 50, "concepts": 50, "artifacts": 50},
        "as_of": "2025-12-31T00:00:00Z",
    }
    httpx.post(f"{base}/v1/retrieve", json=small, timeout=60).raise_for_status()  # caches loaded

    body = ndjson(records(big_user, units, words, 2))
    ingest: dict[str, Any] = {"units": units, "words": words, "bytes": len(body)}
    done = threading.Event()

    def run_ingest() -> None:
        started = time.perf_counter()
        try:
            r = httpx.post(f"{base}/v1/ingest", content=body, headers=nd, timeout=3600)
            ingest.update(status=r.status_code, upserted=r.json().get("upserted") if r.status_code == 200 else None)
        except httpx.HTTPError as exc:
            ingest.update(status=None, error=str(exc))
        ingest["seconds"] = round(time.perf_counter() - started, 1)
        done.set()

    max_lat: list[float] = []
    max_status: list[int] = []

    def run_maximal() -> None:
        with httpx.Client(timeout=120) as client:
            while not done.is_set():
                started = time.perf_counter()
                try:
                    max_status.append(client.post(f"{base}/v1/retrieve", json=maximal).status_code)
                except httpx.HTTPError:
                    max_status.append(0)
                max_lat.append(time.perf_counter() - started)

    health_lat: list[float] = []
    health_status: list[int] = []
    small_lat: list[float] = []
    small_status: list[int] = []
    threads = [threading.Thread(target=run_ingest), threading.Thread(target=run_maximal)]
    for t in threads:
        t.start()
    with httpx.Client(timeout=timeout_s) as client:
        while not done.is_set():
            for method, url, kwargs, lat, status in (
                ("GET", f"{base}/healthz", {}, health_lat, health_status),
                ("POST", f"{base}/v1/retrieve", {"json": small}, small_lat, small_status),
            ):
                started = time.perf_counter()
                try:
                    status.append(client.request(method, url, **kwargs).status_code)  # type: ignore[arg-type]
                    lat.append(time.perf_counter() - started)
                except httpx.TimeoutException:
                    status.append(0)
                    lat.append(timeout_s)
            time.sleep(0.1)
    for t in threads:
        t.join()
    return {
        "ingest": ingest,
        "bound_ms": bound_s * 1000,
        "client_timeout_ms": timeout_s * 1000,
        "healthz": summary(health_lat, health_status, bound_s),
        "small_retrieve": summary(small_lat, small_status, bound_s),
        "maximal_retrieve": summary(max_lat, max_status, bound_s),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--units", type=int, default=8000)
    ap.add_argument("--words", type=int, default=150)
    ap.add_argument("--timeout", type=float, default=10.0, help="client timeout of each probe request (s)")
    ap.add_argument("--bound", type=float, default=2.0, help="latency counted as a stall above it (s)")
    ap.add_argument("--label", default="", help="stored in the output (e.g. before/after)")
    ap.add_argument("--out", type=Path, default=Path("bench-results/stall-probe.json"))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hrt-stall-") as tmp:
        server = Server(Path(tmp) / "probe.db", Path(tmp) / "server.log", env={})
        try:
            result = probe(server.base, args.units, args.words, args.timeout, args.bound)
        finally:
            server.stop()
    result = {"label": args.label, "code": os.environ.get("PYTHONPATH", ""), **result}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    previous: list[Any] = []
    if args.out.exists():
        loaded = json.loads(args.out.read_text())
        previous = loaded if isinstance(loaded, list) else [loaded]
    previous = [p for p in previous if p.get("label") != args.label]
    args.out.write_text(json.dumps([*previous, result], indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
