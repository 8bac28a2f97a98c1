"""A bounded soak: several retrieving clients and one ingesting client against a real ``hrt serve``.

    python scripts/soak.py --deployment embedded --minutes 10
    python scripts/soak.py --deployment services --minutes 10     # starts the dev stack (hrt dev)

A measurement, not a test. The server gets the bundled sample graph, then for ``--minutes``
(stopping earlier at ``--max-requests``) ``--clients`` threads each send retrievals back to back
(seeded choice of user and phrases, pinned ``as_of``) while one more thread ingests a batch of
memory units every second (the ids of ``--cycle`` batches in turn, so the data stops growing after
the first cycle) and deletes an earlier batch's first entity every tenth batch. Every
five seconds the resident memory of every process (HRT's server, and in the services deployment
PostgreSQL, Neo4j and Weaviate with their children) is read from ``/proc``. Writes per minute:
requests, errors, p50/p95 of retrievals and ingests, RSS per process, to
``OUT/soak-DEPLOYMENT.json`` and a chart ``OUT/soak-DEPLOYMENT.png`` (with matplotlib). It ends by
checking the store: it holds exactly what the acknowledged writes left.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from hrt.bench.host import tree_rss_mb
from hrt.bench.server import Server
from hrt.bench.stats import pct
from hrt.bench.targets import embedded_target, services_target
from hrt.cli import sample_data_path

ROOT = Path(__file__).resolve().parents[1]
AS_OF = "2026-01-01T00:00:00Z"
QUERIES = {
    "u-maya": ["Project Phoenix timeline", "team bandwidth", "pricing decision", "SOC 2 audit", "hiring plan"],
    "u-tom": ["Atlas migration slipped", "Postgres migration", "on-call incident", "data platform planning"],
    "u-sara": ["deep work", "half marathon training", "onboarding flow usability", "design review"],
}
WORDS = tuple(
    [
        "roadmap",
        "budget",
        "launch",
        "review",
        "incident",
        "customer",
        "latency",
        "migration",
        "design",
        "hiring",
        "offsite",
        "metrics",
        "contract",
        "renewal",
        "feedback",
        "security",
        "audit",
        "pricing",
        "experiment",
        "retention",
        "onboarding",
        "release",
    ]
)


@dataclass
class Log:
    """What the clients saw: (seconds since start, milliseconds, status) per request."""

    retrievals: list[tuple[float, float, int]] = field(default_factory=list)
    ingests: list[tuple[float, float, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    rss: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def retriever(base: str, headers: dict[str, str], seed: int, stop: threading.Event, t0: float, log: Log) -> None:
    rng = random.Random(seed)
    users = sorted(QUERIES)
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        while not stop.is_set():
            user = rng.choice(users)
            phrases = rng.sample(QUERIES[user], k=rng.randint(1, 3))
            body = {"user_id": user, "key_phrases": phrases, "as_of": AS_OF}
            started = time.perf_counter()
            try:
                status = client.post("/v1/retrieve", json=body).status_code
            except httpx.HTTPError as exc:
                status = 0
                with log.lock:
                    log.errors.append(f"retrieve: {type(exc).__name__}")
            ms = (time.perf_counter() - started) * 1000
            with log.lock:
                log.retrievals.append((time.perf_counter() - t0, ms, status))
                if status != 200 and status != 0:
                    log.errors.append(f"retrieve: HTTP {status}")


def batch(n: int, size: int) -> list[dict[str, Any]]:
    rng = random.Random(n)
    return [
        {
            "kind": "memory_unit",
            "user_id": "u-soak",
            "muid": f"soak-{n}-{i}",
            "title": f"Soak note {n}.{i}",
            "content": " ".join(rng.choice(WORDS) for _ in range(60)),
            "creation_ts": f"2025-{1 + n % 12:02d}-{1 + i % 28:02d}T09:00:00Z",
        }
        for i in range(size)
    ]


def ingester(
    base: str,
    headers: dict[str, str],
    size: int,
    cycle: int,
    stop: threading.Event,
    t0: float,
    log: Log,
    present: set[str],
) -> None:
    """A batch a second, upserting the ids of batch ``n % cycle`` (so the data stops growing after
    the first cycle and memory can be watched for leaks), and every tenth second a delete of an
    earlier batch's first memory. ``present`` tracks the memory units every acknowledged write
    leaves in the store."""
    n = 0
    with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
        while not stop.is_set():
            started = time.perf_counter()
            records = batch(n % cycle, size)
            try:
                status = client.post("/v1/ingest", json={"records": records}).status_code
                if status == 200:
                    present.update(str(r["muid"]) for r in records)
                if n % 10 == 9:  # a delete of an earlier batch's first memory
                    muid = f"soak-{(n - 5) % cycle}-0"
                    gone = client.delete(f"/v1/users/u-soak/entities/memory_unit/{muid}").status_code
                    if gone == 200:
                        present.discard(muid)
                    status = status if gone == 200 else gone
            except httpx.HTTPError as exc:
                status = 0
                with log.lock:
                    log.errors.append(f"ingest: {type(exc).__name__}")
            ms = (time.perf_counter() - started) * 1000
            with log.lock:
                log.ingests.append((time.perf_counter() - t0, ms, status))
                if status not in (200, 0):
                    log.errors.append(f"ingest: HTTP {status}")
            n += 1
            stop.wait(max(0.0, 1.0 - (time.perf_counter() - started)))


def monitor(pids: dict[str, int], stop: threading.Event, t0: float, log: Log) -> None:
    while not stop.is_set():
        sample = {name: tree_rss_mb(pid) for name, pid in pids.items()}
        with log.lock:
            log.rss.append((time.perf_counter() - t0, sample))
        stop.wait(5.0)


def per_minute(log: Log, minutes: int) -> list[dict[str, Any]]:
    rows = []
    for m in range(minutes):
        lo, hi = m * 60.0, (m + 1) * 60.0
        ret = [(ms, st) for t, ms, st in log.retrievals if lo <= t < hi]
        ing = [(ms, st) for t, ms, st in log.ingests if lo <= t < hi]
        rss: dict[str, float] = defaultdict(float)
        for t, sample in log.rss:
            if lo <= t < hi:
                for name, mb in sample.items():
                    rss[name] = max(rss[name], mb)
        if not ret and not ing:
            break
        ok = [ms for ms, st in ret if st == 200]
        rows.append(
            {
                "minute": m + 1,
                "retrievals": len(ret),
                "retrieval_errors": sum(st != 200 for _, st in ret),
                "retrieval_p50_ms": round(pct(ok, 0.5), 1) if ok else None,
                "retrieval_p95_ms": round(pct(ok, 0.95), 1) if ok else None,
                "ingests": len(ing),
                "ingest_errors": sum(st != 200 for _, st in ing),
                "ingest_p50_ms": round(pct([ms for ms, _ in ing], 0.5), 1) if ing else None,
                "rss_mb": dict(sorted(rss.items())),
            }
        )
    return rows


def final_check(base: str, headers: dict[str, str], present: set[str]) -> dict[str, Any]:
    """The store holds exactly the memory units the acknowledged writes left: every upsert there,
    every delete gone."""
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        stats = client.get("/v1/users/u-soak/stats").json()
    return {
        "memory_units": stats.get("memory_unit"),
        "expected": len(present),
        "ok": stats.get("memory_unit") == len(present),
    }


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    minutes = [r["minute"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    a.plot(minutes, [r["retrieval_p50_ms"] for r in rows], marker="o", label="retrieval p50")
    a.plot(minutes, [r["retrieval_p95_ms"] for r in rows], marker="o", label="retrieval p95")
    a.set_xlabel("minute")
    a.set_ylabel("ms")
    a.legend()
    a.set_title("latency per minute")
    for name in sorted(rows[0]["rss_mb"]) if rows else []:
        b.plot(minutes, [r["rss_mb"].get(name) for r in rows], marker="o", label=name)
    b.set_xlabel("minute")
    b.set_ylabel("RSS MB (max in the minute)")
    b.legend()
    b.set_title("memory per process")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deployment", choices=["embedded", "services"], default="embedded")
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-requests", type=int, default=200_000, help="stop earlier once this many retrievals ran")
    ap.add_argument("--batch", type=int, default=20, help="memory units per ingest batch (one batch a second)")
    ap.add_argument("--cycle", type=int, default=60, help="distinct batches: after that many, ids are upserted again")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results" / "soak")
    ap.add_argument("--stack-dir", type=Path, default=None, help="a dev stack to reuse (services)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hrt-soak-"))
    work.chmod(0o755)  # the dev stack's PostgreSQL runs as its own user and must traverse it
    stack_ctx = None
    if args.deployment == "services":
        from hrt import devstack

        stack_ctx = devstack.running(args.stack_dir or work / "stack", devstack.SERVICES)
        stack = stack_ctx.__enter__()
        target = services_target(stack, "soak")
    else:
        target = embedded_target(work, "soak")
    server = Server(target.env, work / "server.log", None)
    log = Log()
    stop = threading.Event()
    present: set[str] = set()
    try:
        with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=300) as c:
            for user in (*QUERIES, "u-soak"):
                c.delete(f"/v1/users/{user}")
            r = c.post(
                "/v1/ingest", content=sample_data_path().read_bytes(), headers={"content-type": "application/x-ndjson"}
            )
            r.raise_for_status()
        pids = {"hrt": server.proc.pid, **target.service_pids}
        t0 = time.perf_counter()
        threads = [
            threading.Thread(target=monitor, args=(pids, stop, t0, log), daemon=True),
            threading.Thread(
                target=ingester,
                args=(server.base_url, server.headers, args.batch, args.cycle, stop, t0, log, present),
                daemon=True,
            ),
        ] + [
            threading.Thread(target=retriever, args=(server.base_url, server.headers, i, stop, t0, log), daemon=True)
            for i in range(args.clients)
        ]
        for t in threads:
            t.start()
        deadline = t0 + args.minutes * 60
        while time.perf_counter() < deadline and len(log.retrievals) < args.max_requests:
            time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(timeout=120)
        elapsed = time.perf_counter() - t0
        check = final_check(server.base_url, server.headers, present)
    finally:
        stop.set()
        server.stop()
        if stack_ctx is not None:
            stack_ctx.__exit__(None, None, None)
        shutil.rmtree(work, ignore_errors=True)
    rows = per_minute(log, int(args.minutes) + 1)
    result = {
        "command": "python scripts/soak.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "deployment": args.deployment,
        "clients": args.clients,
        "seconds": round(elapsed, 1),
        "retrievals": len(log.retrievals),
        "ingests": len(log.ingests),
        "errors": len(log.errors),
        "first_errors": log.errors[:20],
        "final_check": check,
        "per_minute": rows,
    }
    out = args.out / f"soak-{args.deployment}.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    png = args.out / f"soak-{args.deployment}.png"
    drew = plot(rows, png, f"hrt soak, {args.deployment}: {args.clients} retrieving clients + 1 ingesting")
    print(json.dumps({k: v for k, v in result.items() if k != "per_minute"}, indent=2))
    print(f"wrote {out}" + (f" and {png}" if drew else ""))
    return 0 if not log.errors and check["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
