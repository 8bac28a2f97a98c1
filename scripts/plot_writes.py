"""A chart of write to visible (p50 and p95) from `hrt bench` results with writes, one bar pair per
run, against the 100 ms goal, and the paired before figure of scripts/write_probe.py if given.

    python scripts/plot_writes.py bench-results/writes-31/*/results.json \\
        --before bench-results/writes-31/write-probe/before-16c520b.json \\
        --out bench-results/writes-31/write_to_visible.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", type=Path, help="results.json of hrt bench runs with --writes")
    ap.add_argument("--before", type=Path, default=None, help="a write_probe.py JSON of the code before")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars: list[tuple[str, float, float]] = []
    if args.before is not None:
        v = json.loads(args.before.read_text())["write_to_visible"]["visible_ms"]
        bars.append(("embedded 100k\nbefore (rebuild)", v["p50_ms"], v["p95_ms"]))
    for path in args.results:
        for run in json.loads(path.read_text())["runs"]:
            if run.get("status") == "ok" and run.get("writes"):
                v = run["writes"]["write_to_visible"]["visible_ms"]
                bars.append((f"{run['deployment']} {run['size']}", v["p50_ms"], v["p95_ms"]))
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    xs = range(len(bars))
    ax.bar([x - 0.2 for x in xs], [b[1] for b in bars], width=0.4, label="p50")
    ax.bar([x + 0.2 for x in xs], [b[2] for b in bars], width=0.4, label="p95")
    ax.axhline(100, color="red", linestyle="--", linewidth=1, label="goal p95, embedded (100 ms)")
    ax.axhline(1000, color="orange", linestyle=":", linewidth=1, label="goal p95, services (1 s)")
    ax.set_xticks(list(xs), [b[0] for b in bars], fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("write to visible, ms (log)")
    ax.set_title("HRT write to visible (hrt bench --writes)", fontsize=10)
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
