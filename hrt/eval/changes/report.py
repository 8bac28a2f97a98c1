"""The outputs of a run: the summary (:func:`summarise`), its markdown tables and the two files
(``changes-summary.json``, ``changes-questions.jsonl``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hrt.eval.changes.data import KINDS, composition
from hrt.eval.changes.metrics import OVERALL, aggregate, micro_supersession
from hrt.eval.changes.runner import MODES, PHRASES, ConversationRun

SUMMARY_FILE = "changes-summary.json"
QUESTIONS_FILE = "changes-questions.jsonl"
MODE_LABELS = {PHRASES: "key phrases (the headline)", "query": "the query alone"}
COLUMNS = (
    ("current_first", "current first"),
    ("current_retrieved", "current retrieved"),
    ("outdated_unmarked", "outdated unmarked ↓"),
    ("empty", "empty ↓"),
    ("control_superseded", "control superseded ↓"),
    ("recall@5", "R@5"),
    ("recall@10", "R@10"),
)


def summarise(runs: Sequence[ConversationRun], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The run's summary: what ran, the metrics per mode (overall and per question kind), and the
    supersessions the store holds against the labels (overall, per conversation kind, per
    conversation)."""
    lines = [line for run in runs for line in run.questions]
    conversations = [run.conversation for run in runs]
    calls = sorted(ms for run in runs for ms in run.call_ms)
    return {
        "meta": {
            **meta,
            "conversations": len(runs),
            "questions": len(lines),
            "messages": sum(len(c.messages) for c in conversations),
            "composition": composition(conversations),
            "conversation_calls": len(calls),
            "call_ms_p50": round(calls[len(calls) // 2], 2) if calls else None,
        },
        "metrics": {
            mode: _ordered(aggregate((line["kind"], line["modes"][mode]["metrics"]) for line in lines))
            for mode in MODES
        },
        "supersession": supersession_summary(runs),
    }


def supersession_summary(runs: Sequence[ConversationRun]) -> dict[str, Any]:
    by_kind = {
        kind: micro_supersession(r.score for r in runs if r.conversation.kind == kind)
        for kind in KINDS
        if any(r.conversation.kind == kind for r in runs)
    }
    return {
        "overall": micro_supersession(r.score for r in runs),
        "by_kind": by_kind,
        "conversations": {
            r.conversation.id: {
                "kind": r.conversation.kind,
                "pairs": [list(p) for p in r.score.pairs],
                "outdated": sorted(r.conversation.outdated),
                "reverted": sorted(r.conversation.reverted),
                "ended": r.ended,
                "correct": r.score.correct,
                "precision": r.score.precision,
                "recall": r.score.recall,
            }
            for r in runs
        },
    }


def _ordered(groups: Mapping[str, dict[str, float | None]]) -> dict[str, dict[str, float | None]]:
    """``overall`` first, then the kinds in their order."""
    order = [OVERALL, *KINDS]
    return {g: groups[g] for g in sorted(groups, key=lambda g: order.index(g) if g in order else len(order))}


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def markdown(summary: Mapping[str, Any]) -> str:
    """The metrics' table per mode, then the supersessions' table."""
    meta = summary["meta"]
    out = [
        f"Changed facts: {meta['conversations']} conversations, {meta['questions']} questions, "
        f"{meta['messages']} messages ({meta['per_call']} a call); embedder {meta['embedder']}; "
        f"{meta['memory_units_asked']} memory units asked, as of a day after each conversation. "
        "Percent of questions; ↓ lower is better.",
        "",
    ]
    for mode, groups in summary["metrics"].items():
        out += [f"**{MODE_LABELS.get(mode, mode)}**", ""]
        out.append("| questions | " + " | ".join(label for _, label in COLUMNS) + " |")
        out.append("|---|" + "---:|" * len(COLUMNS))
        for group, values in groups.items():
            label = f"{group} ({int(values['n'] or 0)})"
            out.append(f"| {label} | " + " | ".join(_percent(values[m]) for m, _ in COLUMNS) + " |")
        out.append("")
    out += supersession_table(summary["supersession"])
    return "\n".join(out) + "\n"


def supersession_table(supersession: Mapping[str, Any]) -> list[str]:
    out = [
        "**supersessions the store holds** (pairs new -> old from the memory units' `supersedes`)",
        "",
        "| conversations | with any | pairs | correct | precision | outdated | superseded | recall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rows = {"all": supersession["overall"], **supersession["by_kind"]}
    for group, s in rows.items():
        cells = [
            f"{int(s['with_supersessions'])}",
            f"{int(s['pairs'])}",
            f"{int(s['correct'])}",
            _percent(s["precision"]),
            f"{int(s['outdated'])}",
            f"{int(s['outdated_superseded'])}",
            _percent(s["recall"]),
        ]
        out.append(f"| {group} ({int(s['conversations'])}) | " + " | ".join(cells) + " |")
    return out


def write_outputs(summary: Mapping[str, Any], runs: Sequence[ConversationRun], out: Path) -> dict[str, Path]:
    """``changes-summary.json`` (the summary) and ``changes-questions.jsonl`` (a line per
    question: its labels and, per mode, both responses as message indices and its metrics)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"summary": out / SUMMARY_FILE, "questions": out / QUESTIONS_FILE}
    paths["summary"].write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    with paths["questions"].open("w", encoding="utf-8") as f:
        for run in runs:
            for line in run.questions:
                f.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
    return paths
