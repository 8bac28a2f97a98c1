"""Write to visible on one source tree's `hrt serve`, measured by this tree's probe, so an old
version's write path is measured exactly as `hrt bench --writes` measures the new one.

    git worktree add /tmp/before 16c520b
    hrt bench --sizes 100k --deployments embedded --fake-vectors --keep --out /tmp/b100
    cp /tmp/b100/work/embedded-100k.db /tmp/w.db; cp -r /tmp/b100/work/embedded-100k.db.ann /tmp/w.db.ann
    python scripts/write_probe.py --tree /tmp/before --db /tmp/w.db --size 100k --writes 6 --trickle 0
    python scripts/write_probe.py --tree . --db /tmp/w.db --size 100k --writes 20 --trickle 20

Each run writes into the store it is given (memory units ``w-NNNNNN``, again on a second run):
give each tree its own copy. Prints the figures as JSON (hrt.bench.writes.measure_writes).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hrt.bench.server import Server
from hrt.bench.stats import parse_size, size_label
from hrt.bench.synth import SynthConfig, key_phrases
from hrt.bench.writes import measure_server


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", required=True, type=Path, help="source tree whose hrt serve is measured")
    ap.add_argument("--db", required=True, type=Path, help="an embedded store kept by hrt bench --keep")
    ap.add_argument("--size", required=True, help="the bench size the store was made for: 10k, 100k, 1m")
    ap.add_argument("--writes", type=int, default=20, help="writes measured to visible, one at a time")
    ap.add_argument("--trickle", type=float, default=20.0, help="seconds of 5 writes/s beside readers (0: none)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    n = parse_size(args.size)
    label = size_label(n)
    cfg = SynthConfig(entities=n, seed=args.seed, user_id=f"bench-{label}", id_prefix=f"{label}-")
    env = {"PYTHONPATH": str(args.tree.resolve()), "HRT_DB_PATH": str(args.db.resolve())}
    server = Server(env, Path("write-probe.log").resolve(), None, timeout=900, cwd=Path("/"))
    try:
        figures = measure_server(server, cfg, key_phrases(cfg, 200, salt="write-probe"), 2, args.writes, args.trickle)
        print(json.dumps({"tree": str(args.tree.resolve()), "db": str(args.db), **figures}, indent=2))
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
