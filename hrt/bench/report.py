"""The outputs of a run: ``results.json``, ``latency_vs_size.png`` and the tables of ``README.md``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hrt.bench.loadgen import STAGES
from hrt.bench.stats import GOALS, cross_goals

# the processes whose CPU per request a run reports: the server, then the stores of services
CPU_PROCESSES = ("hrt", "postgres", "neo4j", "weaviate")


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
    runs = results["runs"]
    lines = _header(results)
    lines += _latency_table(runs)
    lines += _stages_table(runs)
    lines += _cpu_table(runs, results["machine"]["cores"] or 1)
    lines += _writes_table(runs)
    lines += _turns_table(runs)
    lines += _goals_table(runs)
    lines += _cross_goals_table(results)
    lines += _peer_table(results.get("peer") or [])
    loc = results.get("locomo")
    if loc:
        lines += _locomo_section(loc)
    if png is not None:
        lines += ["", f"![latency against size]({png.name})"]
    lines += ["", "Every figure is in `results.json`; reproduce with the command above.", ""]
    return "\n".join(lines)


def _header(results: dict[str, Any]) -> list[str]:
    """The command, the machine, the versions and the request mix."""
    m, v = results["machine"], results["versions"]
    return [
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
    ]


def _latency_table(runs: list[dict[str, Any]]) -> list[str]:
    """Latency and throughput per run, a failed run with its first error line."""
    lines = [
        "",
        "## Latency and throughput (client side, over HTTP)",
        "",
        "| deployment | entities | vectors | p50 ms | p95 ms | p99 ms | req/s at max clients | sustainable req/s "
        "| ingest entities/s | server peak RSS MB | load avg | status |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
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
    return lines


def _stages_table(runs: list[dict[str, Any]]) -> list[str]:
    """Each stage's server-side p50 / p95 per run that succeeded."""
    lines = ["", "## Per stage (server side, `Server-Timing`, sequential), p50 / p95 ms", ""]
    stage_cols = [s for s in STAGES if s != "rerank"]
    lines.append("| deployment | entities | " + " | ".join(stage_cols) + " |")
    lines.append("|---|---|" + "---|" * len(stage_cols))
    for r in runs:
        if r.get("status") != "ok":
            continue
        st = r["sequential"]["stages"]
        cells = [f"{_fmt(st[s]['p50_ms'])} / {_fmt(st[s]['p95_ms'])}" if s in st else "-" for s in stage_cols]
        lines.append(f"| {r['deployment']} | {r['size']} | " + " | ".join(cells) + " |")
    return lines


def _cpu_table(runs: list[dict[str, Any]], cores: int) -> list[str]:
    """CPU time per request and process tree, per run that measured it."""
    cpu_rows = [r for r in runs if r.get("status") == "ok" and "cpu_ms_per_request" in r["sequential"]]
    if not cpu_rows:
        return []
    lines = [
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
    return lines


def _turns_table(runs: list[dict[str, Any]]) -> list[str]:
    """Conversation calls (hrt.bench.turns), per run that has them."""
    rows = [r for r in runs if r.get("status") == "ok" and r.get("conversations")]
    if not rows:
        return []
    lines = ["", "## Conversations: calls of 4 messages to `/v1/conversations` (hrt.bench.turns)", ""]
    lines += ["| deployment | entities | calls | p50 / p95 ms a call | 429s, errors |", "|---|---|---|---|---|"]
    for r in rows:
        t = r["conversations"]
        ms = t["call_ms"]
        lines.append(
            f"| {r['deployment']} | {r['size']} | {t['calls']} | {_fmt(ms.get('p50_ms'))} / {_fmt(ms.get('p95_ms'))} "
            f"| {t['refused_429']}, {t['n_errors']} |"
        )
    return lines


def _cross_goals_table(results: dict[str, Any]) -> list[str]:
    """The goals between runs (:func:`hrt.bench.stats.cross_goals`), met or not."""
    rows = cross_goals(results)
    if not rows:
        return []
    lines = ["", "## Goals between runs (ratios on this host)", "", "| goal | bound | measured | met |"]
    lines.append("|---|---|---|---|")
    for g in rows:
        lines.append(f"| {g['goal']} | {_fmt(g['bound'])} | {_fmt(g['measured'])} | {'yes' if g['met'] else 'NO'} |")
    return lines


def _goals_table(runs: list[dict[str, Any]]) -> list[str]:
    """Each run's goals, met or not."""
    goal_rows = [(r, g) for r in runs for g in r.get("goals", [])]
    if not goal_rows:
        return []
    lines = [
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
    return lines


def _peer_table(peers: list[dict[str, Any]]) -> list[str]:
    """HRT beside neo4j-graphrag's retriever over the same data, per size."""
    if not peers:
        return []
    lines = [
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
    return lines


def _locomo_section(loc: dict[str, Any]) -> list[str]:
    """LoCoMo evidence recall for HRT and the peer, per category."""
    lines = ["", "## LoCoMo evidence recall@10 (services data, real vectors)", ""]
    if loc.get("status") != "ok":
        lines.append(f"failed: {(loc.get('error') or '')[:200]}")
        return lines
    lines += [
        f"{loc['conversations']} conversations, {loc['questions']} questions.",
        "",
        "| category | questions | HRT | peer |",
        "|---|---|---|---|",
    ]
    for cat, row in loc["by_category"].items():
        lines.append(f"| {cat} | {row['questions']} | {_fmt(row['hrt'])} | {_fmt(row['peer'])} |")
    lines.append(f"| all | {loc['questions']} | {_fmt(loc['recall@10']['hrt'])} | {_fmt(loc['recall@10']['peer'])} |")
    return lines


def _writes_table(runs: list[dict[str, Any]]) -> list[str]:
    """Write to visible, and the trickle beside readers (hrt.bench.writes), per run that has them."""
    rows = [r for r in runs if r.get("status") == "ok" and r.get("writes")]
    if not rows:
        return []
    lines = [
        "",
        "## Writes: one memory unit to visible, and a trickle of 5/s beside 2 readers (hrt.bench.writes)",
        "",
        "| deployment | entities | write to visible p50 / p95 ms | ingest p50 / p95 ms | trickle: writes, 429s, "
        "errors | trickle: to visible p50 / p95 ms | read p95 idle / beside writes ms (ratio) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        w = r["writes"]
        alone, t = w["write_to_visible"], w.get("trickle") or {}
        vis, ing = alone["visible_ms"], alone["ingest_ms"]
        trickle = "-"
        beside = "-"
        reads = "-"
        if t:
            tv = t["visible_ms"]
            trickle = f"{tv.get('n', 0)}, {t['refused_429']}, {t['n_errors']}"
            beside = f"{_fmt(tv.get('p50_ms'))} / {_fmt(tv.get('p95_ms'))}"
            reads = (
                f"{_fmt(t['reads_idle'].get('p95_ms'))} / {_fmt(t['reads_beside_writes'].get('p95_ms'))} "
                f"({_fmt(t['read_p95_ratio'])})"
            )
        lines.append(
            f"| {r['deployment']} | {r['size']} | {_fmt(vis.get('p50_ms'))} / {_fmt(vis.get('p95_ms'))} | "
            f"{_fmt(ing.get('p50_ms'))} / {_fmt(ing.get('p95_ms'))} | {trickle} | {beside} | {reads} |"
        )
    return lines
