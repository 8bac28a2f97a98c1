"""The pipeline with ``rerank: true`` against a real llama.cpp server (the small gemma GGUF: it is
not a reranker, so this checks protocol and behaviour, not relevance)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hrt.config import Settings
from hrt.contract import AugmentedMemoryContext, RetrieveRequest
from hrt.ingest import parse_jsonl
from hrt.service import HRTService
from tests.conftest import FIXED_NOW
from tests.helpers import HashingEmbedder, jsonl, small_graph
from tests.integration.llama_server import LlamaServer, llama_server, require_llama

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def exact_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    # --n_batch 1: scores do not depend on the server's prompt-cache history (see test_llama_reranker)
    with llama_server(require_llama(), log_dir=tmp_path_factory.mktemp("llama"), extra_args=("--n_batch", "1")) as s:
        yield s


def settings_for(server: LlamaServer, tmp_path, api_key: str | None = "") -> Settings:
    """``api_key``: what HRT sends (default: the server's own key; None: none).

    The time limits are the largest the settings allow: these tests check what a reranker that
    answers does to the response, never how fast it answers. On a loaded 2-core host one cold
    document (about 120 prompt tokens, one at a time under ``--n_batch 1``) took 69 s, past the
    60 s per request these tests once gave it, and the response came back degraded. One request
    in flight: llama_cpp.server evaluates one request at a time, so a second one would spend its
    own timeout queued behind the first.
    """
    # gemma never puts yes/no in its top 20, so ask for more logprobs than a real reranker needs
    return Settings(
        db_path=tmp_path / "r.db",
        reranker_base_url=server.base_url,
        reranker_top_logprobs=1000,
        reranker_timeout_s=590,
        reranker_max_concurrency=1,
        rerank_budget_s=590,
        request_timeout_s=600,
        reranker_max_candidates=8,
        reranker_api_key=server.api_key if api_key == "" else api_key,
    )


def assert_reranked(doc: AugmentedMemoryContext, server: LlamaServer) -> None:
    """The stage ran and scored every reranked unit; on failure the message says why it did not."""
    md = doc.retrieval_metadata
    why = f"stages={md.stages} degraded_reasons={md.degraded_reasons}\n--- server log ---\n{server.log_tail(15)}"
    assert md.rerank_applied and md.stages["rerank"] == "ok" and not md.degraded, why
    reranked = [m.score_breakdown.rerank for m in doc.retrieved_memory_units]
    assert reranked and all(r is not None and 0.0 <= r <= 1.0 for r in reranked), reranked


def request(phrases: list[str], rerank: bool = True) -> RetrieveRequest:
    return RetrieveRequest(
        user_id="u1",
        key_phrases=phrases,
        rerank=rerank,
        as_of="2025-08-01T00:00:00Z",
        limits={"memory_units": 3, "concepts": 2, "artifacts": 1},
    )


async def test_rerank_true_is_valid_v94_and_deterministic_across_processes(exact_llama, tmp_path):
    outputs = []
    for run in range(2):  # two services: nothing shared but the server
        svc = await HRTService(
            settings_for(exact_llama, tmp_path / str(run)), embedder=HashingEmbedder(), clock=lambda: FIXED_NOW
        ).start()
        try:
            await svc.ingest(parse_jsonl(jsonl(small_graph("u1"))))
            outputs.append((await svc.retrieve(request(["Project Phoenix", "Postgres"]))).canonical_json())
        finally:
            await svc.close()
    docs = [AugmentedMemoryContext.model_validate_json(out) for out in outputs]
    for doc in docs:  # first: a degraded run says why, rather than failing as a difference
        assert_reranked(doc, exact_llama)
    scores = [[(m.muid, m.score_breakdown.rerank) for m in doc.retrieved_memory_units] for doc in docs]
    assert scores[0] == scores[1]
    assert outputs[0] == outputs[1]


async def test_hrt_reranks_with_the_api_key_and_degrades_without_it(exact_llama, tmp_path):
    """HRT_RERANKER_API_KEY reaches the server: with it the stage runs; without it (or with another
    key) the server refuses every call and the response says so, in the scorer's order."""
    outputs = {}
    for label, key in (("none", None), ("wrong", "not-the-key"), ("right", "")):
        svc = await HRTService(
            settings_for(exact_llama, tmp_path / label, api_key=key),
            embedder=HashingEmbedder(),
            clock=lambda: FIXED_NOW,
        ).start()
        try:
            await svc.ingest(parse_jsonl(jsonl(small_graph("u1"))))
            outputs[label] = await svc.retrieve(request(["Phoenix brainstorm"]))
            plain = await svc.retrieve(request(["Phoenix brainstorm"], rerank=False))
        finally:
            await svc.close()
        if label != "right":
            md = outputs[label].retrieval_metadata
            assert md.stages["rerank"] == "degraded" and md.degraded and not md.rerank_applied, md
            assert md.degraded_reasons[0].startswith("rerank failed")
            assert [m.muid for m in outputs[label].retrieved_memory_units] == [
                m.muid for m in plain.retrieved_memory_units
            ]
    assert_reranked(outputs["right"], exact_llama)


async def test_killing_the_server_mid_run_gives_the_degraded_fallback(tmp_path):
    with llama_server(require_llama(), log_dir=tmp_path) as server:
        svc = await HRTService(
            settings_for(server, tmp_path), embedder=HashingEmbedder(), clock=lambda: FIXED_NOW
        ).start()
        try:
            await svc.ingest(parse_jsonl(jsonl(small_graph("u1"))))
            ok = await svc.retrieve(request(["Phoenix brainstorm"]))
            assert_reranked(ok, server)
            server.kill()
            out = await svc.retrieve(request(["bandwidth constraint"]))  # new documents: no cache hit
            plain = await svc.retrieve(request(["bandwidth constraint"], rerank=False))
        finally:
            await svc.close()
    md = out.retrieval_metadata
    assert md.stages["rerank"] == "degraded" and md.degraded and not md.rerank_applied
    assert md.degraded_reasons[0].startswith("rerank failed")
    assert [m.muid for m in out.retrieved_memory_units] == [m.muid for m in plain.retrieved_memory_units]
