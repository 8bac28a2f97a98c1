"""``--side-by-side``: the same questions under the four ways a conversation can reach HRT, one
table: the rules alone (what an HRT user has) and the rules with LoCoMo's own LLM-written notes
(session summaries and observations, which no user has), each imported in one batch and turn by
turn through the conversation route. Each run writes its own folder (``OUT/<notes>-<ingest>``);
the table is ``OUT/locomo-side-by-side.md``."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hrt.eval.locomo.metrics import CATEGORY_NAMES, OVERALL
from hrt.eval.locomo.systems import SYSTEM_LABELS

# (notes, ingest), the headline first: the rules alone, turn by turn
RUNS: tuple[tuple[str, str], ...] = (("none", "turns"), ("none", "batch"), ("dataset", "turns"), ("dataset", "batch"))
ROW_SYSTEMS = ("hrt", "hybrid-rrf")
FILE = "locomo-side-by-side.md"
NOTES_LABEL = {"none": "rules only", "dataset": "rules + the dataset's notes"}
INGEST_LABEL = {"turns": "turn by turn", "batch": "batch"}


def run_folder(out: Path, notes: str, ingest: str) -> Path:
    return out / f"{notes}-{ingest}"


def _recall(per_group: Mapping[str, Mapping[str, float]] | None, group: str) -> float | None:
    summary = (per_group or {}).get(group)
    return None if summary is None else float(summary["recall@10"])


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def side_by_side_markdown(runs: Sequence[tuple[str, str, Mapping[str, Any]]]) -> str:
    """``runs``: (notes, ingest, the run's ``systems`` from locomo-results.json). Recall@10 over
    categories 1-4 and per category for HRT and hybrid search, and HRT's lead over hybrid."""
    groups = [str(c) for c in sorted(CATEGORY_NAMES) if c != 5]
    head = ["notes", "ingest", "system", "R@10 (1-4)", *(CATEGORY_NAMES[int(g)] for g in groups), "HRT - hybrid"]
    lines = [
        "Recall@10 on the same questions, by how the conversations reached HRT (`hrt eval locomo --side-by-side`):",
        "",
        "| " + " | ".join(head) + " |",
        "|---|---|---|" + "---:|" * (len(head) - 3),
    ]
    for notes, ingest, systems in runs:
        hybrid = _recall(systems.get("hybrid-rrf"), OVERALL)
        for name in ROW_SYSTEMS:
            per_group = systems.get(name)
            if per_group is None:
                continue
            overall = _recall(per_group, OVERALL)
            lead = "" if name != "hrt" or overall is None or hybrid is None else f"{overall - hybrid:+.1f}"
            label = SYSTEM_LABELS.get(name, name)
            cells = [NOTES_LABEL.get(notes, notes), INGEST_LABEL.get(ingest, ingest), label, _fmt(overall)]
            cells += [_fmt(_recall(per_group, g)) for g in groups] + [lead]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def read_run(folder: Path) -> Mapping[str, Any]:
    """The ``systems`` of a run's locomo-results.json."""
    systems: Mapping[str, Any] = json.loads((folder / "locomo-results.json").read_text(encoding="utf-8"))["systems"]
    return systems
