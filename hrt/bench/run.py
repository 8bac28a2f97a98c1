"""``hrt bench``: speed at scale, measured over HTTP against a real ``hrt serve``.

    hrt bench [--sizes 10k,100k,1m] [--deployments embedded,services] [--out bench-results]
              [--requests 200] [--concurrency 8] [--vectors real|composed] [--quick] [--peer [SIZES]]
              [--second-start] [--conversations 20]

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

The modules: :mod:`~hrt.bench.stats` (sizes, percentiles, goals), :mod:`~hrt.bench.host` (machine,
versions, memory and CPU of process trees), :mod:`~hrt.bench.targets` (the deployments),
:mod:`~hrt.bench.ingest` (the ingest child and its embedders), :mod:`~hrt.bench.server` (``hrt
serve``), :mod:`~hrt.bench.loadgen` (the requests), :mod:`~hrt.bench.harness` (the run),
:mod:`~hrt.bench.report` (the outputs), :mod:`~hrt.bench.peer` (the peer and LoCoMo), and this one,
the command line (``python -m hrt.bench.run`` also starts the server with a test embedder).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hrt.bench.harness import Plan, run_plan
from hrt.bench.server import serve_with_embedder
from hrt.bench.stats import parse_size


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
    p.add_argument(
        "--peer",
        nargs="?",
        const="all",
        default=None,
        metavar="SIZES",
        help="also run neo4j-graphrag's WeaviateNeo4jRetriever (services), at every size or at SIZES (e.g. 100k)",
    )
    p.add_argument(
        "--locomo",
        type=Path,
        default=None,
        metavar="FILE",
        help="also LoCoMo evidence recall@10 of HRT and the peer on the services deployment (a LoCoMo JSON file)",
    )
    _add_store_args(p)
    p.add_argument("--quick", action="store_true", help="fewer requests (40, warm-up 5): minutes, not tens")
    p.add_argument("--serve-with-embedder", default=None, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=None, help=argparse.SUPPRESS)
    return p


def _add_store_args(p: argparse.ArgumentParser) -> None:
    """The flags of the stores, the server and the writes."""
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
    p.add_argument(
        "--writes",
        type=int,
        default=None,
        help="writes measured to visible, then a trickle of 5/s beside readers; 0: none (default 20; quick 10)",
    )
    p.add_argument(
        "--trickle-s", type=float, default=None, help="seconds of the trickle of writes (default 20; quick 10; 0: none)"
    )
    p.add_argument(
        "--conversations",
        type=int,
        default=None,
        help="conversation calls of 4 messages to /v1/conversations after the writes; 0: none (default 20; quick 5)",
    )
    p.add_argument(
        "--second-start",
        action="store_true",
        help="embedded: start the server, stop it once ready, and measure a second start on the same store "
        "(the HNSW graphs the first start built are kept, so no build runs beside the requests)",
    )


class UsageError(Exception):
    """A flag's value the run cannot use; its text is the one error line ``hrt bench`` prints."""


def _sizes(text: str, flag: str) -> list[int]:
    try:
        return [parse_size(s) for s in text.split(",") if s.strip()]
    except (argparse.ArgumentTypeError, ValueError) as exc:
        raise UsageError(f"{flag}: {exc}") from None


def plan_from_args(args: argparse.Namespace, argv: Sequence[str]) -> Plan:
    """The run a command line asks for; :class:`UsageError` for a value it cannot use."""
    deployments = [d.strip() for d in args.deployments.split(",") if d.strip()]
    unknown = sorted(set(deployments) - {"embedded", "services"})
    if unknown:
        raise UsageError(f"unknown deployment(s) {unknown}; use embedded, services")
    peer_sizes = None if args.peer in (None, "all") else _sizes(args.peer, "--peer")
    if (args.peer or args.locomo) and importlib.util.find_spec("neo4j_graphrag") is None:
        raise UsageError("--peer and --locomo need neo4j-graphrag: pip install -e '.[bench]'")
    vectors = "composed" if args.fake_vectors else args.vectors
    if vectors not in ("real", "composed") and ":" not in vectors:
        raise UsageError("--vectors must be real, composed or module:Class")
    return Plan(
        sizes=_sizes(args.sizes, "--sizes"),
        deployments=deployments,
        out=args.out,
        requests=args.requests if args.requests is not None else (40 if args.quick else 200),
        concurrency=max(1, args.concurrency),
        warmup=args.warmup if args.warmup is not None else (5 if args.quick else 20),
        vectors=vectors,
        batch_size=args.batch_size,
        depth=args.depth,
        seed=args.seed,
        peer=args.peer is not None,
        peer_sizes=peer_sizes,
        second_start=args.second_start,
        stack_dir=args.stack_dir,
        command="hrt bench " + " ".join(shlex.quote(a) for a in argv),
        keep=args.keep,
        reuse=args.reuse,
        server_env=dict(item.split("=", 1) for item in args.server_env if "=" in item),
        locomo=args.locomo,
        writes=max(0, args.writes) if args.writes is not None else (10 if args.quick else 20),
        trickle_s=args.trickle_s if args.trickle_s is not None else (10.0 if args.quick else 20.0),
        conversations=max(0, args.conversations) if args.conversations is not None else (5 if args.quick else 20),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.serve_with_embedder:
        return serve_with_embedder(args.serve_with_embedder, args.port)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        plan = plan_from_args(args, list(sys.argv[1:] if argv is None else argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    results = run_plan(plan)
    brief: dict[str, Any] = {"out": str(plan.out), "runs": [_brief(r) for r in results["runs"]]}
    # the peer and LoCoMo were asked for: a failure of theirs fails the command too, never only a line in
    # results.json (a peer that answered 401 for every request once went unnoticed)
    extra = [*results.get("peer", []), *([results["locomo"]] if "locomo" in results else [])]
    if results.get("peer"):
        brief["peer"] = [_brief_peer(p) for p in results["peer"]]
    if "locomo" in results:
        loc = results["locomo"]
        brief["locomo"] = {"status": loc.get("status"), **({"error": loc.get("error")} if loc.get("error") else {})}
    print(json.dumps(brief, indent=2))
    return 0 if all(r.get("status") == "ok" for r in [*results["runs"], *extra]) else 1


def _brief_peer(p: dict[str, Any]) -> dict[str, Any]:
    if p.get("status") != "ok":
        return {"size": p["size"], "status": p["status"], "error": p.get("error")}
    return {
        "size": p["size"],
        "hrt_p50_ms": p["hrt"]["end_to_end"]["p50_ms"],
        "peer_p50_ms": p["peer"]["end_to_end"]["p50_ms"],
        "ratio_p50": p["ratio_p50"],
    }


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
