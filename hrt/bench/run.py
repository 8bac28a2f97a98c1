"""``hrt bench``: speed at scale, measured over HTTP against a real ``hrt serve``.

    hrt bench [--sizes 10k,100k,1m] [--deployments embedded,services] [--out bench-results]
              [--requests 200] [--concurrency 8] [--vectors real|composed] [--quick] [--peer]

For every size and deployment, on the same generated data (:mod:`hrt.bench.synth`), in one run:

1. **Ingest** through the Python API (``HRTService.ingest``, batches of ``--batch-size``
   records) in a child process: entities per second (embedding and writing, split), and that
   process's peak RSS. The services deployment writes PostgreSQL and projects into Neo4j and
   Weaviate before the batch returns, so its figure includes the projection.
2. **Serve**: a real ``hrt serve`` process (uvicorn) on the store; the time to ``/readyz``.
3. **Warm up**: the first request (cold caches: the user's vector matrix and adjacency are loaded
   on first use) is reported on its own, then ``--warmup`` more requests.
4. **Sequential**: ``--requests`` requests, one at a time, of 3 key phrases never seen before
   (the server's phrase-embedding cache never answers), depth 2, default limits, no rerank, a
   pinned ``as_of``: end-to-end p50/p95/p99 at the client, and per stage from ``Server-Timing``.
5. **Concurrent**: closed loops of 1, 2, 4, ... up to ``--concurrency`` clients, ``--requests``
   requests per level: throughput and latency per level; the *sustainable throughput* is the
   highest throughput of a level whose p95 stays within twice the sequential p95.
6. **Memory**: the server's peak RSS (``VmHWM``), and for the services deployment the RSS of the
   PostgreSQL, Neo4j and Weaviate processes.

``--vectors composed`` (alias ``--fake-vectors``) replaces the embedding model FOR INGEST ONLY:
each entity's vector is the normalised sum of the real model's vectors of the vocabulary words in
its text (computed once for the generator's ~500 vocabulary words), so 1M texts need no model
pass; similarities to real query phrases are of the same kind, somewhat lower (phrases match a
little less often than with real vectors; docs/bench.md compares them). Query phrases are always
embedded by the server's real model. Results say which vectors each run used.

Outputs in ``--out``: ``results.json`` (every figure, machine, versions, the command),
``latency_vs_size.png`` and ``README.md`` (tables). A failed deployment (a store that does not
start, an adapter that raises) is recorded with its error and the run goes on with the others.

Benchmarks are commands, not tests: nothing here asserts a speed; goals are reported as met or not.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import importlib
import importlib.util
import json
import logging
import math
import multiprocessing
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from hrt.bench.synth import GraphStats, SynthConfig, batches, key_phrases, vocabulary
from hrt.devstack import free_port
from hrt.text import words

log = logging.getLogger("hrt.bench")

STAGES = ("intake", "grounding", "expansion", "scoring", "hydration", "rerank", "selection", "assembly", "total")
# the processes whose CPU per request a run reports: the server, then the stores of services
CPU_PROCESSES = ("hrt", "postgres", "neo4j", "weaviate")
SCHEMA = "hrt-bench/1"

# The goals (2-core machine). (deployment, entities) -> metric -> bound.
GOALS: dict[tuple[str, int], dict[str, float]] = {
    ("embedded", 100_000): {"p50_ms": 20.0, "p95_ms": 40.0, "sustainable_rps_min": 50.0, "server_peak_rss_mb": 1228.8},
    ("embedded", 1_000_000): {"p50_ms": 35.0, "p95_ms": 70.0},
    ("services", 100_000): {"p50_ms": 35.0, "p95_ms": 70.0},
}


def parse_size(text: str) -> int:
    t = text.strip().lower().replace("_", "")
    mult = 1
    if t.endswith("k"):
        mult, t = 1_000, t[:-1]
    elif t.endswith("m"):
        mult, t = 1_000_000, t[:-1]
    value = float(t) * mult
    if value < 10 or value != int(value):
        raise argparse.ArgumentTypeError(f"bad size {text!r}: use e.g. 300, 10k, 100k, 1m")
    return int(value)


def size_label(n: int) -> str:
    if n >= 1_000_000 and n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    if n >= 1_000 and n % 1_000 == 0:
        return f"{n // 1_000}k"
    return str(n)


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 1])."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def summary(ms: Sequence[float]) -> dict[str, float]:
    if not ms:
        return {"n": 0}
    return {
        "n": len(ms),
        "p50_ms": round(pct(ms, 0.50), 2),
        "p95_ms": round(pct(ms, 0.95), 2),
        "p99_ms": round(pct(ms, 0.99), 2),
        "mean_ms": round(statistics.fmean(ms), 2),
        "max_ms": round(max(ms), 2),
    }


# ------------------------------------------------------------------------------------------
# machine, versions, memory
# ------------------------------------------------------------------------------------------


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "os": platform.platform(),
        "python": platform.python_version(),
        "loadavg_at_start": list(os.getloadavg()),
        "calibration_ms": calibration_ms(),
    }


def calibration_ms(rounds: int = 5) -> dict[str, float]:
    """Best of ``rounds`` timings of a fixed pure-Python loop and a fixed numpy product: the same
    code on a slower (or busier) host takes longer, so runs from different days can be compared."""

    def best(fn: Any) -> float:
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1000)
        return round(min(times), 2)

    def python_loop() -> None:
        total = 0
        for i in range(1_000_000):
            total += i * i

    a = np.random.default_rng(0).standard_normal((384, 4096), dtype=np.float32)
    return {"python_loop_1m": best(python_loop), "numpy_matmul_384x4096x384": best(lambda: a @ a.T)}


def versions() -> dict[str, Any]:
    from hrt import devstack

    out: dict[str, Any] = {
        d: _version(d)
        for d in (
            "hrt",
            "numpy",
            "torch",
            "sentence-transformers",
            "onnxruntime",
            "fastapi",
            "uvicorn",
            "httpx",
            "psycopg",
            "neo4j",
            "weaviate-client",
            "neo4j-graphrag",
        )
    }
    out["sqlite"] = __import__("sqlite3").sqlite_version
    out["servers"] = {
        "postgresql": devstack.POSTGRES_MAJOR,
        "neo4j": devstack.NEO4J_VERSION,
        "weaviate": devstack.WEAVIATE_VERSION,
    }
    return out


def proc_status_kb(pid: int, key: str) -> int | None:
    """A ``/proc/<pid>/status`` value in kB (``VmRSS``, ``VmHWM``), None when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def process_tree(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def tree_rss_mb(pid: int) -> float:
    return round(sum(proc_status_kb(p, "VmRSS") or 0 for p in process_tree(pid)) / 1024, 1)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, every thread) that a process tree has used so far, children it
    has reaped included (a PostgreSQL backend that exits moves its time into the postmaster's)."""
    ticks = 0
    for p in process_tree(pid):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def wait_for_quiet(
    pids: dict[str, int], idle_cores: float = 0.1, window_s: float = 2.0, timeout_s: float = 180.0
) -> tuple[float, bool]:
    """Wait until these process trees together use under ``idle_cores`` of CPU over ``window_s``:
    after a bulk ingest the stores compact and index in the background for a minute or more, and a
    measurement then would count that work as the requests'. Returns the seconds waited and whether
    they settled within ``timeout_s``."""
    t0 = time.monotonic()
    last = sum(tree_cpu_s(pid) for pid in pids.values())
    while time.monotonic() - t0 < timeout_s:
        time.sleep(window_s)
        now = sum(tree_cpu_s(pid) for pid in pids.values())
        if now - last < idle_cores * window_s:
            return round(time.monotonic() - t0, 1), True
        last = now
    return round(time.monotonic() - t0, 1), False


def cpu_ms_per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """Each process's CPU per request between two ``tree_cpu_s`` readings, and their ``total``:
    on ``os.cpu_count()`` cores, ``total / cores`` is the least wall time a request can take even if
    every process's share ran in parallel (the floor under the sequential p50)."""
    out = {name: round((after[name] - before[name]) * 1000 / max(requests, 1), 1) for name in before}
    out["total"] = round(sum(out.values()), 1)
    return out


# ------------------------------------------------------------------------------------------
# embedders for ingest
# ------------------------------------------------------------------------------------------


class ComposedEmbedder:
    """FOR INGEST ONLY (``--vectors composed``): a text's vector is the L2-normalised sum of the
    real model's vectors of its vocabulary words (words outside the vocabulary are ignored; a text
    with none gets a deterministic pseudo-random unit vector). Deterministic from the text."""

    def __init__(self, inner: Any, terms: Sequence[str]) -> None:
        vocab = sorted({w for term in terms for w in words(term)})
        self._index = {w: i for i, w in enumerate(vocab)}
        self._vectors = np.asarray(inner.embed(vocab), dtype=np.float32)
        self.dim = int(inner.dim)
        self.name = f"composed from {inner.name}"

    def embed(self, texts: Sequence[str]) -> Any:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            idx = [i for w in words(text) if (i := self._index.get(w)) is not None]
            if idx:
                v = self._vectors[idx].sum(axis=0)
            else:
                seed = int.from_bytes(text.encode()[:32].ljust(8, b"\0")[:8], "little")
                v = np.random.default_rng(seed).standard_normal(self.dim).astype(np.float32)
            out[row] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out


class TimedEmbedder:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dim = inner.dim
        self.name = inner.name
        self.seconds = 0.0
        self.texts = 0

    def embed(self, texts: Sequence[str]) -> Any:
        t = time.perf_counter()
        out = self.inner.embed(texts)
        self.seconds += time.perf_counter() - t
        self.texts += len(texts)
        return out


def import_object(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def make_ingest_embedder(vectors: str) -> Any:
    """``real``: the configured model; ``composed``: see :class:`ComposedEmbedder`; anything with a
    colon: ``module:Class`` built without arguments (tests only, and the server uses it too)."""
    if ":" in vectors:
        return import_object(vectors)()
    from hrt.config import Settings
    from hrt.service import load_embedder

    real = load_embedder(Settings())
    if vectors == "real":
        return real
    return ComposedEmbedder(real, vocabulary())


# ------------------------------------------------------------------------------------------
# deployments
# ------------------------------------------------------------------------------------------


@dataclass
class Target:
    """Where one (deployment, size) lives: the settings overrides for ingest and the server's env."""

    deployment: str
    settings: dict[str, Any]
    env: dict[str, str]
    service_pids: dict[str, int] = field(default_factory=dict)


def embedded_target(work: Path, label: str, reuse: bool = False) -> Target:
    db = work / f"embedded-{label}.db"
    if not reuse:
        for suffix in ("", "-wal", "-shm"):
            Path(str(db) + suffix).unlink(missing_ok=True)
        shutil.rmtree(Path(str(db) + ".ann"), ignore_errors=True)
    stores = {"record_store": "embedded", "graph_store": "embedded", "vector_index": "embedded"}
    env = {f"HRT_{k.upper()}": v for k, v in stores.items()}
    return Target("embedded", {"db_path": str(db), **stores}, {"HRT_DB_PATH": str(db), **env})


def services_target(stack: Any, label: str, create: bool = True) -> Target:
    """The services deployment of one size: its own PostgreSQL database and Weaviate collection
    (made afresh with ``create``), the shared Neo4j (each size is its own user)."""
    import psycopg

    from hrt.stores.postgres_migrate import migrate

    name = f"hrt_bench_{label}"
    dsn = stack.postgres_dsn.replace("dbname=postgres", f"dbname={name}")
    if create:
        with psycopg.connect(stack.postgres_dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
        migrate(dsn)
    collection = f"HRTBench{label.upper()}"
    settings = {
        "record_store": "postgres",
        "graph_store": "neo4j",
        "vector_index": "weaviate",
        "postgres_dsn": dsn,
        "neo4j_uri": stack.neo4j_uri,
        "neo4j_user": stack.neo4j_user,
        "neo4j_password": stack.neo4j_password,  # the dev stack runs every store with auth on
        "weaviate_host": "127.0.0.1",
        "weaviate_http_port": stack.weaviate_http_port,
        "weaviate_grpc_port": stack.weaviate_grpc_port,
        "weaviate_api_key": stack.weaviate_api_key,
        "weaviate_collection": collection,
    }
    env = {**stack.env(), "HRT_POSTGRES_DSN": dsn, "HRT_WEAVIATE_COLLECTION": collection}
    env.update({"HRT_RECORD_STORE": "postgres", "HRT_GRAPH_STORE": "neo4j", "HRT_VECTOR_INDEX": "weaviate"})
    pids = {n: s.pid for n, s in stack.services.items()}
    return Target("services", settings, env, pids)


# ------------------------------------------------------------------------------------------
# ingest (in a child process: its own peak RSS, nothing left behind in the harness)
# ------------------------------------------------------------------------------------------


def _ingest_child(
    cfg: dict[str, Any], settings: dict[str, Any], vectors: str, batch_size: int, parent: int | None = None
) -> dict[str, Any]:
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    embedder = TimedEmbedder(make_ingest_embedder(vectors))
    setup_s = time.perf_counter() - t0
    try:
        return asyncio.run(_ingest(SynthConfig(**cfg), settings, embedder, batch_size, setup_s, parent))
    except _Orphaned as exc:
        # the stores are closed (the ingest's finally ran); end the pool's worker process too, or
        # it would wait forever for work from a parent that is gone
        print(f"hrt bench ingest: {exc}", file=sys.stderr, flush=True)
        os._exit(3)


class _Orphaned(Exception):
    pass


def orphaned(parent: int | None) -> bool:
    """Whether the harness that started this ingest child is gone (the child was re-parented)."""
    return parent is not None and os.getppid() != parent


async def _ingest(
    cfg: SynthConfig,
    overrides: dict[str, Any],
    embedder: TimedEmbedder,
    batch_size: int,
    setup_s: float,
    parent: int | None = None,
) -> dict[str, Any]:
    from hrt.config import Settings
    from hrt.ingest import parse_record
    from hrt.service import HRTService

    settings = Settings(**overrides)
    svc = await HRTService(settings, embedder=embedder).start()
    if settings.record_store != "embedded":  # the database is new; clear projections of an earlier run
        await svc.graph.delete_user(cfg.user_id)
        await svc.vectors.delete_user(cfg.user_id)
    stats = GraphStats()
    n_records = 0
    parse_s = 0.0
    t0 = time.perf_counter()
    try:
        for raw in batches(cfg, batch_size, stats):
            # `hrt bench` killed (not by Ctrl-C, which reaches the whole process group): stop at the
            # next batch instead of writing into the stores for the hour a 1M ingest takes
            if orphaned(parent):
                raise _Orphaned(f"hrt bench (pid {parent}) is gone: ingest stopped after {n_records} records")
            t = time.perf_counter()
            records = [parse_record(obj, f"record {n_records + i}") for i, obj in enumerate(raw)]
            parse_s += time.perf_counter() - t
            await svc.ingest(records)
            n_records += len(records)
        seconds = time.perf_counter() - t0
        t = time.perf_counter()
        svc.warm([cfg.user_id])  # embedded: build the user's caches and HNSW graph, as a server would
        index_s = time.perf_counter() - t
    finally:
        await svc.close()
    entities = stats.n_entities
    return {
        "seconds": round(seconds, 2),
        "entities": entities,
        "relations": stats.n_relations,
        "records": n_records,
        "entities_per_s": round(entities / seconds, 1),
        "records_per_s": round(n_records / seconds, 1),
        "embed_seconds": round(embedder.seconds, 2),
        "parse_seconds": round(parse_s, 2),
        "write_seconds": round(seconds - embedder.seconds - parse_s, 2),
        "index_seconds": round(index_s, 2),
        "embedder": embedder.name,
        "embedder_setup_seconds": round(setup_s, 2),
        "batch_size": batch_size,
        "process_peak_rss_mb": round((proc_status_kb(os.getpid(), "VmHWM") or 0) / 1024, 1),
        "graph": {
            "entities": dict(stats.entities),
            "relations": dict(sorted(stats.relations.items())),
            "preferences": stats.preferences,
            "concept_degree": stats.degree_summary(),
        },
    }


def run_ingest(cfg: SynthConfig, target: Target, vectors: str, batch_size: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        future = pool.submit(_ingest_child, asdict(cfg), target.settings, vectors, batch_size, os.getpid())
        result: dict[str, Any] = future.result()
    return result


# ------------------------------------------------------------------------------------------
# the server
# ------------------------------------------------------------------------------------------


def provision_key(env: dict[str, str]) -> str:
    """An API key with every scope, for every user and without rate or concurrency limits, created
    in the record store that a server started with ``env`` will read: the bench measures the
    request path a user gets, authentication included."""
    from hrt.auth import SCOPES, new_key
    from hrt.config import load_settings
    from hrt.service import open_key_store

    settings = load_settings(**{k[4:].lower(): v for k, v in env.items() if k.startswith("HRT_")})
    token, record = new_key(f"bench-{os.getpid()}-{free_port()}", SCOPES, None, rate_limit=0, max_concurrency=0)

    async def store() -> None:
        async with open_key_store(settings) as keys:
            await keys.create_key(record)

    asyncio.run(store())
    return token


class Server:
    """A real ``hrt serve`` on a free loopback port, ready (``/readyz`` 200) when constructed, with an
    API key of every scope in ``headers``. ``cwd``: where it starts; ``python -m`` puts that folder
    first on ``sys.path``, so a source tree chosen with ``PYTHONPATH`` in ``env``
    (scripts/serve_ab.py) needs one that holds no other ``hrt``."""

    def __init__(
        self,
        env: dict[str, str],
        log_path: Path,
        embedder_spec: str | None,
        timeout: float = 600.0,
        cwd: Path | None = None,
    ):
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        full_env = {**os.environ, **env, "HRT_LOG_LEVEL": "WARNING"}
        self.headers = {"authorization": f"Bearer {provision_key(full_env)}"}
        if embedder_spec:
            cmd = [sys.executable, "-m", "hrt.bench.run", "--serve-with-embedder", embedder_spec, "--port"]
        else:
            cmd = [sys.executable, "-m", "hrt.cli", "serve", "--host", "127.0.0.1", "--port"]
        self._log = log_path.open("wb")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [*cmd, str(self.port)], stdout=self._log, stderr=subprocess.STDOUT, env=full_env, cwd=cwd
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hrt serve exited with {self.proc.returncode}: {self.log_tail()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.base_url}/readyz", headers=self.headers, timeout=5).status_code == 200:
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"hrt serve was not ready within {timeout:.0f}s: {self.log_tail()}")
            time.sleep(0.2)
        self.start_s = round(time.perf_counter() - t0, 2)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def rss_mb(self) -> float:
        return round((proc_status_kb(self.proc.pid, "VmRSS") or 0) / 1024, 1)

    def peak_rss_mb(self) -> float:
        return round((proc_status_kb(self.proc.pid, "VmHWM") or 0) / 1024, 1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def serve_with_embedder(spec: str, port: int) -> int:
    """``hrt serve`` with an embedder built from ``module:Class`` (the smoke test's fake one)."""
    import uvicorn

    from hrt.api import create_app
    from hrt.config import load_settings
    from hrt.service import HRTService

    settings = load_settings()
    service = HRTService(settings, embedder=import_object(spec)())
    uvicorn.run(create_app(settings, service=service), host="127.0.0.1", port=port, log_level="warning")
    return 0


# ------------------------------------------------------------------------------------------
# measuring
# ------------------------------------------------------------------------------------------


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


@dataclass
class Plan:
    sizes: list[int]
    deployments: list[str]
    out: Path
    requests: int
    concurrency: int
    warmup: int
    vectors: str
    batch_size: int
    depth: int
    seed: int
    peer: bool
    stack_dir: Path | None
    command: str
    keep: bool = False
    reuse: bool = False
    server_env: dict[str, str] = field(default_factory=dict)
    locomo: Path | None = None


def measure(
    server: Server, cfg: SynthConfig, plan: Plan, phrases: list[list[str]], stores: dict[str, int] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Latency, throughput and memory of one server; ``stores``: the pids of the store processes
    whose CPU per request is read beside the server's during the sequential requests."""
    as_of = cfg.as_of().strftime("%Y-%m-%dT%H:%M:%SZ")
    bodies = [request_body(cfg.user_id, p, as_of, plan.depth) for p in phrases]
    used = 0

    def take(n: int) -> list[dict[str, Any]]:
        nonlocal used
        part = bodies[used : used + n]
        used += n
        return part

    with httpx.Client(base_url=server.base_url, headers=server.headers, timeout=300) as client:
        cold = post_retrieve(client, take(1)[0])
        for body in take(plan.warmup):
            post_retrieve(client, body)
        rss_after_warmup = server.rss_mb()
        pids = {"hrt": server.proc.pid, **(stores or {})}
        cpu_before = {name: tree_cpu_s(pid) for name, pid in pids.items()}
        seq = [post_retrieve(client, body) for body in take(plan.requests)]
        cpu_after = {name: tree_cpu_s(pid) for name, pid in pids.items()}
    sequential = describe(seq)
    sequential["cpu_ms_per_request"] = cpu_ms_per_request(cpu_before, cpu_after, len(seq))
    levels = [
        run_closed_loop(server.base_url, take(plan.requests), c, server.headers)
        for c in concurrency_levels(plan.concurrency)
    ]
    limit = 2 * sequential["end_to_end"]["p95_ms"]
    within = [lv for lv in levels if lv.get("p95_ms", math.inf) <= limit and not lv["errors"]]
    top = levels[-1]
    concurrent_out = {
        "levels": levels,
        "clients": top["clients"],
        "throughput_rps": top["throughput_rps"],
        "p50_ms": top.get("p50_ms"),
        "p95_ms": top.get("p95_ms"),
        "p95_limit_ms": round(limit, 2),
        "sustainable_rps": max((lv["throughput_rps"] for lv in within), default=0.0),
    }
    extra = {
        "cold_first_request_ms": round(cold.ms, 1),
        "cold_first_request_stages": cold.stages,
        "server_rss_after_warmup_mb": rss_after_warmup,
    }
    return {"sequential": sequential, "concurrent": concurrent_out}, extra


def evaluate_goals(run: dict[str, Any]) -> list[dict[str, Any]]:
    goals = GOALS.get((run["deployment"], run["entities"]))
    if not goals or run.get("status") != "ok":
        return []
    seq = run["sequential"]["end_to_end"]
    measured = {
        "p50_ms": seq["p50_ms"],
        "p95_ms": seq["p95_ms"],
        "sustainable_rps_min": run["concurrent"]["sustainable_rps"],
        "server_peak_rss_mb": run["server"]["peak_rss_mb"],
    }
    out = []
    for name, bound in goals.items():
        value = measured[name]
        met = value >= bound if name.endswith("_min") else value <= bound
        out.append({"goal": name, "bound": bound, "measured": value, "met": bool(met)})
    return out


# ------------------------------------------------------------------------------------------
# the run
# ------------------------------------------------------------------------------------------


def stack_memory(largest: int) -> dict[str, str]:
    """The services' memory for a run whose largest store has ``largest`` entities: the dev
    stack's defaults up to 100k; per million entities, Weaviate 3 GiB more (1M vectors of 384
    floats are 1.5 GB before the HNSW graph; at its 1 GiB default it refused writes with "not
    enough memory" at ~500k) and Neo4j's page cache 3 GB more (its store is ~2.5 GB at 1M)."""
    millions = math.ceil(largest / 1_000_000) if largest > 100_000 else 0
    if not millions:
        return {}
    return {"neo4j_page_cache": f"{256 + 3072 * millions}m", "weaviate_memory": f"{1 + 3 * millions}GiB"}


@contextlib.contextmanager
def services_stack(plan: Plan) -> Iterator[Any]:
    """The dev stack (reused from ``--stack-dir`` when live); stops only the services it started."""
    from hrt import devstack

    own_dir = plan.stack_dir is None
    directory = plan.stack_dir or Path(tempfile.mkdtemp(prefix="hrt-bench-stack-"))
    before = devstack.Stack.load(directory.resolve())
    live = {n for n, i in (before.services.items() if before else []) if devstack._alive(i.pid)}
    stack = None
    try:
        stack = devstack.up(directory, devstack.SERVICES, **stack_memory(max(plan.sizes, default=0)))
        yield stack
    finally:
        loaded = stack or devstack.Stack.load(directory.resolve())
        if loaded is not None:
            for name, info in loaded.services.items():
                if name not in live:
                    devstack.stop_pid(info.pid)
        if own_dir:
            subprocess.run(["rm", "-rf", str(directory)], check=False)


def bench_one(
    plan: Plan, deployment: str, n: int, make_target: Callable[[], Target], work: Path, server_embedder: str | None
) -> dict[str, Any]:
    label = size_label(n)
    cfg = SynthConfig(entities=n, seed=plan.seed, user_id=f"bench-{label}", id_prefix=f"{label}-")
    run: dict[str, Any] = {
        "deployment": deployment,
        "entities": n,
        "size": label,
        "vectors": "real" if plan.vectors == "real" else plan.vectors,
        "status": "running",
        "loadavg_at_start": list(os.getloadavg()),
    }
    server: Server | None = None
    try:
        target = make_target()
        marker = work / f"{deployment}-{label}.ingest.json"  # what a kept embedded store holds
        identity = {"synth": asdict(cfg), "vectors": plan.vectors}
        kept = json.loads(marker.read_text()) if plan.reuse and marker.exists() else None
        if deployment == "embedded" and kept is not None and kept.get("identity") == identity:
            print(f"[bench] {deployment} {label}: reusing the kept store", file=sys.stderr, flush=True)
            run["ingest"] = {**kept["ingest"], "reused": True}
        else:
            marker.unlink(missing_ok=True)
            print(f"[bench] {deployment} {label}: ingest ({plan.vectors} vectors)", file=sys.stderr, flush=True)
            run["ingest"] = run_ingest(cfg, target, plan.vectors, plan.batch_size)
            if deployment == "embedded":
                marker.write_text(json.dumps({"identity": identity, "ingest": run["ingest"]}))
        print(
            f"[bench] {deployment} {label}: {run['ingest']['entities_per_s']} entities/s; serving",
            file=sys.stderr,
            flush=True,
        )
        if target.service_pids:
            waited, settled = wait_for_quiet(target.service_pids)
            run["stores_settle"] = {"waited_s": waited, "settled": settled}
            state = "quiet" if settled else "still busy (measuring anyway)"
            print(f"[bench] {deployment} {label}: stores {state} after {waited} s", file=sys.stderr, flush=True)
        server = Server({**target.env, **plan.server_env}, work / f"server-{deployment}-{label}.log", server_embedder)
        total = 1 + plan.warmup + plan.requests * (1 + len(concurrency_levels(plan.concurrency)))
        phrases = key_phrases(cfg, total)
        figures, extra = measure(server, cfg, plan, phrases, target.service_pids)
        run.update(figures)
        run["server"] = {"start_to_ready_s": server.start_s, "peak_rss_mb": server.peak_rss_mb(), **extra}
        if target.service_pids:
            run["server"]["stores_rss_mb"] = {k: tree_rss_mb(pid) for k, pid in target.service_pids.items()}
        run["status"] = "ok"
        seq = run["sequential"]["end_to_end"]
        print(
            f"[bench] {deployment} {label}: p50 {seq['p50_ms']} ms, p95 {seq['p95_ms']} ms, "
            f"{run['concurrent']['throughput_rps']} req/s at {plan.concurrency} clients, "
            f"peak RSS {run['server']['peak_rss_mb']} MB",
            file=sys.stderr,
            flush=True,
        )
    except Exception as exc:
        run["status"] = "failed"
        run["error"] = f"{type(exc).__name__}: {exc}"[:2000]
        run["traceback"] = traceback.format_exc()[-4000:]
        if server is not None:
            run["server_log_tail"] = server.log_tail()
        print(f"[bench] {deployment} {label}: FAILED: {run['error'][:300]}", file=sys.stderr, flush=True)
    finally:
        if server is not None:
            server.stop()
    run["loadavg_at_end"] = list(os.getloadavg())
    run["goals"] = evaluate_goals(run)
    return run


def run_plan(plan: Plan) -> dict[str, Any]:
    plan.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "command": plan.command,
        "started_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine_info(),
        "versions": versions(),
        "config": {
            "sizes": plan.sizes,
            "deployments": plan.deployments,
            "requests": plan.requests,
            "warmup": plan.warmup,
            "concurrency": plan.concurrency,
            "concurrency_levels": concurrency_levels(plan.concurrency),
            "phrases_per_request": 3,
            "depth": plan.depth,
            "limits": "default",
            "rerank": False,
            "vectors_for_ingest": plan.vectors,
            "batch_size": plan.batch_size,
            "seed": plan.seed,
            "server_env": plan.server_env,
            "stack_memory": stack_memory(max(plan.sizes, default=0)) if plan.stack_dir is None else "reused stack",
        },
        "goals": {f"{d} {size_label(n)}": g for (d, n), g in GOALS.items()},
        "runs": [],
    }
    server_embedder = plan.vectors if ":" in plan.vectors else None
    work = plan.out / "work"
    work.mkdir(parents=True, exist_ok=True)
    stack_cm: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    stack_error: str | None = None
    with contextlib.ExitStack() as exits:
        stack = None
        if "services" in plan.deployments:
            try:
                stack_cm = services_stack(plan)
                stack = exits.enter_context(stack_cm)
            except Exception as exc:
                stack_error = f"the services stack did not start: {type(exc).__name__}: {exc}"[:2000]
                print(f"[bench] {stack_error}", file=sys.stderr, flush=True)
        for n in plan.sizes:
            label = size_label(n)
            for deployment in plan.deployments:
                if deployment == "embedded":
                    run = bench_one(
                        plan,
                        deployment,
                        n,
                        functools.partial(embedded_target, work, label, plan.reuse),
                        work,
                        server_embedder,
                    )
                elif stack is None:
                    run = {
                        "deployment": deployment,
                        "entities": n,
                        "size": label,
                        "status": "failed",
                        "error": stack_error,
                        "goals": [],
                    }
                else:
                    run = bench_one(
                        plan, deployment, n, functools.partial(services_target, stack, label), work, server_embedder
                    )
                results["runs"].append(run)
                write_outputs(results, plan.out)
            if plan.peer and stack is not None:
                results.setdefault("peer", []).append(run_peer_safely(plan, stack, n))
                write_outputs(results, plan.out)
        if plan.locomo is not None:
            results["locomo"] = run_locomo_safely(plan, stack)
            write_outputs(results, plan.out)
        if not plan.keep and not plan.reuse:
            for suffix in ("", "-wal", "-shm"):
                for db in work.glob(f"*.db{suffix}"):
                    db.unlink(missing_ok=True)
            for folder in work.glob("*.db.ann"):
                shutil.rmtree(folder, ignore_errors=True)
            for marker in work.glob("*.ingest.json"):
                marker.unlink()
    results["finished_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    results["machine"]["loadavg_at_end"] = list(os.getloadavg())
    write_outputs(results, plan.out)
    return results


def run_locomo_safely(plan: Plan, stack: Any) -> dict[str, Any]:
    if stack is None:
        return {"status": "failed", "error": "LoCoMo recall needs the services deployment (its stack did not start)"}
    try:
        from hrt.bench.peer import run_locomo

        print(f"[bench] LoCoMo recall@10: HRT and the peer on {plan.locomo}", file=sys.stderr, flush=True)
        result: dict[str, Any] = run_locomo(stack, plan.locomo)
        return result
    except Exception as exc:
        print(f"[bench] LoCoMo: FAILED: {exc}", file=sys.stderr, flush=True)
        return {
            "status": "failed",
            "error": f"{type(exc).__name__}: {exc}"[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }


def run_peer_safely(plan: Plan, stack: Any, n: int) -> dict[str, Any]:
    label = size_label(n)
    try:
        from hrt.bench.peer import run_peer

        cfg = SynthConfig(entities=n, seed=plan.seed, user_id=f"bench-{label}", id_prefix=f"{label}-")
        result: dict[str, Any] = run_peer(plan, stack, cfg)
        return result
    except Exception as exc:
        print(f"[bench] peer {label}: FAILED: {exc}", file=sys.stderr, flush=True)
        return {
            "entities": n,
            "size": label,
            "status": "failed",
            "error": f"{type(exc).__name__}: {exc}"[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }


# ------------------------------------------------------------------------------------------
# outputs
# ------------------------------------------------------------------------------------------


def write_outputs(results: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    png = plot(results, out / "latency_vs_size.png")
    (out / "README.md").write_text(render_readme(results, png), encoding="utf-8")


def plot(results: dict[str, Any], path: Path) -> Path | None:
    ok = [r for r in results["runs"] if r.get("status") == "ok"]
    if not ok:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # matplotlib is optional: the JSON and the tables still come out
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for deployment in sorted({r["deployment"] for r in ok}):
        rows = sorted((r for r in ok if r["deployment"] == deployment), key=lambda r: r["entities"])
        xs = [r["entities"] for r in rows]
        for q, style in (("p50_ms", "-o"), ("p95_ms", "--s"), ("p99_ms", ":^")):
            ys = [r["sequential"]["end_to_end"][q] for r in rows]
            ax.plot(xs, ys, style, label=f"{deployment} {q[:3]}")
    for (deployment, n), goal in GOALS.items():
        ax.scatter([n], [goal["p50_ms"]], marker="_", s=300, color="green")
        ax.scatter([n], [goal["p95_ms"]], marker="_", s=300, color="red")
        ax.annotate(
            f"{deployment} goal",
            (n, goal["p95_ms"]),
            fontsize=7,
            xytext=(-14, 0),
            textcoords="offset points",
            ha="right",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("entities (one user)")
    ax.set_ylabel("POST /v1/retrieve latency, ms (client, sequential)")
    ax.set_title(
        "HRT retrieve latency against graph size (3 phrases, depth 2)\ngoal bars: green p50, red p95", fontsize=10
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) >= 100 else f"{value:.2f}".rstrip("0").rstrip(".")
    return str(value)


def _load(run: dict[str, Any]) -> str:
    """The 1-minute load average at the start and the end of a run (other work on the machine)."""
    a, b = run.get("loadavg_at_start"), run.get("loadavg_at_end")
    return f"{a[0]:.1f} → {b[0]:.1f}" if a and b else "-"


def render_readme(results: dict[str, Any], png: Path | None) -> str:
    m, v = results["machine"], results["versions"]
    lines = [
        "# hrt bench results",
        "",
        f"Command: `{results['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB; {m['os']}; Python {m['python']}; "
        f"load average at start {', '.join(f'{x:.2f}' for x in m['loadavg_at_start'])}"
        + (f", at end {', '.join(f'{x:.2f}' for x in m['loadavg_at_end'])}" if "loadavg_at_end" in m else "")
        + ".",
        "",
        "Versions: "
        + ", ".join(f"{k} {val}" for k, val in v.items() if k != "servers" and val)
        + "; servers: "
        + ", ".join(f"{k} {val}" for k, val in v["servers"].items())
        + ".",
        "",
        f"Started {results['started_at']}; each request: 3 new key phrases, depth {results['config']['depth']}, "
        f"default limits, no rerank; {results['config']['requests']} sequential requests after "
        f"{results['config']['warmup']} warm-up; concurrency levels {results['config']['concurrency_levels']}.",
        "",
        "## Latency and throughput (client side, over HTTP)",
        "",
        "| deployment | entities | vectors | p50 ms | p95 ms | p99 ms | req/s at max clients | sustainable req/s "
        "| ingest entities/s | server peak RSS MB | load avg | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        if r.get("status") != "ok":
            lines.append(
                f"| {r['deployment']} | {r['size']} | - | - | - | - | - | - | - | - | - | failed: "
                f"{(r.get('error') or '').splitlines()[0][:120] if r.get('error') else ''} |"
            )
            continue
        e, c = r["sequential"]["end_to_end"], r["concurrent"]
        lines.append(
            f"| {r['deployment']} | {r['size']} | {r['vectors']} | {_fmt(e['p50_ms'])} | {_fmt(e['p95_ms'])} | "
            f"{_fmt(e['p99_ms'])} | {_fmt(c['throughput_rps'])} ({c['clients']}) | {_fmt(c['sustainable_rps'])} | "
            f"{_fmt(r['ingest']['entities_per_s'])} | {_fmt(r['server']['peak_rss_mb'])} | {_load(r)} | ok |"
        )
    lines += ["", "## Per stage (server side, `Server-Timing`, sequential), p50 / p95 ms", ""]
    stage_cols = [s for s in STAGES if s != "rerank"]
    lines.append("| deployment | entities | " + " | ".join(stage_cols) + " |")
    lines.append("|---|---|" + "---|" * len(stage_cols))
    for r in results["runs"]:
        if r.get("status") != "ok":
            continue
        st = r["sequential"]["stages"]
        cells = [f"{_fmt(st[s]['p50_ms'])} / {_fmt(st[s]['p95_ms'])}" if s in st else "-" for s in stage_cols]
        lines.append(f"| {r['deployment']} | {r['size']} | " + " | ".join(cells) + " |")
    cpu_rows = [r for r in results["runs"] if r.get("status") == "ok" and "cpu_ms_per_request" in r["sequential"]]
    if cpu_rows:
        cores = m["cores"] or 1
        lines += [
            "",
            "## CPU per request (sequential requests, per process tree), ms",
            "",
            f"The total over {cores} cores is the least wall time a request can take with every process's share "
            "in parallel.",
            "",
            "| deployment | entities | " + " | ".join(CPU_PROCESSES) + f" | total | total / {cores} cores |",
            "|---|---|" + "---|" * (len(CPU_PROCESSES) + 2),
        ]
        for r in cpu_rows:
            cpu = r["sequential"]["cpu_ms_per_request"]
            cells = [_fmt(cpu.get(name)) for name in CPU_PROCESSES]
            lines.append(
                f"| {r['deployment']} | {r['size']} | "
                + " | ".join(cells)
                + f" | {_fmt(cpu['total'])} | {_fmt(round(cpu['total'] / cores, 1))} |"
            )
    goal_rows = [(r, g) for r in results["runs"] for g in r.get("goals", [])]
    if goal_rows:
        lines += [
            "",
            "## Goals",
            "",
            "| deployment | entities | goal | bound | measured | met |",
            "|---|---|---|---|---|---|",
        ]
        for r, g in goal_rows:
            lines.append(
                f"| {r['deployment']} | {r['size']} | {g['goal']} | {_fmt(g['bound'])} | {_fmt(g['measured'])} | "
                f"{'yes' if g['met'] else 'NO'} |"
            )
    peers = results.get("peer") or []
    if peers:
        lines += [
            "",
            "## Peer: neo4j-graphrag WeaviateNeo4jRetriever, same Weaviate and Neo4j data, depth 1",
            "",
            "| entities | HRT p50 / p95 ms | peer p50 / p95 ms | ratio HRT/peer (p50) | status |",
            "|---|---|---|---|---|",
        ]
        for p in peers:
            if p.get("status") != "ok":
                lines.append(f"| {p['size']} | - | - | - | failed: {(p.get('error') or '')[:120]} |")
                continue
            h, q = p["hrt"]["end_to_end"], p["peer"]["end_to_end"]
            lines.append(
                f"| {p['size']} | {_fmt(h['p50_ms'])} / {_fmt(h['p95_ms'])} | {_fmt(q['p50_ms'])} / "
                f"{_fmt(q['p95_ms'])} | {_fmt(p['ratio_p50'])} | ok |"
            )
    loc = results.get("locomo")
    if loc:
        lines += ["", "## LoCoMo evidence recall@10 (services data, real vectors)", ""]
        if loc.get("status") != "ok":
            lines.append(f"failed: {(loc.get('error') or '')[:200]}")
        else:
            lines += [
                f"{loc['conversations']} conversations, {loc['questions']} questions.",
                "",
                "| category | questions | HRT | peer |",
                "|---|---|---|---|",
            ]
            for cat, row in loc["by_category"].items():
                lines.append(f"| {cat} | {row['questions']} | {_fmt(row['hrt'])} | {_fmt(row['peer'])} |")
            lines.append(
                f"| all | {loc['questions']} | {_fmt(loc['recall@10']['hrt'])} | {_fmt(loc['recall@10']['peer'])} |"
            )
    if png is not None:
        lines += ["", f"![latency against size]({png.name})"]
    lines += ["", "Every figure is in `results.json`; reproduce with the command above.", ""]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hrt bench", description="HRT speed at scale, over HTTP (see docs/bench.md)")
    p.add_argument("--sizes", default="10k,100k,1m", help="entities per graph, comma-separated (default: %(default)s)")
    p.add_argument("--deployments", default="embedded,services", help="embedded, services (default: %(default)s)")
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="results folder (default: %(default)s)")
    p.add_argument("--requests", type=int, default=None, help="requests per measurement (default 200; quick 40)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up requests (default 20; quick 5)")
    p.add_argument("--concurrency", type=int, default=8, help="most concurrent clients (default: %(default)s)")
    p.add_argument(
        "--vectors",
        default="real",
        help="entity vectors for ingest: real (the model), composed (no model pass; see docs), or module:Class",
    )
    p.add_argument("--fake-vectors", action="store_true", help="same as --vectors composed")
    p.add_argument("--batch-size", type=int, default=5000, help="records per ingest call (default: %(default)s)")
    p.add_argument("--depth", type=int, default=2, help="max_depth of every request (default: %(default)s)")
    p.add_argument("--seed", type=int, default=7, help="generator seed (default: %(default)s)")
    p.add_argument("--peer", action="store_true", help="also run neo4j-graphrag's WeaviateNeo4jRetriever (services)")
    p.add_argument(
        "--locomo",
        type=Path,
        default=None,
        metavar="FILE",
        help="also LoCoMo evidence recall@10 of HRT and the peer on the services deployment (a LoCoMo JSON file)",
    )
    p.add_argument("--stack-dir", type=Path, default=None, help="reuse a dev stack directory (hrt dev up --dir)")
    p.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for hrt serve, repeatable (e.g. OMP_NUM_THREADS=1)",
    )
    p.add_argument("--keep", action="store_true", help="keep the embedded SQLite files in OUT/work (profiling)")
    p.add_argument(
        "--reuse",
        action="store_true",
        help="embedded: serve the store a --keep run left in OUT/work for the same size, seed and vectors "
        "instead of ingesting again (its ingest figures are reported, marked reused); implies --keep",
    )
    p.add_argument("--quick", action="store_true", help="fewer requests (40, warm-up 5): minutes, not tens")
    p.add_argument("--serve-with-embedder", default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve_with_embedder:
        return serve_with_embedder(args.serve_with_embedder, args.port)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    deployments = [d.strip() for d in args.deployments.split(",") if d.strip()]
    unknown = sorted(set(deployments) - {"embedded", "services"})
    if unknown:
        print(f"error: unknown deployment(s) {unknown}; use embedded, services", file=sys.stderr)
        return 2
    try:
        sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    except (argparse.ArgumentTypeError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if (args.peer or args.locomo) and importlib.util.find_spec("neo4j_graphrag") is None:
        print(
            "error: --peer and --locomo need neo4j-graphrag: pip install -e '.[bench]'",
            file=sys.stderr,
        )
        return 2
    vectors = "composed" if args.fake_vectors else args.vectors
    if vectors not in ("real", "composed") and ":" not in vectors:
        print("error: --vectors must be real, composed or module:Class", file=sys.stderr)
        return 2
    argv_list = list(sys.argv[1:] if argv is None else argv)
    plan = Plan(
        sizes=sizes,
        deployments=deployments,
        out=args.out,
        requests=args.requests if args.requests is not None else (40 if args.quick else 200),
        concurrency=max(1, args.concurrency),
        warmup=args.warmup if args.warmup is not None else (5 if args.quick else 20),
        vectors=vectors,
        batch_size=args.batch_size,
        depth=args.depth,
        seed=args.seed,
        peer=args.peer,
        stack_dir=args.stack_dir,
        command="hrt bench " + " ".join(shlex.quote(a) for a in argv_list),
        keep=args.keep,
        reuse=args.reuse,
        server_env=dict(item.split("=", 1) for item in args.server_env if "=" in item),
        locomo=args.locomo,
    )
    results = run_plan(plan)
    print(json.dumps({"out": str(plan.out), "runs": [_brief(r) for r in results["runs"]]}, indent=2))
    return 0 if all(r.get("status") == "ok" for r in results["runs"]) else 1


def _brief(run: dict[str, Any]) -> dict[str, Any]:
    if run.get("status") != "ok":
        return {
            "deployment": run["deployment"],
            "size": run["size"],
            "status": run["status"],
            "error": run.get("error"),
        }
    e = run["sequential"]["end_to_end"]
    return {
        "deployment": run["deployment"],
        "size": run["size"],
        "p50_ms": e["p50_ms"],
        "p95_ms": e["p95_ms"],
        "rps": run["concurrent"]["throughput_rps"],
        "peak_rss_mb": run["server"]["peak_rss_mb"],
        "goals_met": all(g["met"] for g in run["goals"]) if run["goals"] else None,
    }


if __name__ == "__main__":
    sys.exit(main())
