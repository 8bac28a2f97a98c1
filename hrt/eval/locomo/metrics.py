"""The metrics: evidence recall@k, nDCG@10, MRR, the artifact-credited recall, candidate recall and,
for the systems that render (:mod:`hrt.eval.locomo.rendered`), the share of evidence turns whose
text the rendered context holds within a token budget; per question (:func:`question_metrics`) and
per category (:func:`aggregate`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

KS = (5, 10, 25)
NDCG_K = 10
# the token budgets (cl100k_base) of the rendered-text metrics: "rendered@1000" is the share of
# evidence turns whose text a system's rendering of what it returned holds within 1,000 tokens
RENDER_BUDGETS = (1000, 2000, 4000)
RENDER_TOKENIZER = "cl100k_base"
# HRT's compact render (the agent's text), HRT's markdown render, a baseline's turn texts in rank order
RENDERED_KINDS = ("rendered", "rendered-markdown")

CATEGORY_NAMES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
OVERALL = "overall"  # categories 1-4
ALL = "all"  # categories 1-5


@dataclass(frozen=True, slots=True)
class Ranking:
    memory_units: list[str]  # muids, best first
    mixed: list[frozenset[str]]  # memory units and artifacts best first, each as the turns it covers
    candidates: frozenset[str] | None = None  # every memory unit the system considered, at any rank
    # per rendered metric ("rendered@1000", ...): the memory units whose text the rendering holds
    rendered: Mapping[str, frozenset[str]] = field(default_factory=dict)


def rendered_metric(kind: str, budget: int) -> str:
    return f"{kind}@{budget}"


RENDERED_METRICS = tuple(rendered_metric(k, b) for k in RENDERED_KINDS for b in RENDER_BUDGETS)


def recall_at(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Share of the relevant ids among the first ``k`` ranked ones (LoCoMo's evidence recall)."""
    rel = set(relevant)
    if not rel:
        return 0.0
    return len(rel.intersection(ranked[:k])) / len(rel)


def covered_recall_at(ranked: Sequence[Iterable[str]], relevant: Iterable[str], k: int) -> float:
    """Recall where each ranked item covers a set of ids (a turn itself, an artifact the turns it
    is DERIVED_FROM): share of the relevant ids covered by the first ``k`` items."""
    rel = set(relevant)
    if not rel:
        return 0.0
    covered: set[str] = set()
    for item in ranked[:k]:
        covered.update(item)
    return len(rel & covered) / len(rel)


def ndcg_at(ranked: Sequence[str], relevant: Iterable[str], k: int) -> float:
    """Binary-relevance nDCG@k: sum of 1/log2(rank + 1) over relevant hits, over the ideal sum."""
    rel = set(relevant)
    if not rel:
        return 0.0
    dcg = sum(1.0 / math.log2(r + 1) for r, item in enumerate(ranked[:k], start=1) if item in rel)
    ideal = sum(1.0 / math.log2(r + 1) for r in range(1, min(k, len(rel)) + 1))
    return dcg / ideal


def reciprocal_rank(ranked: Sequence[str], relevant: Iterable[str]) -> float:
    rel = set(relevant)
    for r, item in enumerate(ranked, start=1):
        if item in rel:
            return 1.0 / r
    return 0.0


METRICS = (
    *(f"recall@{k}" for k in KS),
    f"ndcg@{NDCG_K}",
    "mrr",
    *(f"recall@{k}+artifacts" for k in KS),
    "candidates",
)


def question_metrics(ranking: Ranking, evidence: frozenset[str]) -> dict[str, float]:
    """Recall@k, nDCG@10, reciprocal rank, the artifact-credited recall@k and candidate recall:
    the share of evidence turns the system considered at all, at any rank (an HRT system's scored
    memory units; a baseline's search hits), the ceiling of any ranking of them."""
    out = {f"recall@{k}": recall_at(ranking.memory_units, evidence, k) for k in KS}
    out[f"ndcg@{NDCG_K}"] = ndcg_at(ranking.memory_units, evidence, NDCG_K)
    out["mrr"] = reciprocal_rank(ranking.memory_units, evidence)
    for k in KS:
        out[f"recall@{k}+artifacts"] = covered_recall_at(ranking.mixed, evidence, k)
    pool = ranking.candidates if ranking.candidates is not None else frozenset(ranking.memory_units)
    out["candidates"] = len(evidence & pool) / len(evidence) if evidence else 0.0
    for name, shown in ranking.rendered.items():  # only the systems that render
        out[name] = len(evidence & shown) / len(evidence) if evidence else 0.0
    return out


def aggregate(rows: Sequence[tuple[int, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Mean of each metric (as a percentage) per category, ``overall`` (1-4) and ``all`` (1-5)."""
    groups: dict[str, list[Mapping[str, float]]] = defaultdict(list)
    for category, metrics in rows:
        groups[str(category)].append(metrics)
        groups[ALL].append(metrics)
        if category != 5:
            groups[OVERALL].append(metrics)
    out: dict[str, dict[str, float]] = {}
    for name in sorted(groups, key=_group_order):
        items = groups[name]
        present = [*METRICS, *(m for m in RENDERED_METRICS if all(m in x for x in items))]
        summary = {m: round(100.0 * sum(x[m] for x in items) / len(items), 2) for m in present}
        summary["n"] = len(items)
        out[name] = summary
    return out


def _group_order(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (100 if name == OVERALL else 101, name)


PER_QUESTION_METRICS = ("recall@5", "recall@10", "recall@25", "ndcg@10", "mrr", "recall@10+artifacts", "candidates")
