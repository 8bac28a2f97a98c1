"""Two versions of HRT side by side: one `hrt serve` per source tree on the same store, requests
alternating between them, so the host's speed changes hit both alike.

Bench runs minutes apart differ here by more than most single changes (docs/bench.md), so a change
is judged this way: each request (3 new key phrases, depth 2, the bench's generator) goes to both
servers, in alternating order, and the answers are compared byte for byte.

    git worktree add /tmp/before HEAD~1
    hrt bench --sizes 100k --deployments embedded --fake-vectors --keep --out /tmp/b100
    python scripts/serve_ab.py --a /tmp/before --b . --db /tmp/b100/work/embedded-100k.db --size 100k

``--a-env`` / ``--b-env NAME=VALUE`` give one side extra settings (then the same tree twice compares
two settings). One process serves an embedded store at a time, so side B needs a copy of it (the
file and its ``.ann`` folder): ``--b-env HRT_DB_PATH=COPY``. Both servers hold the store's caches
at once: about twice a server's RSS. The servers' logs go under ``--logs`` (default: a new
temporary directory, named on stdout).

    cp /tmp/b100/work/embedded-100k.db /tmp/b100/work/copy.db
    cp -r /tmp/b100/work/embedded-100k.db.ann /tmp/b100/work/copy.db.ann
    python scripts/serve_ab.py --a . --b . --a-env HRT_PASSAGE_WEIGHT=0 \
        --b-env HRT_DB_PATH=/tmp/b100/work/copy.db --db /tmp/b100/work/embedded-100k.db --size 100k
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from hrt.bench.loadgen import parse_server_timing
from hrt.bench.server import Server
from hrt.bench.stats import parse_size, size_label
from hrt.bench.synth import SynthConfig, key_phrases


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, type=Path, help="source tree of side A (the one before)")
    ap.add_argument("--b", required=True, type=Path, help="source tree of side B (the one after)")
    ap.add_argument("--db", required=True, type=Path, help="an embedded store kept by hrt bench --keep")
    ap.add_argument("--size", required=True, help="the bench size the store was made for: 10k, 100k, 1m")
    ap.add_argument("--requests", type=int, default=300, help="measured requests per side")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--a-env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--b-env", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--differ", type=Path, help="write each pair of differing answers here (NNNN-A.json, NNNN-B.json)")
    ap.add_argument("--logs", type=Path, help="the servers' logs go here (default: a new temporary directory)")
    args = ap.parse_args()
    logs = args.logs.resolve() if args.logs else Path(tempfile.mkdtemp(prefix="hrt-serve-ab-"))
    logs.mkdir(parents=True, exist_ok=True)

    n = parse_size(args.size)
    label = size_label(n)
    cfg = SynthConfig(entities=n, seed=args.seed, user_id=f"bench-{label}", id_prefix=f"{label}-")
    sides = {"A": (args.a.resolve(), _env(args.a_env)), "B": (args.b.resolve(), _env(args.b_env))}
    servers: dict[str, Server] = {}
    try:
        for side, (tree, extra) in sides.items():
            env = {"PYTHONPATH": str(tree), "HRT_DB_PATH": str(args.db.resolve()), **extra}
            servers[side] = Server(env, logs / f"serve-ab-{side}.log", None, timeout=900, cwd=Path("/"))
        urls = {side: server.base_url for side, server in servers.items()}
        as_of = cfg.as_of().strftime("%Y-%m-%dT%H:%M:%SZ")
        phrases = key_phrases(cfg, args.requests + args.warmup, salt="serve-ab")
        latency: dict[str, list[float]] = {"A": [], "B": []}
        stages: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
        identical = 0
        with httpx.Client(timeout=120) as client:
            for i, p in enumerate(phrases):
                body = {"user_id": cfg.user_id, "key_phrases": p, "max_depth": args.depth, "as_of": as_of}
                answers = {}
                for side in ("A", "B") if i % 2 else ("B", "A"):
                    t0 = time.perf_counter()
                    r = client.post(urls[side] + "/v1/retrieve", json=body, headers=servers[side].headers)
                    elapsed = (time.perf_counter() - t0) * 1000
                    r.raise_for_status()
                    answers[side] = r.content
                    if i >= args.warmup:
                        latency[side].append(elapsed)
                        for stage, ms in parse_server_timing(r.headers.get("server-timing", "")).items():
                            stages[side].setdefault(stage, []).append(ms)
                identical += answers["A"] == answers["B"]
                if answers["A"] != answers["B"] and args.differ is not None:
                    args.differ.mkdir(parents=True, exist_ok=True)
                    for side, answer in answers.items():
                        (args.differ / f"{i:04d}-{side}.json").write_bytes(answer)
        print(f"server logs: {logs}")
        print(f"byte-identical responses: {identical} of {len(phrases)}")
        for side, (tree, extra) in sides.items():
            v = latency[side]
            print(
                f"{side} {tree} {extra or ''}: p50 {statistics.median(v):.2f} ms, p95 {_pct(v, 0.95):.2f} ms,"
                f" mean {statistics.mean(v):.2f} ms"
            )
        for stage in stages["A"]:
            a, b = stages["A"][stage], stages["B"].get(stage, [float("nan")])
            print(f"  {stage:10s} p50 {statistics.median(a):7.2f} -> {statistics.median(b):7.2f} ms")
        return 0 if identical == len(phrases) else 1
    finally:
        for server in servers.values():
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
