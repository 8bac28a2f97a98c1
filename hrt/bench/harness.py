"""The run: per size and deployment, ingest, serve, measure (:func:`bench_one`), then the peer and
LoCoMo when asked, the results written after each step (:func:`run_plan`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from hrt.bench.host import cpu_ms_per_request, machine_info, tree_cpu_s, tree_rss_mb, versions, wait_for_quiet
from hrt.bench.ingest import run_ingest
from hrt.bench.loadgen import concurrency_levels, describe, post_retrieve, request_body, run_closed_loop
from hrt.bench.report import write_outputs
from hrt.bench.server import Server
from hrt.bench.stats import GOALS, evaluate_goals, size_label
from hrt.bench.synth import SynthConfig, key_phrases
from hrt.bench.targets import Target, embedded_target, services_target
from hrt.bench.turns import measure_turns
from hrt.bench.writes import measure_server

SCHEMA = "hrt-bench/1"


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
    writes: int = 0  # writes measured to visible (and the trickle beside readers); 0: none
    trickle_s: float = 20.0
    second_start: bool = False  # embedded: measure a second start, the HNSW graphs built and kept by the first
    peer_sizes: list[int] | None = None  # the sizes the peer runs at; None: every size
    conversations: int = 0  # conversation calls of 4 messages measured after the writes; 0: none


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
        # the first requests on a store just ingested can set its servers working in the background
        # (once, Weaviate for a minute at 100k: 198 ms of its CPU a request where it spends ~52)
        settle_after_warmup = wait_for_quiet(stores, window_s=3.0)[0] if stores else None
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
        **({"stores_settle_after_warmup_s": settle_after_warmup} if stores else {}),
    }
    return {"sequential": sequential, "concurrent": concurrent_out}, extra


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
        _ingest_or_reuse(plan, deployment, label, cfg, target, work, run)
        _settle_stores(deployment, label, target, run)
        # a first start on a fresh 1M store builds its HNSW graph before it is ready (~16 min, one thread)
        ready_s = 600.0 if n < 500_000 else 3_600.0
        env = {**target.env, **plan.server_env}
        server = Server(env, work / f"server-{deployment}-{label}.log", server_embedder, ready_s)
        if plan.second_start and deployment == "embedded":
            log = work / f"server-{deployment}-{label}-second.log"
            server = _second_start(server, env, log, server_embedder, ready_s, run)
        _measure_run(plan, deployment, label, cfg, target, server, run)
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


def _second_start(
    first: Server, env: dict[str, str], log: Path, embedder: str | None, ready_s: float, run: dict[str, Any]
) -> Server:
    """Stop a server once ready and start it again on the same store: the first start built and kept the
    HNSW graphs (``<db>.ann/``), so the requests measure what a restarted server serves, with no build
    beside them. ``run["first_start"]``: the first start's time to ready."""
    run["first_start"] = {"start_to_ready_s": first.start_s}
    first.stop()
    print(f"[bench] first start ready in {first.start_s} s; starting again", file=sys.stderr, flush=True)
    return Server(env, log, embedder, ready_s)


# the numbers a reused store's run gives its memories and calls start this far past the last run's
REUSE_STRIDE = 10_000


def _ingest_or_reuse(
    plan: Plan, deployment: str, label: str, cfg: SynthConfig, target: Target, work: Path, run: dict[str, Any]
) -> None:
    """``run["ingest"]``: the ingest measured now, or that of a kept embedded store of the same graph."""
    marker = work / f"{deployment}-{label}.ingest.json"  # what a kept embedded store holds
    identity = {"synth": asdict(cfg), "vectors": plan.vectors}
    kept = json.loads(marker.read_text()) if plan.reuse and marker.exists() else None
    if deployment == "embedded" and kept is not None and kept.get("identity") == identity:
        # each reuse writes new memories and calls: numbered past those of the runs before it
        run["reuse_round"] = kept.get("reuses", 0) + 1
        marker.write_text(json.dumps({**kept, "reuses": run["reuse_round"]}))
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


def _settle_stores(deployment: str, label: str, target: Target, run: dict[str, Any]) -> None:
    """Wait for the store servers to go quiet after the ingest (``run["stores_settle"]``)."""
    if target.service_pids:
        waited, settled = wait_for_quiet(target.service_pids)
        run["stores_settle"] = {"waited_s": waited, "settled": settled}
        state = "quiet" if settled else "still busy (measuring anyway)"
        print(f"[bench] {deployment} {label}: stores {state} after {waited} s", file=sys.stderr, flush=True)


def _measure_run(
    plan: Plan, deployment: str, label: str, cfg: SynthConfig, target: Target, server: Server, run: dict[str, Any]
) -> None:
    """Reads (sequential and concurrent), the writes when asked, and the server's figures, into ``run``."""
    total = 1 + plan.warmup + plan.requests * (1 + len(concurrency_levels(plan.concurrency)))
    phrases = key_phrases(cfg, total)
    figures, extra = measure(server, cfg, plan, phrases, target.service_pids)
    run.update(figures)
    first = REUSE_STRIDE * run.get("reuse_round", 0)
    if plan.writes:
        print(f"[bench] {deployment} {label}: writes", file=sys.stderr, flush=True)
        run["writes"] = measure_server(server, cfg, phrases, plan.depth, plan.writes, plan.trickle_s, first)
    if plan.conversations:
        print(f"[bench] {deployment} {label}: conversations", file=sys.stderr, flush=True)
        run["conversations"] = measure_turns(server, cfg, plan.conversations, first)
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


def _results_head(plan: Plan) -> dict[str, Any]:
    """The results before any run: the command, the machine, the versions, the configuration, the goals."""
    return {
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


def run_plan(plan: Plan) -> dict[str, Any]:
    plan.out.mkdir(parents=True, exist_ok=True)
    results = _results_head(plan)
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
            for deployment in plan.deployments:
                results["runs"].append(_run_one(plan, deployment, n, stack, stack_error, work, server_embedder))
                write_outputs(results, plan.out)
            if plan.peer and stack is not None and (plan.peer_sizes is None or n in plan.peer_sizes):
                results.setdefault("peer", []).append(run_peer_safely(plan, stack, n))
                write_outputs(results, plan.out)
        if plan.locomo is not None:
            results["locomo"] = run_locomo_safely(plan, stack)
            write_outputs(results, plan.out)
        if not plan.keep and not plan.reuse:
            _remove_stores(work)
    results["finished_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    results["machine"]["loadavg_at_end"] = list(os.getloadavg())
    write_outputs(results, plan.out)
    return results


def _run_one(
    plan: Plan,
    deployment: str,
    n: int,
    stack: Any,
    stack_error: str | None,
    work: Path,
    server_embedder: str | None,
) -> dict[str, Any]:
    """One deployment at one size; a services run without its stack fails with the stack's error."""
    label = size_label(n)
    if deployment == "embedded":
        return bench_one(
            plan, deployment, n, functools.partial(embedded_target, work, label, plan.reuse), work, server_embedder
        )
    if stack is None:
        return {
            "deployment": deployment,
            "entities": n,
            "size": label,
            "status": "failed",
            "error": stack_error,
            "goals": [],
        }
    return bench_one(plan, deployment, n, functools.partial(services_target, stack, label), work, server_embedder)


def _remove_stores(work: Path) -> None:
    """The embedded stores and their ingest markers, once the run does not keep them."""
    for suffix in ("", "-wal", "-shm"):
        for db in work.glob(f"*.db{suffix}"):
            db.unlink(missing_ok=True)
    for folder in work.glob("*.db.ann"):
        shutil.rmtree(folder, ignore_errors=True)
    for marker in work.glob("*.ingest.json"):
        marker.unlink()


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
