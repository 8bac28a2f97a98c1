"""The outputs of a run: the markdown tables, the recall chart, the JSON and per-question files."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path

from hrt.eval.locomo.evaluation import EvalResult
from hrt.eval.locomo.metrics import CATEGORY_NAMES, OVERALL, RENDER_BUDGETS, RENDER_TOKENIZER, rendered_metric
from hrt.eval.locomo.systems import SYSTEM_LABELS

log = logging.getLogger("hrt.eval.locomo")

# The LoCoMo paper (Table 3), DRAGON retriever, dialogs as database, all ten conversations.
PAPER_DRAGON: dict[str, float] = {"recall@5": 56.7, "recall@10": 66.2, "recall@25": 76.7}


def _groups(result: EvalResult) -> list[str]:
    first = next(iter(result.systems.values()), {})
    return list(first)


def _group_label(group: str) -> str:
    if group.isdigit():
        return CATEGORY_NAMES.get(int(group), f"category {group}")
    return "overall (1-4)" if group == OVERALL else "all (1-5)"


def _cell(summary: Mapping[str, float] | None, metric: str) -> str:
    return f"{summary[metric]:.1f}" if summary else "–"


NOTES_TEXT = {
    "none": "none: the rules alone (turns, their rule notes, and the concepts and relations HRT's rules extract)",
    "dataset": "dataset: LoCoMo's session summaries and observations too, as artifacts",
}
RENDERED_LABELS = {"rendered": "compact", "rendered-markdown": "markdown"}


def notes_line(result: EvalResult) -> str:
    notes = str(result.meta.get("notes", "dataset"))
    return f"Notes imported: {NOTES_TEXT.get(notes, notes)}. Ingest: {result.meta.get('ingest', 'batch')}."


def rendered_table(result: EvalResult) -> list[str]:
    """The share of evidence turns in the rendered text per budget, overall and multi-hop, for the
    systems that render; nothing when none did."""
    budgets = [
        b for b in RENDER_BUDGETS if any(_has(s, rendered_metric("rendered", b)) for s in result.systems.values())
    ]
    if not budgets:
        return []
    head = " | ".join(f"{group} {b:,}" for group in ("overall", "multi-hop") for b in budgets)
    lines = [
        "",
        f"Evidence turns in the rendered text, within {' / '.join(f'{b:,}' for b in budgets)} {RENDER_TOKENIZER} "
        "tokens (HRT: its render of what it returned; hybrid RRF: its ranked turns' texts, one per line):",
        "",
        f"| system | {head} |",
        "|---|" + "---:|" * (2 * len(budgets)),
    ]
    for name, per_group in result.systems.items():
        for kind, fmt in RENDERED_LABELS.items():
            if not _has(per_group, rendered_metric(kind, budgets[0])):
                continue
            label = f"{SYSTEM_LABELS.get(name, name)}, " + (fmt if name != "hybrid-rrf" else "turn texts")
            cells = [_cell(per_group.get(g), rendered_metric(kind, b)) for g in (OVERALL, "1") for b in budgets]
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _has(per_group: Mapping[str, Mapping[str, float]], metric: str) -> bool:
    return metric in per_group.get(OVERALL, {})


def markdown_report(result: EvalResult) -> str:
    """Every metric over categories 1-4 (adversarial beside it), then recall@10 per category, then
    the evidence in the rendered text."""
    lines = [
        notes_line(result),
        "",
        "| system | R@5 | R@10 | R@25 | nDCG@10 | MRR | R@10 +artifacts | candidates | adversarial R@10 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, per_group in result.systems.items():
        o = per_group.get(OVERALL)
        metrics = ("recall@5", "recall@10", "recall@25", "ndcg@10", "mrr", "recall@10+artifacts", "candidates")
        cells = [_cell(o, m) for m in metrics]
        cells.append(_cell(per_group.get("5"), "recall@10"))
        label = SYSTEM_LABELS.get(name, name)
        lines.append(f"| {'**' + label + '**' if name == 'hrt' else label} | " + " | ".join(cells) + " |")
    d = PAPER_DRAGON
    lines.append(
        f"| *LoCoMo paper, DRAGON, dialogs as database (all ten conversations)* | *{d['recall@5']}* | "
        f"*{d['recall@10']}* | *{d['recall@25']}* | | | | | |"
    )
    groups = _groups(result)
    first = next(iter(result.systems.values()), {})
    lines += ["", "Recall@10 per category (questions in brackets):", ""]
    lines.append("| system | " + " | ".join(f"{_group_label(g)} ({int(first[g]['n'])})" for g in groups) + " |")
    lines.append("|---|" + "---:|" * len(groups))
    for name, per_group in result.systems.items():
        lines.append(
            f"| {SYSTEM_LABELS.get(name, name)} | "
            + " | ".join(_cell(per_group.get(g), "recall@10") for g in groups)
            + " |"
        )
    lines += [
        "",
        "Candidate recall per category: evidence turns the system considered at all, at any rank "
        "(HRT: the memory units it scored; a baseline: its search hits):",
        "",
    ]
    lines.append("| system | " + " | ".join(_group_label(g) for g in groups) + " |")
    lines.append("|---|" + "---:|" * len(groups))
    for name, per_group in result.systems.items():
        lines.append(
            f"| {SYSTEM_LABELS.get(name, name)} | "
            + " | ".join(_cell(per_group.get(g), "candidates") for g in groups)
            + " |"
        )
    lines += rendered_table(result)
    return "\n".join(lines) + "\n"


def write_chart(result: EvalResult, path: Path) -> bool:
    """Recall@10 per category and system as grouped bars, the paper's DRAGON overall as a line.
    Needs matplotlib (optional); returns False when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no chart (pip install matplotlib)")
        return False
    groups = _groups(result)
    names = list(result.systems)
    width = 0.8 / max(1, len(names))
    fig, ax = plt.subplots(figsize=(12, 5))
    for i, name in enumerate(names):
        xs = [j + (i - (len(names) - 1) / 2) * width for j in range(len(groups))]
        ys = [result.systems[name][g]["recall@10"] for g in groups]
        ax.bar(xs, ys, width, label=SYSTEM_LABELS.get(name, name))
    ax.axhline(PAPER_DRAGON["recall@10"], color="black", linestyle="--", linewidth=1, label="paper: DRAGON overall")
    ax.set_xticks(range(len(groups)), [_group_label(g) for g in groups])
    ax.set_ylabel("evidence recall@10 (%)")
    ax.set_ylim(0, 100)
    ax.set_title("LoCoMo evidence retrieval, recall@10 (dev conversations)")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=4, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Software": None})
    plt.close(fig)
    return True


def write_outputs(result: EvalResult, out: Path) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "locomo-results.md",
        "json": out / "locomo-results.json",
        "questions": out / "locomo-questions.jsonl",
        "chart": out / "locomo-recall.png",
    }
    paths["markdown"].write_text(markdown_report(result), encoding="utf-8")
    body = {"meta": result.meta, "systems": result.systems, "paper_dragon": PAPER_DRAGON}
    paths["json"].write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    with paths["questions"].open("w", encoding="utf-8") as fh:
        for entry in result.per_question:
            fh.write(json.dumps(entry, sort_keys=True) + "\n")
    if not write_chart(result, paths["chart"]):
        paths.pop("chart")
    return paths
