"""The HybridRetrievalTool end to end on the embedded store (hashing embedder: the subject here is
the pipeline, not embedding quality)."""

from __future__ import annotations

import json
import re

import pytest

from hrt.contract import AugmentedMemoryContext, RetrieveRequest
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from tests.conftest import FIXED_NOW
from tests.helpers import HashingEmbedder, jsonl, small_graph

AS_OF = "2025-08-01T00:00:00Z"


def req(**body) -> RetrieveRequest:
    body.setdefault("user_id", "u1")
    body.setdefault("as_of", AS_OF)
    return RetrieveRequest.model_validate(body)


async def test_same_request_twice_is_byte_identical(loaded_service):
    r = req(key_phrases=["Project Phoenix timeline", "team bandwidth", "Postgres"])
    a = (await loaded_service.retrieve(r)).canonical_json()
    b = (await loaded_service.retrieve(r)).canonical_json()
    assert a == b
    AugmentedMemoryContext.model_validate_json(a)


async def test_byte_identical_after_restart(settings):
    r = req(key_phrases=["Project Phoenix timeline", "bandwidth"])
    svc = HRTService(settings, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW)
    await svc.ingest(parse_jsonl(jsonl(small_graph("u1"))))
    before = (await svc.retrieve(r)).canonical_json()
    await svc.close()
    reopened = HRTService(settings, embedder=HashingEmbedder())  # a new process would do the same
    try:
        assert (await reopened.retrieve(r)).canonical_json() == before
    finally:
        await reopened.close()


async def test_as_of_defaults_to_now_and_is_echoed(loaded_service):
    out = await loaded_service.retrieve(RetrieveRequest(user_id="u1", key_phrases=["Postgres"]))
    assert out.retrieval_metadata.as_of == "2025-08-01T00:00:00Z"


async def test_as_of_hides_what_did_not_exist_yet(loaded_service):
    now = await loaded_service.retrieve(req(key_phrases=["Postgres billing tables"]))
    assert {"m3", "m4"} & {m.muid for m in now.retrieved_memory_units}
    before = await loaded_service.retrieve(req(key_phrases=["Postgres billing tables"], as_of="2025-06-20T00:00:00Z"))
    assert not {"m3", "m4"} & {m.muid for m in before.retrieved_memory_units}
    assert before.retrieval_metadata.as_of == "2025-06-20T00:00:00Z"


async def test_summary_numbers_equal_the_documents_counts(loaded_service):
    out = await loaded_service.retrieve(req(key_phrases=["Project Phoenix", "bandwidth", "zzzz qqqq"]))
    s = out.retrieval_summary
    nums = [int(x) for x in re.findall(r"\b\d+\b", s)]
    sd = out.scoring_details
    assert f"Processed {len(out.retrieval_metadata.key_phrases_processed)} key phrases" in s
    assert f"Found {sd.seed_entities_identified_from_key_phrases} seed" in s
    assert (
        f"Expanded to {sd.total_candidates_considered} graph candidates at depth {sd.graph_traversal_depth_used}" in s
    )
    assert (
        f"top {len(out.retrieved_memory_units)} MemoryUnits, {len(out.retrieved_concepts)} Concepts, "
        f"{len(out.retrieved_artifacts)} Artifacts"
    ) in s
    assert out.unmatched_key_phrases == ["zzzz qqqq"] and "['zzzz qqqq']" in s
    assert len(nums) >= 6
    grounding = out.retrieval_metadata.phrase_grounding
    assert sum(1 for g in grounding if not g.matched) == len(out.unmatched_key_phrases)
    assert len({i for g in grounding for i in g.seed_ids}) == sd.seed_entities_identified_from_key_phrases


async def test_every_item_carries_a_consistent_breakdown(loaded_service):
    out = await loaded_service.retrieve(req(key_phrases=["Project Phoenix", "Postgres"]))
    w = out.scoring_details.weights_used
    gate = out.retrieval_metadata.relevance_gate
    assert gate.threshold == 0.5  # HRT_RELEVANCE_GATE's default
    kinds = [("memory_unit", out.retrieved_memory_units), ("concept", out.retrieved_concepts)]
    kinds.append(("artifact", out.retrieved_artifacts))
    items = [(kind, it) for kind, group in kinds for it in group]
    assert items
    for kind, it in items:
        b = it.score_breakdown
        # what a caller can recompute from the breakdown, the weights and the gate (docs/api.md, Scoring)
        best = gate.best_semantic[kind]
        relevance = min(1.0, max(0.0, (b.semantic / best - gate.threshold) / (1 - gate.threshold)))
        expected = w.alpha_semantic_similarity * b.semantic + relevance * (
            w.beta_recency * b.recency + w.gamma_salience * b.salience + w.delta_user_preference * b.preference
        )
        assert it.final_retrieval_score == pytest.approx(expected, abs=1e-3)
        assert all(0.0 <= v <= 1.0 for v in (b.semantic, b.recency, b.salience, b.preference))
    for group in (out.retrieved_memory_units, out.retrieved_concepts, out.retrieved_artifacts):
        scores = [g.final_retrieval_score for g in group]
        assert scores == sorted(scores, reverse=True)


async def test_near_duplicates_are_removed(loaded_service):
    out = await loaded_service.retrieve(req(key_phrases=["Postgres billing tables migrated"]))
    ids = [m.muid for m in out.retrieved_memory_units]
    assert ("m3" in ids) != ("m4" in ids), ids
    assert out.retrieval_metadata.near_duplicates_removed >= 1


async def test_weights_override_is_normalised_and_echoed(loaded_service):
    out = await loaded_service.retrieve(
        req(
            key_phrases=["Phoenix"],
            weights={
                "alpha_semantic_similarity": 2,
                "beta_recency": 1,
                "gamma_salience": 1,
                "delta_user_preference": 0,
            },
        )
    )
    w = out.scoring_details.weights_used
    assert (w.alpha_semantic_similarity, w.beta_recency, w.gamma_salience, w.delta_user_preference) == (
        0.5,
        0.25,
        0.25,
        0.0,
    )
    preset = await loaded_service.retrieve(req(key_phrases=["Phoenix"], weights_preset="recent"))
    assert preset.scoring_details.weights_used.beta_recency == pytest.approx(0.45)


async def test_filters(loaded_service):
    out = await loaded_service.retrieve(
        req(key_phrases=["Phoenix", "Postgres", "bandwidth"], filters={"kinds": ["memory_unit"], "tags": ["infra"]})
    )
    assert out.retrieved_concepts == [] and out.retrieved_artifacts == []
    assert {m.muid for m in out.retrieved_memory_units} <= {"m3", "m4"}
    agents = await loaded_service.retrieve(
        req(key_phrases=["Phoenix", "bandwidth"], filters={"source_agent_ids": ["meeting-agent"]})
    )
    assert [m.muid for m in agents.retrieved_memory_units] == ["m1"]
    window = await loaded_service.retrieve(
        req(
            key_phrases=["Phoenix", "bandwidth", "Postgres"],
            filters={"time_range": {"start": "2025-06-11T00:00:00Z", "end": "2025-06-30T00:00:00Z"}},
        )
    )
    assert {m.muid for m in window.retrieved_memory_units} == {"m2"}


async def test_limits_and_depth_zero(loaded_service):
    out = await loaded_service.retrieve(
        req(key_phrases=["Phoenix"], limits={"memory_units": 1, "concepts": 0, "artifacts": 0}, max_depth=0)
    )
    assert len(out.retrieved_memory_units) <= 1 and out.retrieved_concepts == []
    assert out.scoring_details.graph_traversal_depth_used == 0
    assert out.retrieval_metadata.stages["expansion"] == "skipped"
    assert (
        out.scoring_details.total_candidates_considered == out.scoring_details.seed_entities_identified_from_key_phrases
    )


async def test_connected_concepts_and_related_memory_units(loaded_service):
    out = await loaded_service.retrieve(req(key_phrases=["Project Phoenix brainstorm"]))
    m1 = next(m for m in out.retrieved_memory_units if m.muid == "m1")
    assert [(c.id, c.name) for c in m1.connected_concept_ids_and_names] == [("c-phx", "Project Phoenix")]
    phx = next(c for c in out.retrieved_concepts if c.id == "c-phx")
    assert [(r.id, r.title) for r in phx.related_top_memory_unit_ids_and_titles] == [("m1", "Phoenix brainstorm")]
    assert phx.key_properties_values == {"due": "2025-12-31", "lead": "Maya"}


async def test_missing_records_are_reported_not_dropped(loaded_service):
    svc = loaded_service
    with svc.stores.in_process.file.transaction() as db:  # simulate a projection that outlived its record
        db.execute("DELETE FROM entities WHERE user_id = 'u1' AND id = 'm1'")
    out = await svc.retrieve(req(key_phrases=["Project Phoenix brainstorm"]))
    md = out.retrieval_metadata
    assert md.missing_records == {"memory_unit": ["m1"]}
    assert md.degraded and "records missing for 1 memory_unit" in md.degraded_reasons[0]
    assert "m1" not in {m.muid for m in out.retrieved_memory_units}


async def test_a_user_with_nothing_stored_gets_an_empty_context(loaded_service):
    """A new user's first turn (the agent asks before anything was written): a well-formed, empty
    AugmentedMemoryContext, every phrase unmatched, the stages after intake skipped, marked
    ``user_known: false``; byte-identical run after run."""
    body = req(
        user_id="nobody",
        key_phrases=["Project Phoenix", "in July 2025"],
        seed_ids=["c-phx"],
        render={"format": "compact"},
    )
    out = await loaded_service.retrieve(body)
    md = out.retrieval_metadata
    assert out.retrieved_memory_units == out.retrieved_concepts == out.retrieved_artifacts == []
    assert out.unmatched_key_phrases == ["Project Phoenix", "in July 2025"] == md.key_phrases_processed
    assert [(g.key_phrase, g.matched, g.seed_ids) for g in md.phrase_grounding] == [
        ("Project Phoenix", False, []),
        ("in July 2025", False, []),
    ]
    assert md.user_known is False and md.user_id == "nobody" and not md.degraded
    assert md.stages == {
        "intake": "ok",
        "grounding": "skipped",
        "expansion": "skipped",
        "scoring": "skipped",
        "hydration": "skipped",
        "rerank": "skipped",
        "selection": "skipped",
        "assembly": "ok",
    }
    details = out.scoring_details
    assert details.total_candidates_considered == details.seed_entities_identified_from_key_phrases == 0
    assert md.seed_grounding is not None and md.seed_grounding.unknown == ["c-phx"] and md.seed_grounding.found == []
    assert md.validity.suppressed == {"memory_unit": 0, "concept": 0, "artifact": 0} and md.validity.intervals == {}
    assert [w.text for w in md.time_windows] == ["July 2025"]  # as a known user's request reports them
    assert (
        "Processed 2 key phrases" in out.retrieval_summary and "top 0 MemoryUnits, 0 Concepts" in out.retrieval_summary
    )
    assert md.rendered is not None and md.rendered.included == [] and md.rendered.left_out == []
    assert "Nothing is stored about this user yet." in md.rendered.text
    text = out.canonical_json()
    assert '"user_known":false' in text and text == (await loaded_service.retrieve(body)).canonical_json()
    known = (await loaded_service.retrieve(req(key_phrases=["Project Phoenix"]))).canonical_json()
    assert "user_known" not in known  # absent for a user with something stored: their bytes as before


async def test_query_and_messages_build_phrases(loaded_service):
    q = await loaded_service.retrieve(req(query="  What about   Postgres?  "))
    assert q.retrieval_metadata.key_phrases_processed == ["What about Postgres?"]
    assert q.retrieval_metadata.key_phrase_source == "query"
    msgs = [{"role": "user", "content": f"message {i} " + "x" * 300} for i in range(5)]
    m = await loaded_service.retrieve(req(messages=msgs))
    processed = m.retrieval_metadata.key_phrases_processed
    assert len(processed) == 3 and processed[0].startswith("message 2") and all(len(p) <= 200 for p in processed)


async def test_phrases_are_deduplicated_case_insensitively(loaded_service):
    out = await loaded_service.retrieve(req(key_phrases=["Postgres", "postgres ", "POSTGRES", "Phoenix"]))
    assert out.retrieval_metadata.key_phrases_processed == ["Postgres", "Phoenix"]


async def test_canonical_json_has_no_nan_and_rounded_scores(loaded_service):
    out = await loaded_service.retrieve(req(key_phrases=["Phoenix", "Postgres"]))
    text = out.canonical_json()
    data = json.loads(text)
    for item in data["retrieved_memory_units"]:
        for v in item["score_breakdown"].values():
            assert v is None or round(v, 4) == v


class _GatedEmbedder:
    """Wraps an embedder; ``embed`` (run in a worker thread) waits until the test lets it go, or
    raises, so the test can see what ran while the phrases were being embedded."""

    def __init__(self, inner, fail: bool = False) -> None:
        import threading

        self.inner, self.fail = inner, fail
        self.dim, self.name, self.model_id = inner.dim, inner.name, inner.model_id
        self.started, self.go = threading.Event(), threading.Event()

    def embed_queries(self, texts):
        self.started.set()
        assert self.go.wait(10), "the test never released the embedding"
        if self.fail:
            raise RuntimeError("embedder broke")
        return self.inner.embed(texts)


async def test_lexical_leg_runs_while_the_phrases_are_embedded(loaded_service):
    import asyncio

    tool = loaded_service.tool
    r = req(key_phrases=["Project Phoenix timeline", "Postgres"])
    expected = (await loaded_service.retrieve(r)).canonical_json()
    index = loaded_service.vectors
    lexical_calls: list[bool] = []  # per call: was the embedding still running?
    original_lexical = index._lexical
    gated = _GatedEmbedder(tool.embedder)

    def spy(*args, **kwargs):
        lexical_calls.append(not gated.go.is_set())
        return original_lexical(*args, **kwargs)

    index._lexical, tool.embedder = spy, gated
    try:
        task = asyncio.ensure_future(tool.run(r))
        for _ in range(500):  # the lexical leg finishes before the embedding is released
            if lexical_calls:
                break
            await asyncio.sleep(0.01)
        assert gated.started.is_set() and lexical_calls == [True]
        gated.go.set()
        got = (await task).response.canonical_json()
    finally:
        index._lexical, tool.embedder = original_lexical, gated.inner
        gated.go.set()
    assert got == expected  # the same answer as with the vectors in hand


async def test_a_failed_embedding_fails_the_request_and_leaves_nothing_running(loaded_service):
    import asyncio

    tool = loaded_service.tool
    gated = _GatedEmbedder(tool.embedder, fail=True)
    gated.go.set()
    tool.embedder = gated
    try:
        before = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
        with pytest.raises(RuntimeError, match="embedder broke"):
            await tool.run(req(key_phrases=["Postgres"]))
        leftover = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} - before
        assert not [t for t in leftover if not t.done()]
    finally:
        tool.embedder = gated.inner


async def test_a_user_with_nothing_stored_is_answered_without_any_search(loaded_service):
    index = loaded_service.vectors
    calls: list[str] = []
    original_scope = index._scope
    index._scope = lambda user_id, *a, **k: calls.append(user_id) or original_scope(user_id, *a, **k)
    try:
        empty = await loaded_service.retrieve(req(user_id="nobody", key_phrases=["Postgres"]))
        assert empty.retrieval_metadata.user_known is False
        await loaded_service.retrieve(req(key_phrases=["Postgres"]))
    finally:
        index._scope = original_scope
    assert set(calls) == {"u1"}  # no cache is built for a user that does not exist (u1's request did search)


async def test_vector_leg_runs_while_the_lexical_leg_is_still_running(loaded_service):
    """The vector leg starts as soon as the phrase vectors are in, not after the lexical leg (at
    1M documents the lexical leg outlasts the embedding), and the answer is the same."""
    import threading

    r = req(key_phrases=["Project Phoenix timeline", "Postgres"])
    expected = (await loaded_service.retrieve(r)).canonical_json()
    index = loaded_service.vectors
    original_lexical, original_vector = index._lexical, index._vector_ranked
    vector_started = threading.Event()
    released_by_vector_leg: list[bool] = []

    def slow_lexical(*args, **kwargs):
        # holds the lexical leg until the vector leg has started (or 5 s: then it was not started)
        released_by_vector_leg.append(vector_started.wait(5))
        return original_lexical(*args, **kwargs)

    def vector(*args, **kwargs):
        vector_started.set()
        return original_vector(*args, **kwargs)

    index._lexical, index._vector_ranked = slow_lexical, vector
    try:
        got = (await loaded_service.retrieve(r)).canonical_json()
    finally:
        index._lexical, index._vector_ranked = original_lexical, original_vector
    assert released_by_vector_leg == [True]
    assert got == expected


def test_needs_own_names_the_candidates_each_rule_weighs_by_their_own_cosine():
    from hrt.pipeline.expansion import needs_own
    from hrt.records import Kind
    from hrt.stores.base import GraphCandidate, GraphNode

    def cand(ident: str, hops: int, reached_at: int | None = None) -> GraphCandidate:
        n = GraphNode(id=ident, kind=Kind.MEMORY_UNIT, label=ident, ts=None, salience=0.5, category="x")
        return GraphCandidate(n, hops, "s", (), 0.5, reached_at=reached_at)

    # a seed, a hit and a non-hit one hop out, a hit and a non-hit two hops out, and a node first
    # reached one hop out whose best path (found deeper) has three edges
    cands = [cand("s", 0), cand("h1", 1), cand("r1", 1), cand("h2", 2), cand("r2", 2), cand("d1", 3, 1)]
    hits = {"s": 0.9, "h1": 0.5, "h2": 0.4, "d1": 0.3}
    assert needs_own(cands, hits, "path") == []
    assert needs_own(cands, hits, "path_x_cosine") == ["r1", "r2"]
    assert needs_own(cands, hits, "scoped") == ["r1", "h2", "r2"]


async def test_own_similarities_are_one_read_of_what_the_rule_needs(loaded_service, settings):
    from hrt.pipeline.expansion import needs_own, own_similarities, run_expansion
    from hrt.pipeline.grounding import run_grounding
    from hrt.pipeline.intake import run_intake

    svc = loaded_service
    r = req(key_phrases=["Project Phoenix timeline", "team bandwidth"], max_depth=2)
    cfg = svc.settings.retrieval()
    intake = run_intake(r, cfg, FIXED_NOW)
    vectors = svc.embedder.embed(list(intake.phrases))
    grounding = await run_grounding(intake, vectors, svc.vectors, cfg.grounding)
    cands = await run_expansion(intake, grounding, svc.graph, cfg.expansion)
    assert all(c.distance <= c.hops for c in cands)  # a better path found deeper keeps the distance
    from hrt.records import Kind

    units = sorted(c.node.id for c in cands if c.node.kind is Kind.MEMORY_UNIT)
    assert units
    for rule in ("path", "path_x_cosine", "scoped"):
        wanted = needs_own(cands, grounding.similarity, rule)
        own, unit_own = await own_similarities(intake, cands, grounding.similarity, vectors, svc.vectors, rule)
        assert own == (await svc.vectors.similarities("u1", wanted, vectors) if wanted else {})
        assert unit_own == {}
        # with passages in use: the same own cosines, and every memory unit's, in the same read
        own, unit_own = await own_similarities(
            intake, cands, grounding.similarity, vectors, svc.vectors, rule, units=True
        )
        assert own == (await svc.vectors.similarities("u1", wanted, vectors) if wanted else {})
        assert unit_own == await svc.vectors.similarities("u1", units, vectors)


@pytest.mark.parametrize("rule", ["path", "path_x_cosine", "scoped"])
async def test_every_reached_evidence_rule_is_deterministic_and_hashed(loaded_service, settings, rule):
    r = req(key_phrases=["Project Phoenix timeline", "team bandwidth"], max_depth=3)
    chosen = settings.model_copy(update={"reached_evidence": rule})
    x = HRTService(chosen, embedder=HashingEmbedder(), clock=lambda: FIXED_NOW)
    try:
        first, again = (await x.retrieve(r)).canonical_json(), (await x.retrieve(r)).canonical_json()
        assert first == again
        doc = AugmentedMemoryContext.model_validate_json(first)
        assert doc.retrieved_memory_units
        if rule != "scoped":
            assert doc.retrieval_metadata.config_hash != settings.fingerprint()
    finally:
        await x.close()


async def test_a_date_in_a_phrase_ranks_memories_of_that_time_first_and_is_reported(loaded_service):
    phrases = ["Phoenix timeline resource allocation", "Postgres billing"]
    plain = await loaded_service.retrieve(req(key_phrases=phrases, max_depth=1))
    dated = await loaded_service.retrieve(req(key_phrases=[phrases[0], phrases[1] + " in July 2025"], max_depth=1))
    assert plain.retrieval_metadata.time_windows == []
    assert not plain.retrieved_memory_units[0].creation_ts.startswith("2025-07")  # June first without the date
    (w,) = dated.retrieval_metadata.time_windows
    assert (w.key_phrase, w.text) == ("Postgres billing in July 2025", "July 2025")
    assert (w.start, w.end) == ("2025-06-30T00:00:00Z", "2025-08-02T00:00:00Z")
    july = [m.creation_ts.startswith("2025-07") for m in dated.retrieved_memory_units]
    assert any(july) and july == sorted(july, reverse=True)  # the month's memories first


async def test_a_question_that_grounds_nothing_gets_a_best_effort_answer_flagged(loaded_service):
    """No phrase reaches its floor: each phrase's best hits seed the walk anyway, the answer says so,
    and the phrases stay unmatched; a phrase that grounds makes no best effort."""
    out = await loaded_service.retrieve(req(key_phrases=["zzzz qqqq"]))
    effort = out.retrieval_metadata.best_effort
    assert effort is not None and effort.phrases == ["zzzz qqqq"] and effort.seed_ids
    assert out.unmatched_key_phrases == ["zzzz qqqq"]
    assert out.retrieved_memory_units or out.retrieved_concepts or out.retrieved_artifacts
    assert '"best_effort"' in out.canonical_json()
    grounded = await loaded_service.retrieve(req(key_phrases=["Project Phoenix", "zzzz qqqq"]))
    assert grounded.retrieval_metadata.best_effort is None and '"best_effort"' not in grounded.canonical_json()


def test_each_phrase_keeps_its_best_memory_unit() -> None:
    """Phrase A's three hits outrank phrase B's one: with two places, B's hit takes the place of A's
    second-best, and the order stays by score; a near-duplicate of a kept item holds no place."""
    from hrt.contract import Limits
    from hrt.pipeline.scoring import make_scored
    from hrt.pipeline.selection import select
    from hrt.records import Kind
    from hrt.stores.base import GraphCandidate, GraphNode

    def item(ident: str, final: float):
        node = GraphNode(ident, Kind.MEMORY_UNIT, ident, 5.0, 0.5, "note")
        candidate = GraphCandidate(node, 0, ident, (), 0.0)
        return make_scored(candidate, final, 0.5, 0.5, 0.5, final, None, 1.0, None, False, ())

    ranked = [item("a1", 0.9), item("a2", 0.8), item("a3", 0.7), item("b1", 0.4)]
    texts = {"a1": "alpha one", "a2": "alpha two words", "a3": "alpha three", "b1": "beta one only"}
    phrases = {"a1": ["A"], "a2": ["A"], "a3": ["A"], "b1": ["B"]}
    limits = Limits.model_validate({"memory_units": 2})
    plain, _ = select({Kind.MEMORY_UNIT: ranked}, texts, limits, 0.9)
    held, _ = select({Kind.MEMORY_UNIT: ranked}, texts, limits, 0.9, phrases)
    assert [s.id for s in plain[Kind.MEMORY_UNIT]] == ["a1", "a2"]
    assert [s.id for s in held[Kind.MEMORY_UNIT]] == ["a1", "b1"]
    twin = {**texts, "b1": "alpha one"}  # B's best is a near-duplicate of A's: A's two stay
    kept, _ = select({Kind.MEMORY_UNIT: ranked}, twin, limits, 0.9, phrases)
    assert [s.id for s in kept[Kind.MEMORY_UNIT]] == ["a1", "a2"]
