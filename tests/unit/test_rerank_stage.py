"""The rerank stage of the pipeline. The rerankers here are fakes: the subject is the pipeline's
handling of them (selection of candidates, blend, fallbacks); the real adapter has its own tests."""

from __future__ import annotations

import asyncio

import pytest

from hrt.contract import RetrieveRequest
from hrt.errors import StoreUnavailable

AS_OF = "2025-08-01T00:00:00Z"


class ScriptedReranker:
    name = "scripted"

    def __init__(self, behaviour) -> None:
        self.behaviour = behaviour
        self.calls: list[tuple[str, list[str]]] = []

    async def score(self, query, documents):
        self.calls.append((query, list(documents)))
        return await self.behaviour(query, documents)


def req(rerank=True, **extra):
    return RetrieveRequest.model_validate(
        {"user_id": "u1", "key_phrases": ["Project Phoenix", "Postgres"], "as_of": AS_OF, "rerank": rerank, **extra}
    )


async def with_reranker(service, reranker):
    service.tool.reranker = reranker
    return service


async def test_scores_are_blended_and_shown(loaded_service):
    async def prefer_ben(query, docs):  # the memory unit ranked last without the reranker
        return [0.99 if "Ben" in d else 0.01 for d in docs]

    fake = ScriptedReranker(prefer_ben)
    svc = await with_reranker(loaded_service, fake)
    plain = await svc.retrieve(req(rerank=False))
    out = await svc.retrieve(req())
    md = out.retrieval_metadata
    assert md.rerank_applied and md.stages["rerank"] == "ok" and not md.degraded
    assert fake.calls and fake.calls[0][0] == "Project Phoenix; Postgres"
    first = out.retrieved_memory_units[0]
    assert "Ben" in first.title and first.score_breakdown.rerank == 0.99
    for item in out.retrieved_memory_units:
        b = item.score_breakdown
        assert b.rerank is not None
    assert [m.muid for m in out.retrieved_memory_units] != [m.muid for m in plain.retrieved_memory_units]
    assert plain.retrieval_metadata.stages["rerank"] == "skipped"
    assert all(m.score_breakdown.rerank is None for m in plain.retrieved_memory_units)
    assert "Reranked." in out.retrieval_summary


@pytest.mark.parametrize(
    ("behaviour", "stage", "reason"),
    [
        ("raise", "degraded", "rerank failed: StoreUnavailable"),
        ("slow", "timeout", "rerank exceeded its 0.05s budget"),
        ("short", "degraded", "rerank returned a wrong number of scores"),
    ],
)
async def test_failures_fall_back_to_the_scorer_order(loaded_service, behaviour, stage, reason):
    async def act(query, docs):
        if behaviour == "raise":
            raise StoreUnavailable("reranker down")
        if behaviour == "slow":
            await asyncio.sleep(5)
        return [0.5]

    svc = await with_reranker(loaded_service, ScriptedReranker(act))
    svc.tool.reconfigure(svc.settings.model_copy(update={"rerank_budget_s": 0.05}))
    plain = await svc.retrieve(req(rerank=False))
    out = await svc.retrieve(req())
    md = out.retrieval_metadata
    assert md.stages["rerank"] == stage and md.degraded and md.degraded_reasons == [reason]
    assert not md.rerank_applied
    strip = lambda doc: [(m.muid, m.final_retrieval_score) for m in doc.retrieved_memory_units]  # noqa: E731
    assert strip(out) == strip(plain)  # the scorer's order, untouched
    assert f"Degraded: {reason}." in out.retrieval_summary


async def test_candidates_are_bounded_and_shared_across_kinds(loaded_service):
    async def flat(query, docs):
        return [0.5] * len(docs)

    fake = ScriptedReranker(flat)
    svc = await with_reranker(loaded_service, fake)
    svc.tool.reconfigure(svc.settings.model_copy(update={"reranker_max_candidates": 4, "reranker_oversample": 1}))
    await svc.retrieve(req(limits={"memory_units": 2, "concepts": 2, "artifacts": 1}))
    docs = fake.calls[0][1]
    assert len(docs) == 4  # bounded by reranker_max_candidates
    assert any("Postgres" in d or "Phoenix" in d for d in docs)


async def test_noop_reranker_is_reported_as_skipped(loaded_service):
    out = await loaded_service.retrieve(req())
    assert out.retrieval_metadata.stages["rerank"] == "skipped" and not out.retrieval_metadata.degraded
