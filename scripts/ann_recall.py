"""Recall of the embedded store's HNSW graph against exact search, on a store kept by `hrt bench`.

For the bench's key phrases (embedded by the real model, as the server does), the exact top ``k``
rows by cosine whose similarity reaches the grounding floor (0.35: below it a vector hit never
becomes a seed) are compared with the top ``k`` of the graph's candidates rescored exactly, as the
vector leg does, at each search breadth ``ef``. Ties at the exact cut count as found.

    hrt bench --sizes 100k --deployments embedded --fake-vectors --keep --out /tmp/b100
    python scripts/ann_recall.py --db /tmp/b100/work/embedded-100k.db --size 100k
    python scripts/ann_recall.py ... --row-order   # also a graph built in row order, for comparison
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import time
from pathlib import Path

import numpy as np

from hrt.bench.stats import parse_size, size_label
from hrt.bench.synth import SynthConfig, key_phrases
from hrt.config import Settings
from hrt.service import load_embedder
from hrt.stores.ann import SEED, AnnConfig, UserAnn


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--db", required=True, type=Path, help="an embedded store kept by hrt bench --keep")
    ap.add_argument("--size", required=True, help="the bench size the store was made for: 10k, 100k, 1m")
    ap.add_argument("--phrases", type=int, default=100)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--ef", default="128,256,512", help="search breadths, comma-separated")
    ap.add_argument("--floor", type=float, default=Settings().threshold_min)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--row-order", action="store_true", help="also build a graph in row order (minutes at 1M)")
    args = ap.parse_args()

    n = parse_size(args.size)
    label = size_label(n)
    cfg = SynthConfig(entities=n, seed=args.seed, user_id=f"bench-{label}", id_prefix=f"{label}-")
    with sqlite3.connect(args.db) as con:
        rows = con.execute("SELECT rowid, vec FROM docs WHERE user_id = ? ORDER BY rowid", (cfg.user_id,)).fetchall()
    rowids = np.array([r[0] for r in rows], dtype=np.int64)
    matrix = np.stack([np.frombuffer(r[1], dtype=np.float32) for r in rows])
    position = {int(r): i for i, r in enumerate(rowids)}
    phrases = [p for request in key_phrases(cfg, args.phrases, salt="ann-recall") for p in request][: args.phrases]
    queries = np.asarray(load_embedder(Settings()).embed(phrases), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    wanted: list[set[int]] = []
    for q in queries:
        scores = matrix @ q
        kth = np.partition(scores, -args.k)[-args.k]
        wanted.append(set(np.flatnonzero((scores >= kth) & (scores >= args.floor)).tolist()))
    total = sum(len(w) for w in wanted)
    print(f"{len(rows)} vectors, {len(phrases)} phrases, {total} exact top-{args.k} hits at or above {args.floor}")

    graphs: dict[str, UserAnn] = {}
    files = sorted(args.db.with_name(args.db.name + ".ann").glob("*.hnsw"))
    persisted = UserAnn._load(files[0]) if files else None
    if persisted is not None:
        graphs["persisted"] = persisted
    if args.row_order:
        import hnswlib

        config = AnnConfig()
        index = hnswlib.Index(space="ip", dim=int(matrix.shape[1]))
        index.init_index(max_elements=len(rowids), M=config.m, ef_construction=config.ef_construction, random_seed=SEED)
        t = time.perf_counter()
        index.add_items(matrix, rowids, num_threads=1)
        print(f"row-order graph built in {time.perf_counter() - t:.0f} s")
        graphs["row order"] = UserAnn(index, rowids.copy(), np.zeros(len(rowids), dtype=np.int64), 0)
    for name, ann in graphs.items():
        for ef in (int(x) for x in args.ef.split(",")):
            found, times = 0, []
            for q, want in zip(queries, wanted, strict=True):
                t = time.perf_counter()
                labels = ann.candidates(q[None, :], args.k, ef, None)[0]
                times.append((time.perf_counter() - t) * 1000)
                cand = np.array([position[int(x)] for x in labels], dtype=np.int64)
                top = cand[np.argsort(-(matrix[cand] @ q), kind="stable")[: args.k]]
                found += len(want & set(top.tolist()))
            print(
                f"{name:10s} ef {ef:5d}: recall {found / max(total, 1):.3f}, "
                f"search p50 {statistics.median(times):.2f} ms a phrase"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
