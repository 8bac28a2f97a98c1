"""``hrt eval locomo`` on a small made-up conversation in LoCoMo's JSON shape (never the real data):
the importer, the extractor, the metrics, and one run of the whole command."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hrt.eval import locomo as L
from hrt.records import Artifact, Concept, EdgeType, MemoryUnit, Relation
from tests.helpers import HashingEmbedder


def fixture_sample() -> dict[str, Any]:
    """Two sessions between Ava and Ben: a pottery class, a trip to Lisbon, a dog named Pixel."""
    return {
        "sample_id": "demo-test",
        "conversation": {
            "speaker_a": "Ava",
            "speaker_b": "Ben",
            "session_1_date_time": "9:15 am on 3 March, 2024",
            "session_1": [
                {"speaker": "Ava", "dia_id": "D1:1", "text": "Hi Ben! I signed up for a pottery class downtown."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice! Is the pottery class on weekends?"},
                {
                    "speaker": "Ava",
                    "dia_id": "D1:3",
                    "text": "Yes, Saturday mornings. Look at my first bowl!",
                    "img_url": ["https://example.invalid/bowl.jpg"],
                    "blip_caption": "a photo of a blue ceramic bowl on a table",
                },
                {"speaker": "Ben", "dia_id": "D1:4", "text": "I am planning a trip to Lisbon with my sister."},
            ],
            "session_2_date_time": "6:40 pm on 10 March, 2024",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "Lisbon was amazing, the tram rides were fun."},
                {"speaker": "Ava", "dia_id": "D2:2", "text": "My dog Pixel broke the ceramic bowl from pottery class."},
                {"speaker": "Ben", "dia_id": "D2:3", "text": "Oh no, poor bowl! Is Pixel okay?"},
            ],
            "session_3_date_time": "1:00 pm on 20 March, 2024",  # a date without a session
        },
        "session_summary": {
            "session_1_summary": "Ava started a pottery class; Ben plans a Lisbon trip with his sister.",
            "session_2_summary": "Ben enjoyed Lisbon. Ava's dog Pixel broke her bowl.",
        },
        "observation": {
            "session_1_observation": {
                "Ava": [["Ava takes a pottery class on Saturday mornings.", "D1:3"]],
                "Ben": [["Ben plans a trip to Lisbon with his sister.", "D1:4"]],
            },
            "session_2_observation": {
                "Ava": [["Ava has a dog named Pixel.", ["D2:2"]]],
                "Ben": [["Ben rode trams in Lisbon.", "D2:1"], ["Cites nothing we know.", "D9:9"]],
            },
        },
        "event_summary": {"events_session_1": {"Ava": ["Ava joins a pottery class."], "date": "3 March, 2024"}},
        "qa": [
            {"question": "What class did Ava sign up for?", "answer": "pottery", "evidence": ["D1:1"], "category": 4},
            {"question": "When did Ava sign up?", "answer": "3 March 2024", "evidence": ["D1:1"], "category": 2},
            {
                "question": "What happened to the bowl Ava made in pottery class?",
                "answer": "Pixel broke it",
                "evidence": ["D1:3; D2:2"],
                "category": 1,
            },
            {
                "question": "Where did Ben travel with his sister?",
                "answer": "Lisbon",
                "evidence": ["D1:4", "D2:1"],
                "category": 3,
            },
            {
                "question": "What is the name of Ben's dog?",
                "adversarial_answer": "Pixel",
                "evidence": ["D2:2"],
                "category": 5,
            },
            {
                "question": "A question whose evidence is unknown?",
                "answer": "x",
                "evidence": ["D7:1", "D"],
                "category": 4,
            },
        ],
    }


def by_type(records: list[Any], cls: type) -> list[Any]:
    return [r for r in records if isinstance(r, cls)]


def edges(records: list[Any], edge: EdgeType) -> list[Relation]:
    return [r for r in records if isinstance(r, Relation) and r.type is edge]


# --- importer --------------------------------------------------------------------------------


def test_import_turns_become_memory_units_with_session_timestamps() -> None:
    conv = L.import_conversation(fixture_sample())
    mus = by_type(conv.records, MemoryUnit)
    assert conv.user_id == "locomo-demo-test"
    assert [m.muid for m in mus] == [
        "turn:D1:1",
        "turn:D1:2",
        "turn:D1:3",
        "turn:D1:4",
        "turn:D2:1",
        "turn:D2:2",
        "turn:D2:3",
    ]
    assert mus[0].creation_ts == datetime(2024, 3, 3, 9, 15, 0, tzinfo=UTC)
    assert mus[3].creation_ts == datetime(2024, 3, 3, 9, 15, 3, tzinfo=UTC)  # fourth turn: + 3 seconds
    assert mus[4].creation_ts == datetime(2024, 3, 10, 18, 40, 0, tzinfo=UTC)
    stamps = [m.creation_ts for m in mus]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert "[image: a photo of a blue ceramic bowl on a table]" in mus[2].content
    assert mus[2].metadata["dia_id"] == "D1:3" and mus[2].source_agent_id == "Ava"
    assert conv.turn_ids["D2:2"] == "turn:D2:2"
    assert conv.as_of == datetime(2024, 3, 11, 18, 40, 2, tzinfo=UTC)  # a day after the last turn


def test_import_follows_edges_link_consecutive_turns_within_a_session() -> None:
    conv = L.import_conversation(fixture_sample())
    follows = {(r.source, r.target) for r in edges(conv.records, EdgeType.FOLLOWS)}
    assert follows == {
        ("turn:D1:2", "turn:D1:1"),
        ("turn:D1:3", "turn:D1:2"),
        ("turn:D1:4", "turn:D1:3"),
        ("turn:D2:2", "turn:D2:1"),
        ("turn:D2:3", "turn:D2:2"),
    }
    assert conv.counts["follows"] == 5


def test_import_artifacts_are_derived_from_the_turns_they_cite() -> None:
    conv = L.import_conversation(fixture_sample())
    artifacts = {a.id: a for a in by_type(conv.records, Artifact)}
    summaries = sorted(i for i, a in artifacts.items() if a.artifact_type == "session_summary")
    observations = sorted(i for i, a in artifacts.items() if a.artifact_type == "observation")
    assert summaries == ["summary:session-1", "summary:session-2"]
    assert len(observations) == 4  # the one citing an unknown dialog id is left out
    assert conv.derived_from["summary:session-1"] == {"turn:D1:1", "turn:D1:2", "turn:D1:3", "turn:D1:4"}
    assert conv.derived_from["obs:s2:ava:1"] == {"turn:D2:2"}  # evidence given as a list
    from_turns = [r for r in edges(conv.records, EdgeType.DERIVED_FROM) if r.target.startswith("turn:")]
    derived = {(r.source, r.target) for r in from_turns if not r.source.startswith("note:")}
    assert ("obs:s1:ben:1", "turn:D1:4") in derived
    assert len(derived) == 4 + 3 + 4  # summaries cover their sessions, observations their citations
    notes = {(r.source, r.target) for r in from_turns if r.source.startswith("note:")}  # the rules' own
    assert notes and all(source == "note:" + target.partition(":")[2] for source, target in notes)
    assert {a.id for a in artifacts.values() if a.artifact_type == "note"} == {source for source, _ in notes}
    # an artifact is created after the turns it is derived from
    mus = {m.muid: m for m in by_type(conv.records, MemoryUnit)}
    for aid, turns in conv.derived_from.items():
        assert all(artifacts[aid].created_at > mus[t].creation_ts for t in turns)


def test_import_concepts_mentions_and_co_occurrence() -> None:
    conv = L.import_conversation(fixture_sample(), L.ImportOptions(max_topic_df_ratio=0.5))
    concepts = {c.id: c for c in by_type(conv.records, Concept)}
    assert concepts["person:ava"].type == "person" and concepts["person:ben"].type == "person"
    names = {c.name for c in concepts.values()}
    assert {"Lisbon", "Pixel", "pottery class", "bowl"} <= names
    mentions = {(r.source, r.target): r.weight for r in edges(conv.records, EdgeType.MENTIONS)}
    lisbon = next(c.id for c in concepts.values() if c.name == "Lisbon")
    assert ("turn:D1:4", lisbon) in mentions and ("turn:D2:1", lisbon) in mentions
    assert mentions[("turn:D1:1", "person:ava")] == pytest.approx(0.1)  # a turn mentions its speaker, weakly
    related = edges(conv.records, EdgeType.RELATED_TO)
    assert related and all(0.0 < r.weight <= 1.0 and r.relation_type == "co_occurs" for r in related)
    weights = {(r.source, r.target): r.weight for r in related}
    # "pottery" and "class" appear in the same three turns: cosine of co-occurrence 3 / sqrt(3 x 3)
    assert weights[("topic:class", "topic:pottery")] == pytest.approx(1.0)
    # "bowl" (3 turns) and "ceramic" (2 turns) share two: 2 / sqrt(6)
    assert weights[("topic:bowl", "topic:ceramic")] == pytest.approx(round(2 / math.sqrt(6), 4))
    # every record is valid for ingest and every edge's ends exist
    ids = (
        {m.muid for m in by_type(conv.records, MemoryUnit)}
        | set(concepts)
        | {a.id for a in by_type(conv.records, Artifact)}
    )
    assert all(r.source in ids and r.target in ids for r in by_type(conv.records, Relation))


def test_an_observation_is_derived_from_the_concepts_it_names() -> None:
    """Issue #35: an observation links to the concepts its text names (its speaker aside), below every
    MENTIONS weight, so the walk reaches the turns behind them in two hops from the observation."""
    conv = L.import_conversation(fixture_sample())
    concepts = {c.id for c in by_type(conv.records, Concept)}
    derived = {(r.source, r.target): r.weight for r in edges(conv.records, EdgeType.DERIVED_FROM)}
    named = {(s, t) for s, t in derived if s.startswith("obs:") and t in concepts}
    assert ("obs:s2:ava:1", "entity:pixel") in named and ("obs:s1:ben:1", "entity:lisbon") in named
    assert not any(t.startswith("person:") for _, t in named)  # "Ava has a dog" names Ava: her speaker
    assert not any(s.startswith("summary:") for s, _ in named)
    assert {derived[k] for k in named} == {0.3}
    assert conv.counts["observation_concepts"] == len(named)
    weakest = min(r.weight for r in edges(conv.records, EdgeType.MENTIONS) if not r.target.startswith("person:"))
    assert weakest > 0.3
    off = L.import_conversation(fixture_sample(), L.ImportOptions(observation_concept_weight=0.0))
    assert not any(
        r.source.startswith("obs:") and r.target in concepts for r in edges(off.records, EdgeType.DERIVED_FROM)
    )
    assert off.counts["observation_concepts"] == 0


def cello_sample() -> dict[str, Any]:
    """Ava's cello in two sessions; an observation cites the first turn only."""
    return {
        "sample_id": "cello-test",
        "conversation": {
            "speaker_a": "Ava",
            "speaker_b": "Ben",
            "session_1_date_time": "9:15 am on 3 March, 2024",
            "session_1": [
                {"speaker": "Ava", "dia_id": "D1:1", "text": "I started learning the cello last week."},
                {"speaker": "Ben", "dia_id": "D1:2", "text": "Cool, enjoy it!"},
            ],
            "session_2_date_time": "6:40 pm on 10 March, 2024",
            "session_2": [
                {"speaker": "Ben", "dia_id": "D2:1", "text": "How is it going?"},
                {"speaker": "Ava", "dia_id": "D2:2", "text": "The cello lessons are hard but fun."},
            ],
        },
        "observation": {"session_1_observation": {"Ava": [["Ava is learning to play the cello.", "D1:1"]]}},
        "qa": [],
    }


@pytest.mark.parametrize(("weight", "reached"), [(0.3, True), (0.0, False)])
async def test_depth_two_reaches_a_turn_through_the_concept_an_observation_names(
    tmp_path: Path, weight: float, reached: bool
) -> None:
    """observation -> cello -> the later turn is two hops; through the cited turn it was three."""
    from hrt.config import Settings
    from hrt.service import HRTService
    from hrt.stores.base import ExpansionCaps

    conv = L.import_conversation(cello_sample(), L.ImportOptions(observation_concept_weight=weight))
    svc = HRTService(Settings(db_path=tmp_path / "cello.db"), embedder=HashingEmbedder())
    await svc.start()
    try:
        await svc.ingest(conv.records)
        caps = ExpansionCaps(depth=2, fanout_per_node=25, max_per_kind=400, hop_decay=0.5)
        found = {c.node.id: c for c in await svc.graph.expand(conv.user_id, {"obs:s1:ava:1": 1.0}, caps)}
    finally:
        await svc.close()
    assert "turn:D1:1" in found  # the cited turn, one hop out either way
    assert ("turn:D2:2" in found) is reached
    if reached:
        assert [(s.edge, s.node_id) for s in found["turn:D2:2"].path] == [
            (EdgeType.DERIVED_FROM, "topic:cello"),
            (EdgeType.MENTIONS, "turn:D2:2"),
        ]


def test_import_is_deterministic() -> None:
    a = L.import_conversation(fixture_sample())
    b = L.import_conversation(fixture_sample())
    assert [r.model_dump_json() for r in a.records] == [r.model_dump_json() for r in b.records]


def test_questions_keep_known_evidence_and_skip_the_rest() -> None:
    sample = fixture_sample()
    conv = L.import_conversation(sample)
    questions, skipped = L.build_questions(sample, conv)
    assert skipped == 1
    assert [q.category for q in questions] == [4, 2, 1, 3, 5]
    assert questions[2].evidence == {"turn:D1:3", "turn:D2:2"}  # "D1:3; D2:2" is split
    phrases = questions[3].key_phrases()
    assert phrases[0] == "Where did Ben travel with his sister?"
    assert questions[0].as_of == conv.as_of


def test_session_dates_fall_back_to_the_day_after() -> None:
    sample = fixture_sample()
    sample["conversation"]["session_2_date_time"] = "sometime"
    conv = L.import_conversation(sample)
    second = next(m for m in by_type(conv.records, MemoryUnit) if m.muid == "turn:D2:1")
    assert second.creation_ts == datetime(2024, 3, 4, 9, 15, 0, tzinfo=UTC)


# --- extractor --------------------------------------------------------------------------------


def test_extractor_finds_entities_and_topics() -> None:
    names = L.ProperNouns()
    names.learn("I went to Lisbon. We met Lisbon friends. The Lord of the Rings is long.")
    found = L.extract("Yesterday Ava read The Lord of the Rings in Lisbon, then bought ceramic bowls.", names)
    assert "Ava" in found.entities and "Lisbon" in found.entities
    assert "Lord of the Rings" in found.entities  # connectors inside a run of capitalised words
    assert "Yesterday" not in found.entities  # sentence-initial and not a name
    assert found.topics == ("bought ceramic bowls", "read", "bought", "ceramic", "bowls")


def test_extractor_is_deterministic_and_stems_as_a_key_only() -> None:
    text = "Melanie painted sunsets; painting sunsets calms Melanie's mind."
    assert L.extract(text) == L.extract(text)
    assert L.stem("painted") == L.stem("painting") == "paint"
    assert L.stem("agencies") == "agency"
    assert L.topic_key("running shoes") == "run shoe"


def test_question_phrase_modes() -> None:
    found = L.extract("What did Ava make in pottery class?")
    assert L.question_phrases("What did Ava make in pottery class?", found, "question") == (
        "What did Ava make in pottery class?",
    )
    keywords = L.question_phrases("What did Ava make in pottery class?", found, "keywords")
    assert keywords == ("What did Ava make in pottery class?", "Ava pottery class")
    anchored = L.question_phrases("What did Ava make in pottery class?", found, "anchored")
    assert anchored[1] == "Ava pottery class"
    assert all(
        len(p) <= 200 for p in L.question_phrases("x " * 300 + "Lisbon trip", L.extract("Lisbon trip"), "extracted")
    )


# --- metrics ------------------------------------------------------------------------------------


def test_recall_ndcg_and_reciprocal_rank_by_hand() -> None:
    ranked = ["a", "x", "b", "y", "z"]
    assert L.recall_at(ranked, {"a", "b", "c"}, 1) == pytest.approx(1 / 3)
    assert L.recall_at(ranked, {"a", "b", "c"}, 5) == pytest.approx(2 / 3)
    assert L.recall_at(ranked, set(), 5) == 0.0
    # relevant at ranks 1 and 3; ideal: ranks 1 and 2
    dcg = 1.0 + 1 / math.log2(4)
    ideal = 1.0 + 1 / math.log2(3)
    assert L.ndcg_at(ranked, {"a", "b"}, 10) == pytest.approx(dcg / ideal)
    assert L.ndcg_at(["x", "a"], {"a"}, 1) == 0.0
    assert L.reciprocal_rank(ranked, {"b"}) == pytest.approx(1 / 3)
    assert L.reciprocal_rank(ranked, {"q"}) == 0.0


def test_artifact_credited_recall_counts_the_turns_an_artifact_covers() -> None:
    ranked = [frozenset({"t1"}), frozenset({"t2", "t3"}), frozenset({"t4"})]
    assert L.covered_recall_at(ranked, {"t3", "t4"}, 2) == pytest.approx(0.5)
    assert L.covered_recall_at(ranked, {"t3", "t4"}, 3) == pytest.approx(1.0)


def test_aggregate_reports_categories_overall_and_all() -> None:
    ones = dict.fromkeys(L.METRICS, 1.0)
    zeros = dict.fromkeys(L.METRICS, 0.0)
    out = L.aggregate([(1, ones), (4, zeros), (5, ones)])
    assert list(out) == ["1", "4", "5", L.OVERALL, L.ALL]
    assert out[L.OVERALL]["recall@10"] == 50.0 and out[L.OVERALL]["n"] == 2
    assert out[L.ALL]["recall@10"] == pytest.approx(66.67)
    assert out["5"]["recall@10"] == 100.0


# --- the whole command --------------------------------------------------------------------------


def test_the_command_runs_end_to_end_on_the_fixture(tmp_path: Path) -> None:
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    out = tmp_path / "out"
    args = L.build_parser().parse_args(["--data", str(data), "--out", str(out), "--db", str(tmp_path / "e.db")])
    assert L.run(args, embedder=HashingEmbedder()) == 0
    body = json.loads((out / "locomo-results.json").read_text())
    assert set(body["systems"]) == set(L.SYSTEMS)
    assert body["meta"]["questions"] == 5 and body["meta"]["questions_skipped_without_evidence"] == 1
    for system in body["systems"].values():
        assert 0.0 <= system[L.OVERALL]["recall@10"] <= 100.0
        assert system[L.OVERALL]["n"] == 4 and system["5"]["n"] == 1
    # with seven turns, 25 results hold every turn: recall@25 is complete for the baselines
    assert body["systems"]["dense"][L.OVERALL]["recall@25"] == 100.0
    for system in body["systems"].values():  # candidate recall bounds every recall
        assert system[L.OVERALL]["recall@25"] <= system[L.OVERALL]["candidates"] <= 100.0
    meta = body["meta"]["hrt_systems"]
    # the headline row: the product's defaults, the weights alone overridden; the next, nothing
    assert meta["hrt"]["settings_overrides"] == {} and meta["hrt"]["weights"].startswith("semantic only")
    assert meta["hrt"]["max_depth"].startswith("HRT_DEFAULT_DEPTH")
    unweighted = meta["hrt-unweighted"]
    assert unweighted["weights"].startswith("HRT_WEIGHTS") and unweighted["settings_overrides"] == {}
    # one configuration, one hash: the default depth asked for by name is the default; another
    # depth, other weights or a preset is another configuration
    assert meta["hrt"]["config_hash"] == meta["hrt-depth2"]["config_hash"]
    hashes = [meta[n]["config_hash"] for n in ("hrt", "hrt-unweighted", "hrt-depth3", "hrt-tuned-depth1")]
    assert len(set(hashes)) == len(hashes)
    assert meta["hrt-tuned-depth1"]["preset"] == "tuned-depth1" and meta["hrt"]["preset"] is None
    table = (out / "locomo-results.md").read_text()
    assert "HRT, product defaults" in table and "nothing overridden" in table and "BM25 only" in table
    assert "66.2" in table and "Candidate recall per category" in table
    lines = (out / "locomo-questions.jsonl").read_text().splitlines()
    assert len(lines) == 5 and "question" not in json.loads(lines[0])  # no question text is copied
    first = json.loads(lines[0])["systems"]["hrt"]
    assert {"evidence_ranks", "recall@10", "ndcg@10", "recall@10+artifacts", "candidates"} <= set(first)
    assert (out / "locomo-recall.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # --compare: no run, the paired bootstrap of two runs (here a run against itself: all zero)
    assert L.main(["--compare", str(out), f"{out}:hrt"]) == 0
    report = L.compare_report(f"{out}:hrt-depth1", f"{out}:hrt-depth3")
    assert "| hrt-depth1 -> hrt-depth3 | recall@10 overall (1-4) | 4 |" in report
    same = L.compare_report(str(out), str(out))
    assert "| hrt | recall@10 overall (1-4) | 4 | +0.00 | [+0.00, +0.00] | 0 / 0 |" in same


def test_paired_bootstrap_by_hand():
    mean, lo, hi, better, worse = L.paired_bootstrap([0.0, 0.0, 1.0, 0.5], [1.0, 0.0, 1.0, 0.0])
    assert mean == pytest.approx(12.5) and (better, worse) == (1, 1)
    assert lo <= mean <= hi and lo >= -50.0 and hi <= 100.0
    assert L.paired_bootstrap([0.2] * 10, [0.2] * 10)[:3] == (0.0, 0.0, 0.0)
    assert L.paired_bootstrap([0.0, 1.0], [1.0, 1.0]) == L.paired_bootstrap([0.0, 1.0], [1.0, 1.0])  # seeded


# --- the Proposal B prototype (--experimental-path-sum) --------------------------------------


class WalkGraph:
    """A GraphStore over a fixed adjacency, expanding with the shared walk (only ``expand`` is used)."""

    def __init__(self, nodes: dict[str, Any], adjacency: dict[str, list[Any]]) -> None:
        self.nodes, self.adjacency = nodes, adjacency

    async def expand(
        self, user_id: str, seeds: Any, caps: Any, not_after: float | None = None, valid_at: float | None = None
    ) -> list[Any]:
        from hrt.stores.graph_walk import WalkView, candidates, walk

        view = WalkView(
            links=lambda i: self.adjacency.get(i, ()),
            visible=lambda i: i in self.nodes,
            kind=lambda i: self.nodes[i].kind,
            order=lambda i: i,
        )
        best = walk(view, list(seeds.items()), caps)
        return candidates(best, self.nodes.__getitem__, lambda i: i, lambda i: (), lambda i: None)


@pytest.mark.parametrize(
    ("node", "direct", "expected"),
    [
        # t1 is cited by both observations: 1 - (1 - 0.6 x 0.9) x (1 - 0.6 x 0.5), not the best 0.54
        ("t1", None, 1 - (1 - 0.54) * (1 - 0.30)),
        ("t2", None, 0.30),  # cited by o2 alone: its best path
        ("t1", 0.4, 1 - (1 - 0.4) * (1 - 0.54) * (1 - 0.30)),  # its own search evidence joins the sum
        ("o1", None, 0.9),  # a seed keeps its own score
    ],
)
async def test_noisy_or_path_evidence_sums_each_seeds_path(node: str, direct: float | None, expected: float) -> None:
    from hrt.config import Settings
    from hrt.contract import RetrieveRequest
    from hrt.pipeline.expansion import run_expansion
    from hrt.pipeline.grounding import Grounding
    from hrt.pipeline.intake import applied_config, configure, run_intake
    from hrt.records import Kind
    from hrt.stores.base import GraphNode

    def n(ident: str, kind: Kind) -> GraphNode:
        return GraphNode(id=ident, kind=kind, label=ident, ts=None, salience=0.5, category="x")

    nodes = {i: n(i, Kind.ARTIFACT) for i in ("o1", "o2")} | {i: n(i, Kind.MEMORY_UNIT) for i in ("t1", "t2")}
    cites = {"o1": ["t1"], "o2": ["t1", "t2"]}
    adjacency: dict[str, list[Any]] = {}
    for o, ts in cites.items():
        for t in ts:
            adjacency.setdefault(o, []).append((t, EdgeType.DERIVED_FROM, 1.0, True))
            adjacency.setdefault(t, []).append((o, EdgeType.DERIVED_FROM, 1.0, False))
    request = RetrieveRequest(user_id="u", key_phrases=["q"], max_depth=1)
    cfg = configure(Settings(hop_decay=0.6).retrieval(), applied_config(request))
    intake = run_intake(request, cfg, datetime(2025, 1, 1, tzinfo=UTC))
    grounding = Grounding(phrases=[], seeds={"o1": 0.9, "o2": 0.5}, similarity={"o1": 0.9, "o2": 0.5})
    if direct is not None:
        grounding.similarity[node] = direct
    graph = WalkGraph(nodes, adjacency)
    noisy = cfg.with_overrides({"path_evidence": "noisy_or"}).expansion
    out = {c.node.id: c for c in await run_expansion(intake, grounding, graph, noisy)}
    best = {c.node.id: c for c in await run_expansion(intake, grounding, graph, cfg.expansion)}
    assert set(out) == set(best) == {"o1", "o2", "t1", "t2"}  # the same candidates, no others
    assert out[node].path_score == pytest.approx(expected)
    assert best["t1"].path_score == pytest.approx(0.54)  # the default keeps the best path


def test_the_command_feeds_the_turns_through_the_conversation_route(tmp_path: Path) -> None:
    """``--ingest turns`` (the smoke form of the dev run in docs/eval-locomo.md): each session's turns
    go to HRTService.add_messages a few at a time, the artifacts after them; the questions' evidence
    ids are the route's memory units, and the ingest cost per turn is reported."""
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    out = tmp_path / "out"
    argv = ["--data", str(data), "--out", str(out), "--db", str(tmp_path / "e.db"), "--systems", "bm25", "hrt"]
    args = L.build_parser().parse_args([*argv, "--ingest", "turns", "--turns-per-call", "2"])
    assert L.run(args, embedder=HashingEmbedder()) == 0
    body = json.loads((out / "locomo-results.json").read_text())
    meta = body["meta"]
    assert meta["ingest"] == "turns" and meta["turns_per_call"] == 2 and meta["questions"] == 5
    cost = meta["ingest_cost"]
    assert cost["calls"] >= 4 and 0 < cost["turn_ms_p50"] <= cost["turn_ms_p95"]
    lines = [json.loads(line) for line in (out / "locomo-questions.jsonl").read_text().splitlines()]
    assert all(e.startswith("msg:session-") for line in lines for e in line["evidence"])
    # the route's units are found: BM25 over seven turns returns every evidence turn in 25
    assert body["systems"]["bm25"][L.OVERALL]["recall@25"] == 100.0


async def test_turn_by_turn_an_observation_links_the_concepts_the_route_made(tmp_path: Path) -> None:
    """``--ingest turns``: the artifacts' DERIVED_FROM edges point at the route's memory units, and an
    observation's at the concepts it names that the route made too; none at a node that is not there."""
    from hrt.config import Settings
    from hrt.eval.locomo.evaluation import ingest_turns
    from hrt.service import HRTService

    conv = L.import_conversation(fixture_sample())
    svc = HRTService(Settings(db_path=tmp_path / "turns.db"), embedder=HashingEmbedder())
    await svc.start()
    try:
        await ingest_turns(svc, conv, 2, [])
        kinds = await svc.graph.ids(conv.user_id)
        derived = [e for e in await svc.graph.edges(conv.user_id) if e.type is EdgeType.DERIVED_FROM]
    finally:
        await svc.close()
    assert all(e.target in kinds for e in derived)
    assert {e.target for e in derived if e.source == "obs:s2:ava:1"} == {"entity:pixel", conv.turn_ids["D2:2"]}
    assert conv.turn_ids["D2:2"].startswith("msg:session-")


def test_the_command_runs_with_path_sum_as_a_request_override(tmp_path: Path) -> None:
    from hrt.pipeline import expansion

    before = expansion.run_expansion
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    out = tmp_path / "out"
    argv = ["--data", str(data), "--out", str(out), "--db", str(tmp_path / "e.db"), "--systems", "hrt"]
    args = L.build_parser().parse_args([*argv, "--experimental-path-sum"])
    assert L.run(args, embedder=HashingEmbedder()) == 0
    assert expansion.run_expansion is before
    body = json.loads((out / "locomo-results.json").read_text())
    assert body["meta"]["config"]["experimental_path_sum"] is True
    system = body["meta"]["hrt_systems"]["hrt"]
    assert system["request_config"] == {"path_evidence": "noisy_or"}
    assert system["config_hash"] != body["meta"]["config_hash"]  # the override is in the hash


def test_the_lab_harness_compares_configurations_on_one_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scripts/locomo_lab.py (docs/eval-locomo.md, "Scoring defaults"): one import, every variant asked the
    eval's headline request; a variant equal to the first gives the same rows, and depth 0 never
    considers more evidence than the default depth."""
    import asyncio
    import importlib.util

    spec = importlib.util.spec_from_file_location("locomo_lab", Path(__file__).parents[2] / "scripts" / "locomo_lab.py")
    assert spec is not None and spec.loader is not None
    lab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lab)
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    out = tmp_path / "out"
    args = lab.build_parser().parse_args(
        [
            *("--data", str(data), "--db", str(tmp_path / "lab.db"), "--out", str(out)),
            *("--variant", "defaults={}", "--variant", 'again={"hop_decay": 0.5}', "--variant", 'd0={"max_depth": 0}'),
        ]
    )
    results = asyncio.run(lab.main(args, embedder=HashingEmbedder()))
    assert set(results) == {"defaults", "again", "d0"} and all(len(rows) == 5 for rows in results.values())
    assert results["again"] == results["defaults"]  # hop_decay 0.5 is the default: the same answers
    for deep, shallow in zip(results["defaults"], results["d0"], strict=True):
        assert shallow["systems"]["hrt"]["candidates"] <= deep["systems"]["hrt"]["candidates"]
    written = (out / "d0.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in written] == results["d0"]
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 3 and printed[1].startswith("again") and "+0.00 [+0.00, +0.00] 0/0" in printed[1]
    # --compare reads the lab's output like the command's
    assert "| hrt | recall@10 overall (1-4) | 4 |" in L.compare_report(
        f"{out / 'defaults.jsonl'}:hrt", f"{out / 'd0.jsonl'}:hrt"
    )


# --- notes and the rendered text ------------------------------------------------------------------


@pytest.mark.parametrize("ingest", ["batch", "turns"])
def test_notes_none_imports_the_rules_alone_and_dataset_the_datasets_notes(tmp_path: Path, ingest: str) -> None:
    """``--notes none`` (the default): neither LoCoMo's session summaries nor its observations reach the
    store, in batch and turn by turn; ``--notes dataset``: both, as before. Echoed in meta and report."""
    import asyncio

    from hrt.config import Settings
    from hrt.service import HRTService

    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    counts: dict[str, dict[str, int]] = {}
    for notes in ("none", "dataset"):
        out, db = tmp_path / f"out-{notes}", tmp_path / f"{notes}.db"
        argv = ["--data", str(data), "--out", str(out), "--db", str(db), "--systems", "bm25", "hrt"]
        extra = [] if notes == "none" else ["--notes", "dataset"]  # none is the default
        args = L.build_parser().parse_args([*argv, "--ingest", ingest, *extra])
        assert L.run(args, embedder=HashingEmbedder()) == 0
        meta = json.loads((out / "locomo-results.json").read_text())["meta"]
        assert meta["notes"] == notes and meta["ingest"] == ingest
        options = meta["import_options"]
        assert options["with_summaries"] is options["with_observations"] is (notes == "dataset")
        assert (out / "locomo-results.md").read_text().startswith(f"Notes imported: {notes}: ")

        async def stored(path: Path = db) -> dict[str, int]:
            svc = HRTService(Settings(db_path=path), embedder=HashingEmbedder())
            await svc.start()
            try:
                return await svc.records.counts("locomo-demo-test")
            finally:
                await svc.close()

        counts[notes] = asyncio.run(stored())
    notes = L.import_conversation(fixture_sample()).counts["notes"]  # the rules' own, the same turn by turn
    assert notes > 0 and counts["none"]["artifact"] == notes
    assert counts["dataset"]["artifact"] == notes + 6  # and 2 summaries, 4 observations
    assert counts["none"]["memory_unit"] == counts["dataset"]["memory_unit"] == 7


def test_the_report_counts_the_evidence_in_the_rendered_text(tmp_path: Path) -> None:
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    out = tmp_path / "out"
    argv = ["--data", str(data), "--out", str(out), "--db", str(tmp_path / "e.db")]
    assert L.run(L.build_parser().parse_args([*argv, "--systems", "hybrid-rrf", "hrt", "bm25"]), HashingEmbedder()) == 0
    body = json.loads((out / "locomo-results.json").read_text())
    assert body["meta"]["config"]["render_budgets"] == [1000, 2000, 4000]
    for name, system in body["systems"].items():
        overall = system[L.OVERALL]
        rendered = [m for m in overall if m.startswith("rendered")]
        expected = {"hrt": set(L.RENDERED_METRICS), "hybrid-rrf": {"rendered@1000", "rendered@2000", "rendered@4000"}}
        assert set(rendered) == expected.get(name, set()), name
        for kind in ("rendered", "rendered-markdown"):
            shares = [overall[f"{kind}@{b}"] for b in L.RENDER_BUDGETS if f"{kind}@{b}" in overall]
            assert shares == sorted(shares) and all(s <= overall["recall@25"] for s in shares)
    # seven short turns fit 1,000 tokens whole: every evidence turn a system returned is in the text
    assert (
        body["systems"]["hybrid-rrf"][L.OVERALL]["rendered@1000"]
        == body["systems"]["hybrid-rrf"][L.OVERALL]["recall@25"]
    )
    lines = [json.loads(line) for line in (out / "locomo-questions.jsonl").read_text().splitlines()]
    assert all("rendered@2000" in e["systems"]["hrt"] and "rendered@2000" not in e["systems"]["bm25"] for e in lines)
    table = (out / "locomo-results.md").read_text()
    assert "Evidence turns in the rendered text, within 1,000 / 2,000 / 4,000 cl100k_base tokens" in table
    assert "| HRT, product defaults (semantic weights), compact |" in table
    assert "| hybrid RRF, no graph, turn texts |" in table


async def test_the_rendered_share_is_the_requests_own_render(tmp_path: Path) -> None:
    """What hrt_rendered counts is what the request's ``render`` with ``max_tokens`` gives."""
    from hrt.config import Settings
    from hrt.contract import RenderOptions
    from hrt.eval.locomo.rendered import hrt_rendered, returned_entities, texts_rendered
    from hrt.pipeline.render import token_counter
    from hrt.service import HRTService

    conv = L.import_conversation(fixture_sample(), L.notes_options("dataset"))
    svc = HRTService(Settings(db_path=tmp_path / "r.db"), embedder=HashingEmbedder())
    await svc.start()
    try:
        await svc.ingest(conv.records)
        question = L.build_questions(fixture_sample(), conv)[0][2]
        request = L.request_for(question, L.EvalConfig(), None)
        plain = await svc.retrieve(request)
        shown = hrt_rendered(plain, await returned_entities(svc.records, plain), [60, 1000])
        for budget in (60, 1000):
            asked = request.model_copy(update={"render": RenderOptions(format="compact", max_tokens=budget)})
            r = (await svc.retrieve(asked)).retrieval_metadata.rendered
            assert shown[f"rendered@{budget}"] == frozenset(i for i in r.included if i != r.truncated)
    finally:
        await svc.close()
    # a note shown at 60 (its turn did not fit) is left out at 1,000, where its turn is shown
    turns = {b: frozenset(i for i in shown[f"rendered@{b}"] if i.startswith("turn:")) for b in (60, 1000)}
    assert turns[60] < turns[1000]
    count = token_counter("cl100k_base")
    texts = [("a", "one two three"), ("b", "four   five\nsix"), ("c", "seven " * 40)]
    budget = count("one two three\nfour five six\n")
    assert texts_rendered(texts, [budget])[f"rendered@{budget}"] == frozenset({"a", "b"})
    assert texts_rendered(texts, [budget - 1])[f"rendered@{budget - 1}"] == frozenset({"a"})


def test_side_by_side_runs_the_rules_alone_and_with_the_datasets_notes_batch_and_turns(tmp_path: Path) -> None:
    """``--side-by-side``: four runs on fresh stores, each in its own folder with what it imported,
    and one table whose rows are those runs' own figures, the headline (rules only, turn by turn)
    first."""
    data = tmp_path / "tiny-locomo.json"
    data.write_text(json.dumps([fixture_sample()]))
    out = tmp_path / "out"
    argv = ["--data", str(data), "--out", str(out), "--db", str(tmp_path / "e.db"), "--systems", "hybrid-rrf", "hrt"]
    assert L.run(L.build_parser().parse_args([*argv, "--side-by-side"]), embedder=HashingEmbedder()) == 0
    table = (out / "locomo-side-by-side.md").read_text().splitlines()
    rows = [line for line in table if line.startswith("| rules")]
    assert len(rows) == 8  # four runs, HRT and hybrid each
    assert rows[0].startswith("| rules only | turn by turn | HRT")
    assert rows[-1].startswith("| rules + the dataset's notes | batch | hybrid RRF")
    for notes, ingest in (("none", "turns"), ("none", "batch"), ("dataset", "turns"), ("dataset", "batch")):
        body = json.loads((out / f"{notes}-{ingest}" / "locomo-results.json").read_text())
        assert body["meta"]["notes"] == notes and body["meta"]["ingest"] == ingest
        hrt, hybrid = (body["systems"][s][L.OVERALL]["recall@10"] for s in ("hrt", "hybrid-rrf"))
        label = "rules only" if notes == "none" else "rules + the dataset's notes"
        row = next(
            r for r in rows if r.startswith(f"| {label} | {'turn by turn' if ingest == 'turns' else 'batch'} | HRT")
        )
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3] == f"{hrt:.1f}" and cells[-1] == f"{hrt - hybrid:+.1f}"


def test_a_deprecated_system_name_is_taken_under_its_new_name_with_a_warning(capsys) -> None:
    args = L.build_parser().parse_args(["--systems", "hybrid-rrf", "hrt-before"])
    assert args.systems == ["hybrid-rrf", "hrt-tuned-depth1"]
    assert "hrt-before is now called hrt-tuned-depth1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        L.build_parser().parse_args(["--systems", "no-such-system"])
