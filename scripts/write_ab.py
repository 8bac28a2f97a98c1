"""The write path's paired A/B: ``POST /v1/ingest`` (20 memory units a body) and
``POST /v1/conversations`` (4 messages a call), the same seeded bodies to two embedded ``hrt serve``
(one per source tree, each on a fresh SQLite file of its own), in alternating order, answers
compared byte for byte; p50 / p95 / mean per side after 5 warm-up rounds. The read path's is
scripts/ab_main.py.

    git worktree add --detach /tmp/before <base>
    python scripts/write_ab.py /tmp/before . 105
"""

import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from hrt.bench.server import Server

a, b, n = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), int(sys.argv[3])
work = Path(tempfile.mkdtemp(prefix="hrt-write-ab-"))
rng = random.Random(7)
words = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "project",
    "phoenix",
    "timeline",
    "atlas",
    "budget",
    "review",
    "launch",
    "team",
    "plan",
    "move",
    "kyoto",
]
servers = {}
for side, tree in (("A", a), ("B", b)):
    env = {"PYTHONPATH": str(tree), "HRT_DB_PATH": str(work / f"{side}.db")}
    servers[side] = Server(env, work / f"{side}.log", None, timeout=600, cwd=Path("/"))
lat = {k: {"A": [], "B": []} for k in ("ingest", "conv")}
same = {"ingest": 0, "conv": 0}
try:
    with httpx.Client(timeout=120) as c:
        for i in range(n):
            recs = [
                {
                    "kind": "memory_unit",
                    "user_id": "u-ab",
                    "muid": f"m{i}-{j}",
                    "content": " ".join(rng.choice(words) for _ in range(40)),
                    "creation_ts": "2025-06-01T09:00:00Z",
                }
                for j in range(20)
            ]
            conv = {
                "user_id": "u-ab",
                "session_id": f"s{i // 5}",
                "messages": [
                    {
                        "role": "user" if j % 2 == 0 else "assistant",
                        "content": " ".join(rng.choice(words) for _ in range(15)),
                        "timestamp": f"2025-06-0{1 + i % 9}T10:0{j}:00Z",
                    }
                    for j in range(4)
                ],
            }
            for kind, route, body in (("ingest", "/v1/ingest", {"records": recs}), ("conv", "/v1/conversations", conv)):
                out = {}
                for side in ("A", "B") if i % 2 else ("B", "A"):
                    t = time.perf_counter()
                    r = c.post(servers[side].base_url + route, json=body, headers=servers[side].headers)
                    el = (time.perf_counter() - t) * 1000
                    r.raise_for_status()
                    out[side] = r.content
                    if i >= 5:
                        lat[kind][side].append(el)
                same[kind] += out["A"] == out["B"]
finally:
    for s in servers.values():
        s.stop()
    shutil.rmtree(work, ignore_errors=True)
for kind in lat:
    print(
        f"{kind}: identical {same[kind]} of {n}; "
        + "; ".join(
            f"{s} p50 {statistics.median(v):.2f} ms p95 {sorted(v)[int(len(v) * 0.95)]:.2f}"
            f" mean {statistics.mean(v):.2f}"
            for s, v in lat[kind].items()
        )
    )
