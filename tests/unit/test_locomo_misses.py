"""``hrt eval locomo --misses`` (issue #35): why evidence turns are not candidates. The classes on a
hand-made graph, and the analysis of a kept store reproducing the run's candidate recall."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hrt.eval import locomo as L
from hrt.eval.locomo.misses import MissGraph, classes, nearest_path, reason_for, shape
from hrt.records import EdgeType, Kind
from hrt.stores.base import GraphEdge, GraphNode
from tests.helpers import HashingEmbedder
from tests.unit.test_locomo_eval import fixture_sample

M, D, F = EdgeType.MENTIONS, EdgeType.DERIVED_FROM, EdgeType.FOLLOWS


def node(ident: str, ts: float | None = None) -> GraphNode:
    kind = {"o": Kind.ARTIFACT, "t": Kind.MEMORY_UNIT}.get(ident[0], Kind.CONCEPT)
    return GraphNode(ident, kind, ident, ts, 0.5, "x")


def graph() -> MissGraph:
    """o1 cites t1; t1 and t2 mention c1; t2 is followed by t5, t5 by t6 (each with a concept of its
    own); every turn mentions the speaker p; t3 mentions nothing else; t1 and t4 both name a
    too-common topic, t4 also c4."""
    edges = [
        GraphEdge("o1", "t1", D),
        GraphEdge("t1", "c1", M),
        GraphEdge("t2", "c1", M),
        GraphEdge("t5", "t2", F),
        GraphEdge("t6", "t5", F),
        GraphEdge("t4", "c4", M),
        GraphEdge("t5", "c5", M),
        GraphEdge("t6", "c6", M),
        GraphEdge("t1", "t9", EdgeType.SUPERSEDES),  # never walked
        GraphEdge("t9", "t3", F),
        *(GraphEdge(t, "p", M, 0.1) for t in ("t1", "t2", "t3", "t4", "t5", "t6")),
    ]
    nodes = {n.id: n for n in map(node, ("o1", "t1", "t2", "t3", "t4", "t5", "t6", "t9", "c1", "c4", "c5", "c6", "p"))}
    return MissGraph.build(edges, nodes, ["p"], {"t1": ["topic:x"], "t4": ["topic:x"]})


NONE: dict[str, set[str]] = {"fan-out": set(), "per kind": set(), "both": set()}


@pytest.mark.parametrize(
    ("lifted", "expected"),
    [
        ({"fan-out": {"t2"}, "per kind": set(), "both": {"t2"}}, "cap: fan-out"),
        ({"fan-out": set(), "per kind": {"t2"}, "both": {"t2"}}, "cap: per kind"),
        ({"fan-out": set(), "per kind": set(), "both": {"t2"}}, "cap: both"),
    ],
)
def test_a_path_within_the_depth_that_the_walk_missed_is_a_cap(lifted: dict[str, set[str]], expected: str) -> None:
    reason, hops, near = reason_for("t2", ["t1"], 2, graph(), lifted, None)
    assert (reason, hops) == (expected, 2)
    assert near == ("t1", ((M, "c1", True), (M, "t2", False)))


def test_one_hop_too_far_and_further() -> None:
    g = graph()
    reason, hops, near = reason_for("t2", ["o1"], 2, g, NONE, None)
    assert (reason, hops) == ("3 hops", 3)
    assert near is not None and near[0] == "o1"
    assert shape(g.kind_of("o1"), near[1], g.kind_of) == (
        "artifact -DERIVED_FROM-> memory_unit -MENTIONS-> concept <-MENTIONS- memory_unit"
    )
    assert reason_for("t6", ["o1"], 2, g, NONE, None)[:2] == ("further", None)  # 5 hops
    assert reason_for("t5", ["o1"], 3, g, NONE, None)[:2] == ("4 hops", 4)  # the class follows the depth


def test_a_too_common_concept_and_a_turn_with_no_concept() -> None:
    g = graph()
    reason, hops, near = reason_for("t4", ["t1"], 2, g, NONE, None)
    assert (reason, hops) == ("too common", 2)
    assert near == ("t1", ((M, "common:topic:x", True), (M, "t4", False)))
    # t3 is two hops from t1 through the speaker only, which is no path here; SUPERSEDES is not walked
    assert reason_for("t3", ["t1"], 2, g, NONE, None) == ("no concept", None, None)


def test_speakers_and_nodes_after_as_of_are_never_passed() -> None:
    g = graph()
    assert nearest_path(g.adj, ["t1"], "t3", 5, lambda i: i != "p") is None
    assert nearest_path(g.adj, ["p"], "t3", 1, lambda i: True) == ("p", ((M, "t3", False),))
    later = MissGraph(g.adj, g.with_common, {**g.nodes, "c1": node("c1", ts=10.0)}, g.speakers)
    assert reason_for("t2", ["t1"], 2, later, NONE, 5.0)[:2] == ("further", None)
    assert reason_for("t2", ["t1"], 2, later, NONE, 20.0)[:2] == ("cap: both", 2)


def test_misses_on_a_kept_store_reproduce_the_runs_candidate_recall(tmp_path: Path) -> None:
    """A run keeps its store (--db); ``--misses`` on it grounds and walks every question again with
    the product's code: the candidate recall per category is the run's, and every evidence turn is
    either a candidate or one classified miss."""
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    db, out = tmp_path / "e.db", tmp_path / "out"
    common = ["--data", str(data), "--db", str(db), "--depth", "0"]
    assert L.run(L.build_parser().parse_args([*common, "--out", str(out), "--systems", "hrt"]), HashingEmbedder()) == 0
    assert L.run(L.build_parser().parse_args([*common, "--out", str(out), "--misses"]), HashingEmbedder()) == 0
    run = json.loads((out / "locomo-results.json").read_text())["systems"]["hrt"]
    body = json.loads((out / "locomo-misses.json").read_text())
    assert body["depth"] == 0 and body["questions"] == 5
    for c, name in L.CATEGORY_NAMES.items():
        if str(c) in run:
            assert body["candidate_recall"][name] == pytest.approx(run[str(c)]["candidates"], abs=0.01)
    misses = [json.loads(line) for line in (out / "locomo-misses.jsonl").read_text().splitlines()]
    total = sum(body["evidence_turns"].values()) - sum(body["candidates"].values())
    assert total > 0 and len(misses) == total  # depth 0 reaches the seeds alone
    assert sum(row["all (1-5)"] for reason, row in body["misses"].items() if not reason.startswith("of the")) == total
    assert {m["reason"] for m in misses} <= set(classes(0))
    assert (out / "locomo-misses.md").read_text().startswith("Evidence turns the walk")


def test_misses_need_a_kept_store(tmp_path: Path) -> None:
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    args = ["--data", str(data), "--db", str(tmp_path / "none.db"), "--out", str(tmp_path), "--misses"]
    assert L.run(L.build_parser().parse_args(args), HashingEmbedder()) == 2
