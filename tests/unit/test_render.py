"""The context text within a budget, each item's provenance, min_score, the shared-memory attributes
of memory units, and the second-pass prompt built on the text."""

from __future__ import annotations

import pytest

from hrt.contract import RenderOptions, RetrieveRequest
from hrt.pipeline.render import CUT_MARKER, render_context, token_counter
from hrt.prompts import render_second_pass

AS_OF = "2025-08-01T00:00:00Z"
ALL = {"memory_units": 50, "concepts": 50, "artifacts": 50}


def request(**extra) -> RetrieveRequest:
    body = {"user_id": "u1", "key_phrases": ["Project Phoenix", "bandwidth"], "as_of": AS_OF, "limits": ALL}
    return RetrieveRequest.model_validate(body | extra)


async def test_a_generous_budget_holds_every_item_in_score_order(loaded_service):
    doc = await loaded_service.retrieve(request(render={"max_chars": 100_000}))
    r = doc.retrieval_metadata.rendered
    returned = {m.muid for m in doc.retrieved_memory_units} | {c.id for c in doc.retrieved_concepts}
    returned |= {a.id for a in doc.retrieved_artifacts}
    assert set(r.included) == returned and r.left_out == [] and r.truncated is None
    assert CUT_MARKER not in r.text and "left out" not in r.text
    positions = [r.text.index(f"[{i} ·") for i in r.included]
    assert positions == sorted(positions)  # the text is in the order it reports
    scores = {m.muid: m.final_retrieval_score for m in doc.retrieved_memory_units}
    scores |= {c.id: c.final_retrieval_score for c in doc.retrieved_concepts}
    scores |= {a.id: a.final_retrieval_score for a in doc.retrieved_artifacts}
    assert [scores[i] for i in r.included] == sorted(scores.values(), reverse=True)
    assert r.budget.unit == "chars" and r.budget.used == len(r.text) <= 100_000
    assert "Brainstorm on Project Phoenix: timeline adjustments and resource allocation." in r.text  # full text


@pytest.mark.parametrize("limit", [400, 700, 1000, 1500, 2500])
async def test_a_tight_budget_is_a_greedy_prefix_with_at_most_the_last_item_cut(loaded_service, limit):
    full = (await loaded_service.retrieve(request(render={"max_chars": 100_000}))).retrieval_metadata.rendered
    r = (await loaded_service.retrieve(request(render={"max_chars": limit}))).retrieval_metadata.rendered
    assert len(r.text) <= limit and r.budget.used == len(r.text)
    assert r.included == full.included[: len(r.included)]  # a prefix of the score order
    assert r.left_out == full.included[len(r.included) :]  # nothing lost without being reported
    assert r.text.count(CUT_MARKER) == (1 if r.truncated else 0)
    if r.truncated:
        assert r.truncated == r.included[-1] and r.text.rstrip().rfind(CUT_MARKER) > r.text.rfind("[" + r.truncated)
    if r.left_out:
        assert f"{len(r.left_out)} more item" in r.text


async def test_token_budgets_count_with_the_named_tokenizer(loaded_service):
    for tokenizer in ("cl100k_base", "minilm-wordpiece"):
        doc = await loaded_service.retrieve(
            request(render={"max_tokens": 120, "tokenizer": tokenizer, "format": "text"})
        )
        r = doc.retrieval_metadata.rendered
        count = token_counter(tokenizer)
        assert r.budget.unit == "tokens" and r.budget.tokenizer == tokenizer
        assert r.budget.used == count(r.text) <= 120 < len(r.text)  # tokens, not characters
        assert r.text.startswith("MEMORY CONTEXT") and "###" not in r.text
    assert token_counter("cl100k_base")("Hello world, Project Phoenix!") == 6  # cl100k's published split


async def test_the_text_is_byte_identical_run_after_run(loaded_service):
    body = request(render={"max_chars": 900})
    first = await loaded_service.retrieve(body)
    again = await loaded_service.retrieve(body)
    assert first.canonical_json() == again.canonical_json()


def test_the_header_alone_over_the_budget_leaves_everything_out(loaded_service):
    import asyncio

    doc = asyncio.run(loaded_service.retrieve(request()))
    tiny = render_context(doc, {}, RenderOptions(max_chars=200))
    assert tiny.included == [] and len(tiny.left_out) == len(doc.retrieved_memory_units) + len(
        doc.retrieved_concepts
    ) + len(doc.retrieved_artifacts)


async def test_every_returned_item_says_how_it_was_found(loaded_service):
    doc = await loaded_service.retrieve(request(max_depth=2))
    prov = doc.retrieval_metadata.provenance
    returned = [m.muid for m in doc.retrieved_memory_units] + [c.id for c in doc.retrieved_concepts]
    returned += [a.id for a in doc.retrieved_artifacts]
    assert sorted(prov) == sorted(returned) and list(prov) == sorted(prov)
    seeds = {i for g in doc.retrieval_metadata.phrase_grounding for i in g.seed_ids}
    for ident, p in prov.items():
        assert p.seed_id in seeds and p.seed_phrases
        if ident == p.seed_id:
            assert p.hops == [] and p.evidence == "search" and p.phrases
        else:
            assert p.hops and p.hops[-1].node_id == ident and len(p.hops) <= 2
        if p.evidence == "search":  # its own hit (a seed's, with scoped evidence, even below a path)
            assert p.search_evidence is not None
        if p.evidence == "path_x_cosine":  # scoped evidence: the path times the item's own cosine
            assert p.own_similarity is not None and p.hops
        else:
            assert p.own_similarity is None
        if p.evidence == "source":  # an artifact that took the term of the memory unit before it
            assert p.kind == "artifact" and p.hops[-1].edge == "DERIVED_FROM"
    sources = {p.evidence for p in prov.values()}
    assert "search" in sources and sources <= {"search", "path", "path_x_cosine", "source"}
    reached = [p for p in prov.values() if p.hops]
    assert reached, "the small graph reaches something at depth 2"
    for p in reached:
        assert all(h.edge in ("MENTIONS", "RELATED_TO", "DERIVED_FROM", "FOLLOWS") for h in p.hops)


async def test_min_score_leaves_out_what_scores_below_it(loaded_service):
    every = await loaded_service.retrieve(request())
    scores = sorted(
        [m.final_retrieval_score for m in every.retrieved_memory_units]
        + [c.final_retrieval_score for c in every.retrieved_concepts]
        + [a.final_retrieval_score for a in every.retrieved_artifacts]
    )
    floor = scores[len(scores) // 2]
    kept = await loaded_service.retrieve(request(min_score=floor))
    finals = [m.final_retrieval_score for m in kept.retrieved_memory_units]
    finals += [c.final_retrieval_score for c in kept.retrieved_concepts]
    finals += [a.final_retrieval_score for a in kept.retrieved_artifacts]
    assert finals and min(finals) >= floor and len(finals) == sum(1 for s in scores if s >= floor)


async def test_memory_units_carry_their_agent_tags_and_metadata(loaded_service):
    doc = await loaded_service.retrieve(request(render={"max_chars": 100_000}))
    attrs = doc.retrieval_metadata.memory_unit_attributes
    assert sorted(attrs) == sorted(m.muid for m in doc.retrieved_memory_units)
    assert attrs["m1"].source_agent_id == "meeting-agent" and attrs["m1"].tags == ["phoenix"]
    assert "by meeting-agent · tags: phoenix" in doc.retrieval_metadata.rendered.text


class RecordingReranker:
    name = "recording"

    def __init__(self) -> None:
        self.queries: list[str] = []

    async def score(self, query, documents):
        self.queries.append(query)
        return [0.5] * len(documents)


async def test_the_reranker_judges_against_the_callers_question_when_there_is_one(loaded_service):
    recorder = RecordingReranker()
    loaded_service.tool.reranker = recorder
    await loaded_service.retrieve(request(rerank=True, query="  When is  Phoenix due? "))
    await loaded_service.retrieve(request(rerank=True))
    assert recorder.queries == ["When is Phoenix due?", "Project Phoenix; bandwidth"]


async def test_the_second_pass_prompt_carries_the_rendered_text(loaded_service):
    doc = await loaded_service.retrieve(request(render={"max_chars": 1200}))
    prompt = render_second_pass("what's up with Phoenix?", doc)
    assert doc.retrieval_metadata.rendered.text.strip() in prompt
    assert "<final_input_text>\nwhat's up with Phoenix?\n</final_input_text>" in prompt
    assert '"Project Phoenix", "bandwidth"' in prompt and "{" not in prompt.split("<instructions>")[0]
    plain = await loaded_service.retrieve(request())  # no render asked: the compact text
    assert "Memory context (as of 2025-08-01), best match first." in render_second_pass("hi", plain)
