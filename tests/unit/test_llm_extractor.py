"""The LLM extractor (hrt/extraction/llm.py) against a small scripted chat server on a real loopback
socket (so httpx's own transport, timeouts and connection errors are the real ones): the request it
sends, the validation and normalisation of answers, the failure reasons, the circuit breaker, bounded
concurrency, metrics and the settings."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from hrt.config import Settings
from hrt.devstack import free_port
from hrt.extraction.llm import (
    MAX_ENTITIES,
    MAX_FACTS,
    MAX_RELATIONS,
    RESPONSE_SCHEMA,
    ChatLLMExtractor,
    ExtractionFailed,
    ExtractorMetrics,
    LLMExtraction,
    LLMExtractor,
    load_llm_extractor,
)
from hrt.metrics import Metrics

# (status, JSON body or raw text, delay in seconds)
Answer = tuple[int, Any, float]


def completion(content: object) -> Answer:
    """A chat completion whose message content is ``content`` (a dict is sent as its JSON text)."""
    text = json.dumps(content) if isinstance(content, dict | list) else content
    message = {"role": "assistant", "content": text}
    return (
        200,
        {"object": "chat.completion", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]},
        0.0,
    )


class ChatServer:
    """A scripted OpenAI-compatible chat server on 127.0.0.1: one request per connection; records
    paths, headers and bodies; counts requests in flight."""

    def __init__(self, answer: Callable[[dict[str, Any]], Answer]) -> None:
        self.answer = answer
        self.paths: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.base_url = ""
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (h.split(":", 1) for h in head[1:] if ":" in h)}
            body = json.loads(await reader.readexactly(int(headers.get("content-length", "0"))))
            self.paths.append(head[0].split()[1])
            self.headers.append(headers)
            self.bodies.append(body)
            status, payload, delay = self.answer(body)
            if delay:
                await asyncio.sleep(delay)
            data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
            writer.write(
                f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + data
            )
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client gave up (a timeout test)
        finally:
            self.in_flight -= 1
            writer.close()


ServerFactory = Callable[[Callable[[dict[str, Any]], Answer]], Awaitable[ChatServer]]


@pytest.fixture
async def serve() -> AsyncIterator[ServerFactory]:
    started: list[ChatServer] = []

    async def factory(answer: Callable[[dict[str, Any]], Answer]) -> ChatServer:
        server = ChatServer(answer)
        await server.start()
        started.append(server)
        return server

    yield factory
    for server in started:
        await server.stop()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def extractor(server: ChatServer, **kwargs: Any) -> ChatLLMExtractor:
    kwargs.setdefault("timeout_s", 5.0)
    return ChatLLMExtractor(base_url=server.base_url, **kwargs)


def calls(registry: CollectorRegistry, outcome: str) -> float:
    return registry.get_sample_value("hrt_extractor_calls_total", {"outcome": outcome}) or 0.0


GOOD = {
    "entities": [
        {"name": "  Alice\n Smith ", "type": "Person"},
        {"name": "Berlin", "type": "place"},
        {"name": "alice smith", "type": "person"},  # the same entity again: dropped, the first kept
        {"name": "Siemens", "type": " "},  # a blank type: "entity"
        {"name": "Bob"},  # no type: "entity"
    ],
    "relations": [
        {"source": "ALICE SMITH", "target": "berlin", "type": "Lives In"},
        {"source": "Alice Smith", "target": "Berlin", "type": "lives in"},  # the same relation again
        {"source": "Alice Smith", "target": "Paris", "type": "visited"},  # Paris is no entity: dropped
        {"source": "Bob", "target": "Siemens", "type": "works_at"},
    ],
    "facts": ["Alice  Smith lives in Berlin.", "Alice Smith lives in Berlin.", "Bob works at Siemens."],
}


# ---- answers: validation and normalisation ------------------------------------------------------


async def test_a_valid_answer_is_validated_and_normalised(serve: ServerFactory) -> None:
    server = await serve(lambda _body: completion(GOOD))
    registry = CollectorRegistry()
    async with extractor(server, metrics=ExtractorMetrics(registry)) as x:
        got = await x.extract("Alice", "I live in Berlin; my friend Bob works at Siemens.")
    assert [(e.name, e.type) for e in got.entities] == [
        ("Alice Smith", "person"),
        ("Berlin", "place"),
        ("Siemens", "entity"),
        ("Bob", "entity"),
    ]
    assert [(r.source, r.target, r.type) for r in got.relations] == [
        ("Alice Smith", "Berlin", "lives in"),
        ("Bob", "Siemens", "works_at"),
    ]
    assert got.facts == ["Alice Smith lives in Berlin.", "Bob works at Siemens."]
    assert calls(registry, "ok") == 1 and calls(registry, "invalid") == 0
    assert registry.get_sample_value("hrt_extractor_latency_seconds_count") == 1


async def test_missing_keys_are_empty_and_a_code_fence_is_tolerated(serve: ServerFactory) -> None:
    fenced = "```json\n" + json.dumps({"facts": ["Bob likes tea."]}) + "\n```"
    server = await serve(lambda _body: completion(fenced))
    async with extractor(server) as x:
        got = await x.extract("Bob", "I like tea.")
    assert got == LLMExtraction(facts=["Bob likes tea."])
    assert got.entities == [] and got.relations == []


def many(n: int, item: Callable[[int], object]) -> list[object]:
    return [item(i) for i in range(n)]


INVALID: dict[str, object] = {
    "not JSON": "Sure! Alice lives in Berlin.",
    "truncated JSON": '{"entities": [{"name": "Ali',
    "a JSON array": [{"name": "Alice"}],
    "a JSON string": '"Alice"',
    "an unknown key at the top": {**GOOD, "summary": "Alice moved."},
    "an unknown key in an entity": {"entities": [{"name": "Alice", "type": "person", "age": 30}]},
    "an unknown key in a relation": {
        "entities": [{"name": "A"}, {"name": "B"}],
        "relations": [{"source": "A", "target": "B", "type": "knows", "since": 2020}],
    },
    "a number as a name": {"entities": [{"name": 5, "type": "person"}]},
    "entities as a string": {"entities": "Alice, Bob"},
    "a fact as an object": {"facts": [{"text": "Alice lives in Berlin."}]},
    "a blank name": {"entities": [{"name": "  ", "type": "person"}]},
    "a relation without a type": {
        "entities": [{"name": "A"}, {"name": "B"}],
        "relations": [{"source": "A", "target": "B"}],
    },
    "too many entities": {"entities": many(MAX_ENTITIES + 1, lambda i: {"name": f"E{i}"})},
    "too many relations": {
        "entities": [{"name": "A"}, {"name": "B"}],
        "relations": many(MAX_RELATIONS + 1, lambda i: {"source": "A", "target": "B", "type": f"r{i}"}),
    },
    "too many facts": {"facts": many(MAX_FACTS + 1, lambda i: f"Fact {i}.")},
    "a name too long": {"entities": [{"name": "x" * 201}]},
    "a fact too long": {"facts": ["x" * 1001]},
    "a type too long": {"entities": [{"name": "A", "type": "t" * 65}]},
}


@pytest.mark.parametrize("case", sorted(INVALID))
async def test_an_invalid_answer_fails_as_invalid_and_counts_against_the_circuit(
    serve: ServerFactory, case: str
) -> None:
    """A model that answers junk is no more use than one that does not answer (#45): its calls
    open the circuit, so a conversation call stops waiting on it message after message."""
    server = await serve(lambda _body: completion(INVALID[case]))
    registry = CollectorRegistry()
    async with extractor(server, metrics=ExtractorMetrics(registry), breaker_failures=2) as x:
        for _ in range(2):
            with pytest.raises(ExtractionFailed) as info:
                await x.extract("Alice", "I moved to Berlin.")
            assert info.value.reason == "invalid"
        assert x.circuit_state == "open"
        with pytest.raises(ExtractionFailed) as info:
            await x.extract("Alice", "I moved to Berlin.")
        assert info.value.reason == "open"
    assert len(server.bodies) == 2
    assert calls(registry, "invalid") == 2 and calls(registry, "error") == 0


async def test_an_answer_without_text_content_is_invalid(serve: ServerFactory) -> None:
    server = await serve(lambda _body: completion(None))
    async with extractor(server) as x:
        with pytest.raises(ExtractionFailed) as info:
            await x.extract("Alice", "Hello.")
    assert info.value.reason == "invalid"


def test_the_bounds_at_the_limit_are_accepted_and_the_schema_states_them() -> None:
    full = LLMExtraction.model_validate(
        {
            "entities": many(MAX_ENTITIES, lambda i: {"name": f"E{i}" + "x" * 190, "type": "t" * 64}),
            "relations": many(
                MAX_RELATIONS, lambda i: {"source": "E0" + "x" * 190, "target": "E1" + "x" * 190, "type": f"r{i}"}
            ),
            "facts": many(MAX_FACTS, lambda i: f"{i}" + "y" * 998),
        }
    )
    assert (len(full.entities), len(full.relations), len(full.facts)) == (MAX_ENTITIES, MAX_RELATIONS, MAX_FACTS)
    properties = RESPONSE_SCHEMA["properties"]
    assert properties["entities"]["maxItems"] == MAX_ENTITIES
    assert properties["relations"]["maxItems"] == MAX_RELATIONS
    assert properties["facts"]["maxItems"] == MAX_FACTS
    assert RESPONSE_SCHEMA["required"] == ["entities", "relations", "facts"]
    with pytest.raises(ValidationError):
        LLMExtraction.model_validate({"entities": [{"name": "A", "kind": "person"}]})


# ---- the request -------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_the_request_is_a_deterministic_chat_completion_with_the_schema(
    serve: ServerFactory, suffix: str
) -> None:
    server = await serve(lambda _body: completion(GOOD))
    x = ChatLLMExtractor(base_url=server.base_url + suffix, model="qwen-x", api_key="s3cret", max_context=2)
    context = ["Carol: first, too old to be sent", "Bob: Where do you live now?", "Bob: And  where\ndo you work?"]
    await x.extract("Alice", "I moved to {Berlin} last month.", context)
    await x.close()
    assert server.paths == ["/v1/chat/completions"]
    assert server.headers[0]["authorization"] == "Bearer s3cret"
    body = server.bodies[0]
    assert body["model"] == "qwen-x" and body["temperature"] == 0.0 and isinstance(body["seed"], int)
    assert body["response_format"] == {"type": "json_object", "schema": RESPONSE_SCHEMA}
    system, user = body["messages"]
    assert system["role"] == "system" and '"entities"' in system["content"] and "{speaker}" not in system["content"]
    assert user["role"] == "user"
    assert "Alice" in user["content"] and "I moved to {Berlin} last month." in user["content"]
    assert "- Bob: Where do you live now?\n- Bob: And where do you work?" in user["content"]
    assert "Carol" not in user["content"]  # only the last max_context messages


async def test_without_context_or_key_the_request_says_so(serve: ServerFactory) -> None:
    server = await serve(lambda _body: completion(GOOD))
    async with extractor(server) as x:
        await x.extract("Alice", "Hi.")
    assert "authorization" not in server.headers[0]
    assert "(none)" in server.bodies[0]["messages"][1]["content"]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        (
            "json_schema",
            {"type": "json_schema", "json_schema": {"name": "memory_extraction", "schema": RESPONSE_SCHEMA}},
        ),
        ("json_object", {"type": "json_object"}),
        ("off", None),
    ],
)
async def test_the_response_format_is_chosen_by_the_setting(
    serve: ServerFactory, kind: Any, expected: dict[str, Any] | None
) -> None:
    server = await serve(lambda _body: completion(GOOD))
    async with extractor(server, response_format=kind) as x:
        await x.extract("Alice", "Hi.")
    assert server.bodies[0].get("response_format") == expected


def test_a_prompt_must_carry_the_three_fields_and_the_base_url_must_be_http() -> None:
    with pytest.raises(ValueError, match="fields"):
        ChatLLMExtractor(base_url="http://x", prompt="## system\nExtract.\n## user\n{message}\n")
    with pytest.raises(ValueError, match="## user"):
        ChatLLMExtractor(base_url="http://x", prompt="## system\nExtract.\n")
    with pytest.raises(ValueError, match="URL"):
        ChatLLMExtractor(base_url="llama:8080")
    with pytest.raises(ValueError):
        ChatLLMExtractor(base_url="http://x", timeout_s=0)


# ---- failures ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        (500, {"error": "boom"}, 0.0),
        (404, {"error": {"message": "model 'nope' not found"}}, 0.0),
        (401, {"error": "unauthorized"}, 0.0),
        (200, "<html>not json</html>", 0.0),
        (200, {"object": "chat.completion", "choices": []}, 0.0),
        (200, {"choices": [{"text": "legacy completion"}]}, 0.0),
    ],
    ids=["500", "404-unknown-model", "401", "non-JSON-body", "no-choices", "no-message"],
)
async def test_a_server_error_fails_as_error(serve: ServerFactory, answer: Answer) -> None:
    server = await serve(lambda _body: answer)
    registry = CollectorRegistry()
    async with extractor(server, metrics=ExtractorMetrics(registry)) as x:
        with pytest.raises(ExtractionFailed) as info:
            await x.extract("Alice", "Hi.")
    assert info.value.reason == "error"
    assert calls(registry, "error") == 1


async def test_a_slow_server_fails_as_timeout(serve: ServerFactory) -> None:
    server = await serve(lambda _body: (*completion(GOOD)[:2], 2.0))
    registry = CollectorRegistry()
    async with extractor(server, timeout_s=0.2, metrics=ExtractorMetrics(registry)) as x:
        started = asyncio.get_running_loop().time()
        with pytest.raises(ExtractionFailed) as info:
            await x.extract("Alice", "Hi.")
        assert asyncio.get_running_loop().time() - started < 1.5
    assert info.value.reason == "timeout"
    assert calls(registry, "timeout") == 1
    assert registry.get_sample_value("hrt_extractor_latency_seconds_count") == 1


async def test_an_unreachable_server_fails_as_error() -> None:
    async with ChatLLMExtractor(base_url=f"http://127.0.0.1:{free_port()}", timeout_s=5.0) as x:
        with pytest.raises(ExtractionFailed) as info:
            await x.extract("Alice", "Hi.")
    assert info.value.reason == "error"


async def test_the_breaker_opens_after_repeated_failures_fails_fast_then_probes(serve: ServerFactory) -> None:
    healthy = False

    def answer(_body: dict[str, Any]) -> Answer:
        return completion(GOOD) if healthy else (503, {"error": "loading"}, 0.0)

    server, clock, registry = await serve(answer), Clock(), CollectorRegistry()
    x = extractor(server, breaker_failures=3, breaker_reset_s=30.0, clock=clock, metrics=ExtractorMetrics(registry))
    for _ in range(3):
        with pytest.raises(ExtractionFailed, match="HTTP 503"):
            await x.extract("Alice", "Hi.")
    assert x.circuit_state == "open"
    for _ in range(2):
        with pytest.raises(ExtractionFailed) as info:
            await x.extract("Alice", "Hi.")
        assert info.value.reason == "open"
    assert len(server.bodies) == 3  # refused without a request
    assert calls(registry, "error") == 3 and calls(registry, "open") == 2
    assert registry.get_sample_value("hrt_extractor_latency_seconds_count") == 3  # "open" never reached it
    # half-open: one probe; it fails, so the circuit opens again
    clock.now += 30.0
    assert x.circuit_state == "half_open"
    with pytest.raises(ExtractionFailed, match="HTTP 503"):
        await x.extract("Alice", "Hi.")
    assert x.circuit_state == "open"
    # the server recovers: the next probe closes the circuit
    healthy = True
    clock.now += 30.0
    assert (await x.extract("Alice", "Hi.")).facts
    assert x.circuit_state == "closed" and calls(registry, "ok") == 1
    await x.close()


async def test_timeouts_count_against_the_server(serve: ServerFactory) -> None:
    server = await serve(lambda _body: (*completion(GOOD)[:2], 1.0))
    async with extractor(server, timeout_s=0.1, breaker_failures=2, clock=Clock()) as x:
        reasons = []
        for _ in range(3):
            with pytest.raises(ExtractionFailed) as info:
                await x.extract("Alice", "Hi.")
            reasons.append(info.value.reason)
    assert reasons == ["timeout", "timeout", "open"]


async def test_a_cancelled_call_leaves_no_verdict(serve: ServerFactory) -> None:
    server = await serve(lambda _body: (*completion(GOOD)[:2], 1.0))
    async with extractor(server, breaker_failures=1) as x:
        task = asyncio.ensure_future(x.extract("Alice", "Hi."))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert x.circuit_state == "closed"


async def test_calls_in_flight_are_bounded(serve: ServerFactory) -> None:
    server = await serve(lambda _body: (*completion(GOOD)[:2], 0.1))
    async with extractor(server, max_concurrency=2) as x:
        results = await asyncio.gather(*(x.extract("Alice", f"Message {i}.") for i in range(6)))
    assert len(results) == 6 and len(server.bodies) == 6
    assert server.max_in_flight == 2


# ---- settings ------------------------------------------------------------------------------------


def test_the_extractor_is_off_unless_a_base_url_is_set(tmp_path: Any) -> None:
    assert load_llm_extractor(Settings(db_path=tmp_path / "hrt.db"), Metrics()) is None


async def test_the_settings_build_the_chat_extractor(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HRT_EXTRACTOR_BASE_URL", "http://llm.test:8081/v1")
    monkeypatch.setenv("HRT_EXTRACTOR_MODEL", "qwen3-4b")
    monkeypatch.setenv("HRT_EXTRACTOR_API_KEY", "k3y")
    monkeypatch.setenv("HRT_EXTRACTOR_TIMEOUT_S", "7.5")
    monkeypatch.setenv("HRT_EXTRACTOR_MAX_CONCURRENCY", "3")
    monkeypatch.setenv("HRT_EXTRACTOR_RESPONSE_FORMAT", "json_schema")
    settings = Settings(db_path=tmp_path / "hrt.db")
    metrics = Metrics()
    x = load_llm_extractor(settings, metrics)
    assert isinstance(x, ChatLLMExtractor) and isinstance(x, LLMExtractor)
    assert x.name == "llm:qwen3-4b@http://llm.test:8081"
    assert (x.model, x.timeout_s, x.max_concurrency, x.response_format) == ("qwen3-4b", 7.5, 3, "json_schema")
    assert x.payload("A", "b")["response_format"]["type"] == "json_schema"
    assert b"hrt_extractor_calls_total" in metrics.render()
    assert "k3y" not in repr(settings)
    await x.close()


def test_settings_bounds_and_the_placeholder_key_are_refused(tmp_path: Any) -> None:
    for bad in ({"extractor_timeout_s": 0}, {"extractor_timeout_s": 601}, {"extractor_max_concurrency": 0}):
        with pytest.raises(ValidationError):
            Settings(db_path=tmp_path / "hrt.db", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="placeholder"):
        Settings(extractor_api_key="change-me-extractor-key")  # type: ignore[arg-type]
