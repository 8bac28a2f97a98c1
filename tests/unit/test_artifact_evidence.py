"""``artifact_evidence`` "source": an artifact reached from a memory unit over DERIVED_FROM takes
that memory unit's semantic term when it is higher than its own (hrt/pipeline/scoring.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hrt.config import Settings, Weights
from hrt.contract import Limits, RetrieveRequest
from hrt.ingest import parse_jsonl
from hrt.pipeline.render import how_found
from hrt.pipeline.scoring import Evidence, PreferenceBook, Scored, derived_source, score_candidates
from hrt.records import EdgeType, Kind
from hrt.service import HRTService
from hrt.stores.base import GraphCandidate, GraphNode, PathStep
from tests.helpers import HashingEmbedder, artifact, jsonl, mu, rel

SEMANTIC = Weights(alpha_semantic_similarity=1, beta_recency=0, gamma_salience=0, delta_user_preference=0)


def cand(ident: str, kind: Kind, seed: str | None = None, *steps: tuple[EdgeType, str], path: float = 0.0):
    node = GraphNode(id=ident, kind=kind, label=ident, ts=None, salience=0.5, category="x")
    hops = tuple(PathStep(edge=e, node_id=n, forward=False) for e, n in steps)
    return GraphCandidate(node=node, hops=len(hops), seed_id=seed or ident, path=hops, path_score=path)


def score(cands: list[GraphCandidate], direct: dict[str, float], lift: bool, **extra: object) -> dict[str, Scored]:
    evidence = Evidence(rule="scoped", own={"a": 0.2, "b2": 0.1, "c": 0.3}, artifact_source=lift, **extra)
    out = score_candidates(cands, direct, PreferenceBook.build([]), SEMANTIC, 0.0, 30.0, evidence)
    return {x.id: x for x in out}


def graph() -> list[GraphCandidate]:
    return [
        cand("m", Kind.MEMORY_UNIT),  # a seed, direct evidence 0.8
        cand("a", Kind.ARTIFACT, "m", (EdgeType.DERIVED_FROM, "a"), path=0.4),  # one hop from m
        cand("k", Kind.CONCEPT),
        cand("m2", Kind.MEMORY_UNIT, "k", (EdgeType.MENTIONS, "m2"), path=0.3),
        # two hops: k -> m2 -> b2; its source is m2, the node before it
        cand("b2", Kind.ARTIFACT, "k", (EdgeType.MENTIONS, "m2"), (EdgeType.DERIVED_FROM, "b2"), path=0.1),
        cand("s", Kind.ARTIFACT),  # a seed of its own: no path, never lifted
        cand("c", Kind.ARTIFACT, "k", (EdgeType.RELATED_TO, "c"), path=0.3),  # not derived
    ]


def test_the_source_is_the_node_before_the_last_derived_from_edge():
    by_id = {c.node.id: c for c in graph()}
    assert derived_source(by_id["a"]) == "m"
    assert derived_source(by_id["b2"]) == "m2"
    assert derived_source(by_id["s"]) is None and derived_source(by_id["c"]) is None


def test_an_artifact_takes_its_source_memory_units_term_when_higher():
    direct = {"m": 0.8, "s": 0.5, "k": 0.6}
    own = score(graph(), direct, lift=False)
    lifted = score(graph(), direct, lift=True)
    assert own["a"].semantic == pytest.approx(0.4 * 0.2)  # path x own cosine, the scoped rule
    assert lifted["a"].semantic == pytest.approx(own["m"].semantic) and lifted["a"].source == "m"
    assert lifted["b2"].semantic == pytest.approx(own["m2"].semantic) and lifted["b2"].source == "m2"
    for ident in ("s", "c", "m", "m2", "k"):  # a seed, a non-derived artifact, other kinds: unchanged
        assert lifted[ident].semantic == own[ident].semantic and lifted[ident].source is None
    order = [i for i, x in sorted(lifted.items(), key=lambda kv: -kv[1].final) if x.kind is Kind.ARTIFACT]
    assert order[0] == "a"  # the note of the best memory now leads its kind; it trailed the seed s
    before = [i for i, x in sorted(own.items(), key=lambda kv: -kv[1].final) if x.kind is Kind.ARTIFACT]
    assert before[0] == "s"


def test_an_artifact_keeps_its_own_term_when_it_is_higher():
    direct = {"m": 0.3, "a": 0.9}
    got = score(
        [cand("m", Kind.MEMORY_UNIT), cand("a", Kind.ARTIFACT, "m", (EdgeType.DERIVED_FROM, "a"))], direct, True
    )
    assert got["a"].source is None and got["a"].semantic > got["m"].semantic


def test_a_source_that_is_not_a_scored_memory_unit_lifts_nothing():
    # the node before the edge is a concept (no DERIVED_FROM goes there in HRT, but scoring does not trust it)
    direct = {"k": 0.9}
    got = score([cand("k", Kind.CONCEPT), cand("a", Kind.ARTIFACT, "k", (EdgeType.DERIVED_FROM, "a"))], direct, True)
    assert got["a"].source is None


def test_the_relevance_gate_measures_artifacts_against_the_lifted_best():
    weights = Weights()  # the defaults: recency, salience and preference count, behind the gate
    direct = {"m": 0.8, "s": 0.5}
    cands = [cand("m", Kind.MEMORY_UNIT), cand("a", Kind.ARTIFACT, "m", (EdgeType.DERIVED_FROM, "a"), path=0.4)]
    cands.append(cand("s", Kind.ARTIFACT))
    evidence = Evidence(rule="scoped", own={"a": 0.2}, gate=0.5, artifact_source=True)
    got = {x.id: x for x in score_candidates(cands, direct, PreferenceBook.build([]), weights, 0.0, 30.0, evidence)}
    assert got["a"].relevance == 1.0
    assert got["s"].relevance == pytest.approx((0.5 / 0.8 - 0.5) / 0.5)  # 0.25: against a's 0.8, not its own 0.5


async def test_a_note_of_the_best_memory_comes_back_first_with_its_source_as_evidence(tmp_path: Path):
    records = [
        mu("u1", "m1", "The launch budget was approved at forty thousand euros."),
        mu("u1", "m2", "Lunch with the design team on Friday."),
        artifact("u1", "a1", "Weekly digest: approvals and sign-offs.", title="digest"),  # derived from m1
        artifact("u1", "a2", "Lunch plans with the team.", title="lunch note"),  # derived from m2
        rel("u1", "DERIVED_FROM", "a1", "m1"),
        rel("u1", "DERIVED_FROM", "a2", "m2"),
    ]
    svc = HRTService(Settings(db_path=tmp_path / "art.db"), embedder=HashingEmbedder())
    await svc.start()
    try:
        await svc.ingest(parse_jsonl(jsonl(records)))
        limits = Limits(memory_units=2, concepts=0, artifacts=2)
        # one search hit and seed per phrase (m1): the artifacts are reached by the walk, not found
        ask = {"user_id": "u1", "key_phrases": ["launch budget approved"], "limits": limits, "max_depth": 1}
        ask["preset"] = "relevance"  # the semantic term alone: the artifact scores what its source does
        lifted = await svc.retrieve(
            RetrieveRequest.model_validate({**ask, "config": {"search_k": 1, "seeds_per_phrase": 1}})
        )
        own_config = {"search_k": 1, "seeds_per_phrase": 1, "artifact_evidence": "own"}
        own = await svc.retrieve(RetrieveRequest.model_validate({**ask, "config": own_config}))
        assert lifted.retrieved_memory_units[0].muid == "m1"
        first = lifted.retrieved_artifacts[0]
        assert first.id == "a1"
        assert lifted.retrieval_metadata.provenance["a1"].evidence == "source"
        assert how_found(lifted.retrieval_metadata.provenance["a1"], markdown=False).endswith(
            "← DERIVED_FROM a1; scored as m1, which it derives from"
        )
        assert first.final_retrieval_score == pytest.approx(lifted.retrieved_memory_units[0].final_retrieval_score)
        # the memory units are the same either way; only the artifacts' terms change
        assert [m.model_dump() for m in own.retrieved_memory_units] == [
            m.model_dump() for m in lifted.retrieved_memory_units
        ]
        assert all(p.evidence != "source" for p in own.retrieval_metadata.provenance.values())
        # a memory unit the request's filters exclude is never scored, so it lifts nothing
        alone = {**ask, "filters": {"kinds": ["artifact"]}, "config": {"search_k": 1, "seeds_per_phrase": 1}}
        only = await svc.retrieve(RetrieveRequest.model_validate(alone))
        assert only.retrieved_memory_units == [] and "a1" in only.retrieval_metadata.provenance
        assert only.retrieval_metadata.provenance["a1"].evidence != "source"
    finally:
        await svc.close()
