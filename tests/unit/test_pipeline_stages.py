"""The pipeline's stages as parts: what each provides, the runner's prefetches, the stages the
response reports, assembly without a store, and the public trace (embedded store, hashing embedder)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from hrt.contract import RetrieveRequest
from hrt.pipeline import PIPELINE, REPORTED, RequestTrace
from hrt.pipeline.assembly import assembly_stage
from hrt.pipeline.context import RequestContext
from hrt.records import Kind

AS_OF = "2025-08-01T00:00:00Z"
PHRASES = ["Project Phoenix timeline", "team bandwidth", "Postgres"]


def req(**body: Any) -> RetrieveRequest:
    body.setdefault("user_id", "u1")
    body.setdefault("as_of", AS_OF)
    return RetrieveRequest.model_validate(body)


class NoStore:
    """A store every use of which fails the test: the stage given it must not read."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"assembly read a store: {name}")


async def _context_before_assembly(tool: Any, request: RetrieveRequest) -> RequestContext:
    cfg, config_hash, applied = tool.config_for(request)
    ctx = RequestContext(request, cfg, config_hash, applied, tool.clock())
    for stage in PIPELINE[:-1]:
        status = await tool._run_stage(stage, ctx)  # skipped for a user nothing was stored for
        if stage.reported_as is None:
            ctx.stages[stage.name] = status
    return ctx


@pytest.mark.parametrize("user", ["u1", "nobody"])
async def test_assembly_reads_no_store_and_builds_the_same_response(loaded_service, user: str) -> None:
    tool = loaded_service.tool
    request = req(user_id=user, key_phrases=PHRASES, render={"max_tokens": 400})
    expected = (await tool.run(request)).response.canonical_json()
    ctx = await _context_before_assembly(tool, request)
    assert PIPELINE[-1].name == "assembly"
    stores = SimpleNamespace(
        graph=NoStore(), vectors=NoStore(), records=NoStore(), metrics=tool.metrics, deployment=tool.deployment
    )
    assert await assembly_stage(ctx, stores) == "ok"  # type: ignore[arg-type]
    assert ctx.response.canonical_json() == expected


async def test_a_stage_reported_as_another_is_timed_but_not_reported(loaded_service) -> None:
    retrieval = await loaded_service.tool.run(req(key_phrases=PHRASES, max_depth=0))
    stages = retrieval.response.retrieval_metadata.stages
    assert list(stages) == list(REPORTED)
    assert stages["expansion"] == "skipped"  # depth 0: validity's "ok" does not overwrite it
    assert {"validity", "neighbours"} <= set(retrieval.timings)
    assert [s.reported_as for s in PIPELINE if s.reported_as] == ["expansion", "assembly"]


async def test_a_failed_validity_read_settles_the_evidence_prefetch(loaded_service, monkeypatch) -> None:
    """Validity's graph read fails while the vector reads expansion's prefetch started are in
    flight: the request fails with the read's error and leaves nothing running."""
    tool = loaded_service.tool
    started = asyncio.Event()
    release = asyncio.Event()
    cancelled: list[bool] = []
    original = tool.vectors.similarities

    async def slow_similarities(*args: Any, **kwargs: Any) -> Any:
        started.set()
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return await original(*args, **kwargs)

    async def broken_neighbors(*args: Any, **kwargs: Any) -> Any:
        await started.wait()  # the prefetch is in flight
        raise RuntimeError("graph broke")

    monkeypatch.setattr(tool.vectors, "similarities", slow_similarities)
    monkeypatch.setattr(tool.graph, "neighbors", broken_neighbors)
    before = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}
    with pytest.raises(RuntimeError, match="graph broke"):
        await tool.run(req(key_phrases=PHRASES, max_depth=2))
    leftover = {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} - before
    assert not [t for t in leftover if not t.done()]
    assert cancelled == [True]


async def test_the_trace_is_what_the_stages_produced(loaded_service) -> None:
    tool = loaded_service.tool
    request = req(key_phrases=PHRASES, max_depth=2)
    traced = await tool.run(request, trace=True)
    plain = await tool.run(request)
    assert traced.response.canonical_json() == plain.response.canonical_json()  # asking changes no answer
    trace = traced.trace
    assert isinstance(trace, RequestTrace)
    assert list(trace.intake.phrases) == traced.response.retrieval_metadata.key_phrases_processed
    assert trace.intake.depth == 2 and trace.cfg.fingerprint() == traced.response.retrieval_metadata.config_hash
    assert set(trace.grounding.seeds) <= {c.node.id for c in trace.candidates}
    scored = [s.id for s in trace.scored]
    assert set(scored) <= {c.node.id for c in trace.candidates}
    returned = [m.muid for m in traced.response.retrieved_memory_units]
    assert returned and set(returned) <= set(scored)
    assert {s.id for s in trace.scored if s.kind is Kind.MEMORY_UNIT} >= set(returned)
    assert len(trace.scored) == traced.response.scoring_details.total_candidates_considered
