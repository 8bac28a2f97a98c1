"""``--misses``: why evidence turns are not candidates.

For every question, on a store a run kept (``--db``), the headline request is grounded and walked
by the pipeline itself (its :class:`~hrt.pipeline.RequestTrace`: the same seeds and
candidates as the run's ``hrt`` system, whose candidate recall this reproduces). Every evidence
turn the walk does not reach is put in the first class that applies, D being the request's depth:

- ``cap: fan-out``, ``cap: per kind``, ``cap: both``: a path of at most D hops from a seed
  exists, and the walk's caps cut it: the walk reaches the turn with ``fanout_per_node`` lifted,
  with ``max_candidates_per_kind`` lifted, or only with both lifted;
- ``too common``: a path of at most D hops exists only through a concept the import left out as
  named in too many turns (:func:`~hrt.eval.locomo.importer.too_common`);
- ``no concept``: the turn MENTIONS no concept but its speaker;
- ``D+1 hops``: the nearest seed is one hop too far (the path's shape is counted too);
- ``further``: more than D+1 hops from every seed, or no path at all.

Paths are counted over the store's graph as the walk sees it (every edge but SUPERSEDES, nodes as
of the question's ``as_of``), with no cap, and never through a speaker's concept: every turn
MENTIONS its speaker, so nearly every turn is two hops from any seed that way, of which the walk
takes ``fanout_per_node`` per speaker (hundreds of links). How many misses such a path reaches
within D hops is counted beside the classes (``through a speaker``). Batch imports only
(``--ingest batch``): the classes read the import's too-common concepts.
"""

from __future__ import annotations

import json
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hrt.eval.locomo.importer import ImportedConversation, speaker_concept_id
from hrt.eval.locomo.metrics import CATEGORY_NAMES
from hrt.eval.locomo.questions import Question
from hrt.eval.locomo.systems import EvalConfig, request_for
from hrt.pipeline import HybridRetrievalTool
from hrt.records import WALKED_EDGES, EdgeType, Kind
from hrt.stores.base import ExpansionCaps, GraphEdge, GraphNode

UNCAPPED = 1_000_000  # a fan-out or per-kind cap no LoCoMo conversation reaches

# (edge, node id, forward): a step of a path, as GraphCandidate's path steps
Step = tuple[EdgeType, str, bool]
# node id -> its walked links (other node id, edge, forward), in id order
Adjacency = Mapping[str, Sequence[tuple[str, EdgeType, bool]]]


def classes(depth: int) -> tuple[str, ...]:
    """The classes in the order they are tried (module docstring)."""
    return (
        "cap: fan-out",
        "cap: per kind",
        "cap: both",
        "too common",
        "no concept",
        f"{depth + 1} hops",
        "further",
    )


def adjacency(
    edges: Iterable[GraphEdge], extra: Mapping[str, Iterable[str]] | None = None
) -> dict[str, list[tuple[str, EdgeType, bool]]]:
    """Every walked edge seen from both ends, each node's links in (other id, edge, forward) order;
    ``extra`` adds MENTIONS from an id to each node it names (the too-common concepts)."""
    out: dict[str, list[tuple[str, EdgeType, bool]]] = {}
    for e in edges:
        if e.type not in WALKED_EDGES:
            continue
        out.setdefault(e.source, []).append((e.target, e.type, True))
        out.setdefault(e.target, []).append((e.source, e.type, False))
    for ident, others in (extra or {}).items():
        for other in others:
            out.setdefault(ident, []).append((other, EdgeType.MENTIONS, True))
            out.setdefault(other, []).append((ident, EdgeType.MENTIONS, False))
    for links in out.values():
        links.sort(key=lambda link: (link[0], link[1].value, not link[2]))
    return out


def nearest_path(
    adj: Adjacency, seeds: Iterable[str], target: str, max_hops: int, passable: Callable[[str], bool]
) -> tuple[str, tuple[Step, ...]] | None:
    """A shortest path of at most ``max_hops`` from a seed to ``target`` (seed, steps), through
    nodes ``passable`` allows (the seeds must be passable too), breadth first in id order: the same
    inputs give the same path. None when there is none."""
    start = sorted(s for s in seeds if passable(s))
    parent: dict[str, tuple[str, EdgeType, bool] | None] = dict.fromkeys(start)
    hops = dict.fromkeys(start, 0)
    queue = deque(start)
    while queue:
        node = queue.popleft()
        if node == target:
            steps: list[Step] = []
            at = node
            while (p := parent[at]) is not None:
                steps.append((p[1], at, p[2]))
                at = p[0]
            return at, tuple(reversed(steps))
        if hops[node] >= max_hops:
            continue
        for other, edge, forward in adj.get(node, ()):
            if other not in parent and (other == target or passable(other)):
                parent[other] = (node, edge, forward)
                hops[other] = hops[node] + 1
                queue.append(other)
    return None


def shape(seed_kind: str, steps: Sequence[Step], kind_of: Callable[[str], str]) -> str:
    """A path as its kinds and edges: ``artifact -DERIVED_FROM-> memory_unit -MENTIONS-> concept``."""
    parts = [seed_kind]
    for edge, node, forward in steps:
        parts.append(f"-{edge.value}->" if forward else f"<-{edge.value}-")
        parts.append(kind_of(node))
    return " ".join(parts)


@dataclass(slots=True)
class Miss:
    """One evidence turn the walk did not reach: why, and the nearest path (no speaker on it)."""

    sample_id: str
    qa_index: int
    category: int
    muid: str
    reason: str
    hops: int | None  # of the nearest path through no speaker, up to depth + 1; None: further
    speaker: bool  # the uncapped walk reaches it within the depth (a path through a speaker's concept)
    seed: str | None
    path: tuple[Step, ...] = ()
    shape: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "sample_id": self.sample_id,
            "qa_index": self.qa_index,
            "category": self.category,
            "muid": self.muid,
            "reason": self.reason,
            "hops": self.hops,
            "speaker": self.speaker,
            "seed": self.seed,
            "path": [[e.value, n, f] for e, n, f in self.path],
            "shape": self.shape,
        }


@dataclass(slots=True)
class MissReport:
    depth: int
    evidence: Counter[int] = field(default_factory=Counter)  # category -> evidence turns
    reached: Counter[int] = field(default_factory=Counter)  # category -> of them, candidates
    recall: dict[int, list[float]] = field(default_factory=dict)  # category -> per-question candidate recall
    misses: list[Miss] = field(default_factory=list)
    seeds: Counter[str] = field(default_factory=Counter)  # seeds by kind, over all questions
    questions: int = 0
    units: int = 0  # memory-unit candidates, over all questions (what the walk costs scoring)

    def table(self) -> dict[str, dict[str, int]]:
        """Class -> group (a category's name, ``overall (1-4)``, ``all (1-5)``) -> misses; then, of
        the misses no cap explains, those a path through a speaker reaches within the depth."""
        out = {r: self._row([m for m in self.misses if m.reason == r]) for r in classes(self.depth)}
        out[f"of the others, within {self.depth} hops through a speaker"] = self._row(
            [m for m in self.misses if m.speaker and not m.reason.startswith("cap")]
        )
        return out

    @staticmethod
    def _row(misses: Sequence[Miss]) -> dict[str, int]:
        row = {_group(c): sum(1 for m in misses if m.category == c) for c in CATEGORY_NAMES}
        row["overall (1-4)"] = sum(row[_group(c)] for c in (1, 2, 3, 4))
        row["all (1-5)"] = row["overall (1-4)"] + row[_group(5)]
        return row

    def shapes(self, category: int | None = None, top: int = 8) -> list[tuple[str, int]]:
        """The most common shapes of the ``D+1 hops`` misses (of one category, or all)."""
        far = f"{self.depth + 1} hops"
        counts = Counter(m.shape for m in self.misses if m.reason == far and category in (None, m.category))
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top]

    def as_json(self) -> dict[str, Any]:
        groups = {_group(c): c for c in CATEGORY_NAMES}
        return {
            "depth": self.depth,
            "questions": self.questions,
            "evidence_turns": {g: self.evidence[c] for g, c in groups.items()},
            "candidates": {g: self.reached[c] for g, c in groups.items()},
            "candidate_recall": {g: round(_mean(self.recall.get(c, [])), 2) for g, c in groups.items()},
            "misses": self.table(),
            "shapes": {"all": self.shapes(), "multi-hop": self.shapes(1)},
            "seeds_per_question": {k: round(v / max(1, self.questions), 2) for k, v in sorted(self.seeds.items())},
            "memory_units_per_question": round(self.units / max(1, self.questions), 1),
        }


def _group(category: int) -> str:
    return CATEGORY_NAMES.get(category, f"category {category}")


def _mean(values: Sequence[float]) -> float:
    return 100.0 * sum(values) / len(values) if values else 0.0


COMMON = "common:"  # the id prefix of a too-common concept the analysis adds to the graph


@dataclass(slots=True)
class MissGraph:
    """One user's graph as the analysis reads it: adjacency without and with the too-common
    concepts (ids ``common:<key>``), the nodes, the speakers' concepts."""

    adj: Adjacency
    with_common: Adjacency
    nodes: Mapping[str, GraphNode]
    speakers: frozenset[str]

    @classmethod
    def build(
        cls,
        edges: Sequence[GraphEdge],
        nodes: Mapping[str, GraphNode],
        speakers: Iterable[str],
        too_common: Mapping[str, Iterable[str]],
    ) -> MissGraph:
        """From the store's edges and nodes, the speakers' concept ids and, per entity id, the keys
        of the too-common concepts its text names."""
        common = {ident: [COMMON + k for k in keys] for ident, keys in too_common.items()}
        return cls(adjacency(edges), adjacency(edges, common), nodes, frozenset(speakers))

    def kind_of(self, ident: str) -> str:
        return Kind.CONCEPT.value if ident.startswith(COMMON) else self.nodes[ident].kind.value


async def _user_graph(tool: HybridRetrievalTool, conv: ImportedConversation) -> MissGraph:
    edges = await tool.graph.edges(conv.user_id)
    nodes = await tool.graph.nodes(conv.user_id)
    return MissGraph.build(edges, nodes, [speaker_concept_id(s) for s in conv.speakers], conv.too_common)


async def classify_question(
    tool: HybridRetrievalTool, q: Question, g: MissGraph, config: EvalConfig, depth: int | None, report: MissReport
) -> None:
    """Ground and walk ``q``'s headline request as the pipeline does; add its evidence turns and
    the reason for each one the walk missed to ``report``."""
    request = request_for(q, config, depth, config.weights)
    trace = (await tool.run(request, trace=True)).trace
    assert trace is not None  # asked for
    cfg, intake, grounding, candidates = trace.cfg, trace.intake, trace.grounding, trace.candidates
    reached = {c.node.id for c in candidates if c.node.kind is Kind.MEMORY_UNIT}
    report.questions += 1
    report.units += len(reached)
    report.seeds.update(g.nodes[s].kind.value if s in g.nodes else "unknown" for s in grounding.seeds)
    report.evidence[q.category] += len(q.evidence)
    report.reached[q.category] += len(q.evidence & reached)
    report.recall.setdefault(q.category, []).append(len(q.evidence & reached) / len(q.evidence))
    missed = sorted(q.evidence - reached)
    if not missed:
        return
    d = intake.depth
    not_after = intake.as_of.timestamp()
    lifted: dict[str, Set[str]] = {}
    e = cfg.expansion
    for name, fanout, per_kind in (
        ("fan-out", UNCAPPED, e.max_candidates_per_kind),
        ("per kind", e.fanout_per_node, UNCAPPED),
        ("both", UNCAPPED, UNCAPPED),
    ):
        caps = ExpansionCaps(depth=d, fanout_per_node=fanout, max_per_kind=per_kind, hop_decay=e.hop_decay)
        walked = await tool.graph.expand(
            intake.user_id, grounding.seeds, caps, not_after=not_after, valid_at=intake.validity_filter
        )
        lifted[name] = {c.node.id for c in walked}

    for muid in missed:
        reason, hops, near = reason_for(muid, grounding.seeds, d, g, lifted, not_after)
        seed, steps = near if near is not None else (None, ())
        report.misses.append(
            Miss(
                sample_id=q.sample_id,
                qa_index=q.index,
                category=q.category,
                muid=muid,
                reason=reason,
                hops=hops,
                speaker=muid in lifted["both"],
                seed=seed,
                path=steps,
                shape=shape(g.kind_of(seed), steps, g.kind_of) if seed is not None else "",
            )
        )


def reason_for(
    muid: str,
    seeds: Iterable[str],
    depth: int,
    g: MissGraph,
    lifted: Mapping[str, Set[str]],
    not_after: float | None,
) -> tuple[str, int | None, tuple[str, tuple[Step, ...]] | None]:
    """Why the walk from ``seeds`` to ``depth`` missed ``muid`` (module docstring): the class, the
    hops of the nearest path through no speaker (up to ``depth`` + 1; None beyond) and that path
    (seed, steps). ``lifted`` holds what the walk reaches with ``fan-out``, ``per kind`` and
    ``both`` caps lifted."""

    def passable(ident: str) -> bool:
        if ident in g.speakers:
            return False
        if ident.startswith(COMMON):
            return True
        node = g.nodes.get(ident)
        return node is not None and (not_after is None or node.ts is None or node.ts <= not_after)

    near = nearest_path(g.adj, seeds, muid, depth + 1, passable)
    hops = len(near[1]) if near is not None else None
    if hops is not None and hops <= depth:
        for name in ("fan-out", "per kind"):
            if muid in lifted[name]:
                return f"cap: {name}", hops, near
        return "cap: both", hops, near
    common = nearest_path(g.with_common, seeds, muid, depth, passable)
    if common is not None:
        return "too common", len(common[1]), common
    if not any(
        edge is EdgeType.MENTIONS and forward and other not in g.speakers
        for other, edge, forward in g.adj.get(muid, ())
    ):
        return "no concept", hops, near
    if hops == depth + 1:
        return f"{depth + 1} hops", hops, near
    return "further", hops, near


async def analyse(
    tool: HybridRetrievalTool,
    imported: Sequence[ImportedConversation],
    questions: Sequence[Question],
    config: EvalConfig,
    depth: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> MissReport:
    """Every question's evidence turns the walk of its headline request misses, classified
    (module docstring); ``depth`` None is the configuration's default depth."""
    by_user = {c.user_id: c for c in imported}
    graphs = {u: await _user_graph(tool, c) for u, c in by_user.items()}
    d = depth if depth is not None else tool.config.expansion.default_depth
    report = MissReport(depth=d)
    for i, q in enumerate(questions):
        await classify_question(tool, q, graphs[q.user_id], config, depth, report)
        if progress is not None and (i + 1) % 100 == 0:
            progress(f"{i + 1}/{len(questions)} questions")
    return report


def markdown(report: MissReport) -> str:
    """The candidate recall the walk reproduces, the classes per category, the commonest shapes."""
    groups = [_group(c) for c in CATEGORY_NAMES]
    data = report.as_json()
    head = "| | " + " | ".join(groups) + " | overall (1-4) | all (1-5) |"
    rule = "|---|" + "---:|" * (len(groups) + 2)
    ev, cand = report.evidence, report.reached
    overall = [sum(ev[c] for c in (1, 2, 3, 4)), sum(cand[c] for c in (1, 2, 3, 4))]
    every = [sum(ev.values()), sum(cand.values())]
    lines = [
        f"Evidence turns the walk of the headline request (depth {report.depth}) does not reach, by reason "
        f"({report.questions} questions):",
        "",
        head,
        rule,
        "| candidate recall (per question) | "
        + " | ".join(f"{v:.1f}" for v in data["candidate_recall"].values())
        + f" | {_mean([r for c in (1, 2, 3, 4) for r in report.recall.get(c, [])]):.1f}"
        + f" | {_mean([r for rs in report.recall.values() for r in rs]):.1f} |",
        "| evidence turns | " + " | ".join(str(ev[c]) for c in CATEGORY_NAMES) + f" | {overall[0]} | {every[0]} |",
        "| not candidates | "
        + " | ".join(str(ev[c] - cand[c]) for c in CATEGORY_NAMES)
        + f" | {overall[0] - overall[1]} | {every[0] - every[1]} |",
    ]
    for reason, row in data["misses"].items():
        lines.append(f"| {reason} | " + " | ".join(str(v) for v in row.values()) + " |")
    lines += ["", f"Shapes of the {report.depth + 1}-hop paths (all categories / multi-hop):", ""]
    multi = dict(report.shapes(1, top=100))
    lines += [f"- {n} / {multi.get(s, 0)}: `{s}`" for s, n in report.shapes()]
    seeds = ", ".join(f"{k} {v}" for k, v in data["seeds_per_question"].items())
    per = data["memory_units_per_question"]
    lines += ["", f"Seeds per question: {seeds}; memory-unit candidates per question: {per}."]
    return "\n".join(lines) + "\n"


def write_misses(report: MissReport, out: Path) -> dict[str, Path]:
    """``locomo-misses.md`` (the tables), ``locomo-misses.json`` (the counts) and
    ``locomo-misses.jsonl`` (every miss: ids, reason, nearest path; no text of the data)."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "markdown": out / "locomo-misses.md",
        "json": out / "locomo-misses.json",
        "jsonl": out / "locomo-misses.jsonl",
    }
    paths["markdown"].write_text(markdown(report), encoding="utf-8")
    paths["json"].write_text(json.dumps(report.as_json(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    paths["jsonl"].write_text(
        "".join(json.dumps(m.as_json(), sort_keys=True) + "\n" for m in report.misses), encoding="utf-8"
    )
    return paths
