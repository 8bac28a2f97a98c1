"""The LLM extractor against a REAL llama.cpp server (llama-cpp-python's ``llama_cpp.server``) running the
small Gemma 3 270M GGUF from PyPI, the server the reranker tests use (tests/integration/llama_server.py).
That model extracts poorly: these tests check the protocol (the request is accepted, ``response_format``
with the JSON schema included, and an answer comes back), that every answer ends as a valid
:class:`LLMExtraction` or as ``ExtractionFailed("invalid")`` (the caller's fallback to the rules), and
the translation of timeouts and server errors; never the quality of the extraction.

The GGUF carries no chat template, so the server formats chat messages with its fallback (llama-2),
which keeps the system message. llama-cpp-python serves its one model whatever ``model`` a request
names, so a wrong model name is no error here (it is one on servers that host several, e.g. llama-swap
or vLLM: see the unit tests); a wrong URL or key is.

One extraction takes some 10-20 s on a 2-core machine (the prompt is ~600 tokens): the generous
timeout below is for a loaded machine, never for a wrong answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from hrt.devstack import free_port
from hrt.extraction.llm import ChatLLMExtractor, ExtractionFailed, ExtractorMetrics, LLMExtraction
from tests.integration.llama_server import LlamaServer, llama_server, require_llama

pytestmark = pytest.mark.integration

SPEAKER = "Alice"
MESSAGE = "I moved to Berlin last month to work at Siemens with my brother Bob."
CONTEXT = ["Bob: Where do you live now, Alice?"]
TIMEOUT_S = 180.0


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = require_llama()
    with llama_server(model, log_dir=tmp_path_factory.mktemp("llama-extractor")) as server:
        yield server


def make(server: LlamaServer, **kwargs: Any) -> ChatLLMExtractor:
    kwargs.setdefault("timeout_s", TIMEOUT_S)
    kwargs.setdefault("api_key", server.api_key)  # the server refuses calls without it
    kwargs.setdefault("max_tokens", 512)
    return ChatLLMExtractor(base_url=server.base_url, **kwargs)


async def test_the_server_accepts_the_request_and_holds_the_answer_to_the_schema(llama: LlamaServer) -> None:
    """The exact body the extractor sends, posted by hand: 200, and a chat completion whose content,
    when the model stopped by itself, is a JSON object with the schema's three keys (the server compiled
    the schema into a grammar)."""
    x = make(llama)
    body = x.payload(SPEAKER, MESSAGE, CONTEXT)
    assert body["response_format"]["type"] == "json_object" and "schema" in body["response_format"]
    async with httpx.AsyncClient(timeout=TIMEOUT_S, trust_env=False) as client:
        response = await client.post(f"{llama.base_url}/v1/chat/completions", json=body, headers=llama.headers)
    assert response.status_code == 200, response.text[:500]
    choice = response.json()["choices"][0]
    content = choice["message"]["content"]
    assert isinstance(content, str)
    if choice["finish_reason"] == "stop":
        answer = json.loads(content)
        assert set(answer) == {"entities", "relations", "facts"}, content[:500]
    await x.close()


async def test_an_extraction_comes_back_valid_or_fails_as_invalid(llama: LlamaServer) -> None:
    statuses: list[tuple[str, int]] = []

    async def on_response(response: httpx.Response) -> None:
        statuses.append((response.request.url.path, response.status_code))

    registry = CollectorRegistry()
    client = httpx.AsyncClient(event_hooks={"response": [on_response]}, trust_env=False)
    x = make(llama, client=client, metrics=ExtractorMetrics(registry))
    try:
        result: LLMExtraction | None = await x.extract(SPEAKER, MESSAGE, CONTEXT)
    except ExtractionFailed as exc:
        assert exc.reason == "invalid", exc.message  # the fallback path: the server answered
        result = None
    finally:
        await client.aclose()
    assert statuses == [("/v1/chat/completions", 200)]  # the request reached the server and was answered
    if result is not None:
        assert isinstance(result, LLMExtraction)
        names = {e.name.lower() for e in result.entities}
        assert all(r.source.lower() in names and r.target.lower() in names for r in result.relations)
    outcome = "ok" if result is not None else "invalid"
    assert registry.get_sample_value("hrt_extractor_calls_total", {"outcome": outcome}) == 1
    assert registry.get_sample_value("hrt_extractor_latency_seconds_count") == 1
    assert x.circuit_state == "closed"


async def test_a_tiny_timeout_fails_as_timeout(llama: LlamaServer) -> None:
    registry = CollectorRegistry()
    async with make(llama, timeout_s=0.001, metrics=ExtractorMetrics(registry)) as x:
        with pytest.raises(ExtractionFailed) as info:
            await x.extract(SPEAKER, MESSAGE, CONTEXT)
    assert info.value.reason == "timeout"
    assert registry.get_sample_value("hrt_extractor_calls_total", {"outcome": "timeout"}) == 1


@pytest.mark.parametrize("wrong", ["url", "key", "no-key"])
async def test_a_wrong_url_or_key_fails_as_error(llama: LlamaServer, wrong: str) -> None:
    """A wrong path (404) or a refused key (401): the server said no, at once."""
    kwargs: dict[str, Any] = {
        "url": {"base_url": f"{llama.base_url}/not-the-api"},
        "key": {"api_key": "not-the-key"},
        "no-key": {"api_key": None},
    }[wrong]
    base_url = kwargs.pop("base_url", llama.base_url)
    x = ChatLLMExtractor(base_url=base_url, **{"timeout_s": TIMEOUT_S, "api_key": llama.api_key, **kwargs})
    with pytest.raises(ExtractionFailed) as info:
        await x.extract(SPEAKER, MESSAGE, CONTEXT)
    await x.close()
    assert info.value.reason == "error"
    assert ("HTTP 404" if wrong == "url" else "HTTP 401") in info.value.message


async def test_a_server_that_is_not_there_fails_as_error_and_opens_the_breaker() -> None:
    async with ChatLLMExtractor(base_url=f"http://127.0.0.1:{free_port()}", breaker_failures=2) as x:
        reasons = []
        for _ in range(3):
            with pytest.raises(ExtractionFailed) as info:
                await x.extract(SPEAKER, MESSAGE)
            reasons.append(info.value.reason)
    assert reasons == ["error", "error", "open"]


# --- wired into the conversation route (HRTService.add_messages) ----------------------------------


def extractor_calls(svc: Any) -> float:
    return sum(
        sample.value
        for metric in svc.metrics.registry.collect()
        if metric.name == "hrt_extractor_calls"
        for sample in metric.samples
        if sample.name == "hrt_extractor_calls_total"
    )


async def test_the_route_merges_the_llm_answer_stores_it_and_falls_back_to_the_rules(
    llama: LlamaServer, tmp_path: Path
) -> None:
    """With HRT_EXTRACTOR_BASE_URL set, each new message is asked of the LLM once: its answer (when
    valid) is stored with the statistics and merged with the rules' concepts, so the same message
    again (another session) asks nothing; a timeout falls back to the rules and is counted."""
    from hrt.config import Settings
    from hrt.extraction.messages import ConversationRequest
    from hrt.service import HRTService
    from tests.helpers import HashingEmbedder

    settings = Settings(
        db_path=tmp_path / "llm.db",
        extractor_base_url=llama.base_url,
        extractor_api_key=llama.api_key,
        extractor_timeout_s=TIMEOUT_S,
    )
    svc = await HRTService(settings, embedder=HashingEmbedder()).start()
    message = {"name": SPEAKER, "content": MESSAGE, "timestamp": "2026-05-01T10:00:00Z"}
    try:
        first = await svc.add_messages(
            ConversationRequest.model_validate({"user_id": "u1", "session_id": "a", "messages": [message]})
        )
        assert extractor_calls(svc) == 1
        # a valid answer is merged ("rules+llm"); an invalid one is the rules alone, counted
        assert (first.extractor, first.llm_fallbacks) in {("rules+llm", 0), ("rules", 1)}
        units = await svc.records.get_many("u1", "memory_unit", [first.messages[0].muid])
        assert units, "the message is written whatever the LLM answered"
        if first.extractor == "rules+llm":
            again = await svc.add_messages(
                ConversationRequest.model_validate({"user_id": "u1", "session_id": "b", "messages": [message]})
            )
            assert again.extractor == "rules+llm" and extractor_calls(svc) == 1  # the stored answer
        concepts = await svc.records.get_many("u1", "concept", ["entity:berlin", "person:alice"])
        assert "entity:berlin" in concepts and "person:alice" in concepts  # the rules' at least
    finally:
        await svc.close()
    hurried = await HRTService(
        settings.model_copy(update={"db_path": tmp_path / "t.db", "extractor_timeout_s": 0.001}),
        embedder=HashingEmbedder(),
    ).start()
    try:
        done = await hurried.add_messages(
            ConversationRequest.model_validate({"user_id": "u1", "session_id": "a", "messages": [message]})
        )
        assert (done.extractor, done.llm_fallbacks) == ("rules", 1)
        assert "entity:berlin" in await hurried.records.get_many("u1", "concept", ["entity:berlin"])
    finally:
        await hurried.close()
