"""The Qwen3-Reranker adapter through ``httpx.MockTransport`` (no patching): prompts, answer parsing,
the failure contract, the circuit breaker, the cache, bounded concurrency and metrics; a little
over 600 lines because each of those behaviours has its scripted server here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from hrt.errors import StoreError, StoreUnavailable
from hrt.reranker import Reranker
from hrt.rerankers import DEFAULT_INSTRUCTION, Qwen3Reranker, RerankMetrics, load_prompt
from hrt.rerankers.qwen3 import parse_prompt, yes_probability

BASE = "http://reranker.test:8080"
SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)

Handler = Callable[[httpx.Request], httpx.Response | Awaitable[httpx.Response]]


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def completion_answer(top: dict[str, float]) -> dict[str, Any]:
    """llama-cpp-python's /v1/completions answer shape (OpenAI legacy logprobs)."""
    best = max(top, key=lambda t: top[t]) if top else ""
    return {
        "object": "text_completion",
        "choices": [
            {
                "text": best,
                "index": 0,
                "finish_reason": "length",
                "logprobs": {
                    "tokens": [best] if top else [],
                    "text_offset": [0] if top else [],
                    "token_logprobs": [top[best]] if top else [],
                    "top_logprobs": [top] if top else [],
                },
            }
        ],
    }


def chat_answer(top: dict[str, float]) -> dict[str, Any]:
    """The OpenAI chat answer shape (llama-cpp-python and llama-server /v1/chat/completions)."""
    best = max(top, key=lambda t: top[t])
    return {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": best},
                "finish_reason": "length",
                "logprobs": {
                    "content": [
                        {
                            "token": best,
                            "logprob": top[best],
                            "bytes": None,
                            "top_logprobs": [{"token": t, "logprob": lp, "bytes": None} for t, lp in top.items()],
                        }
                    ],
                    "refusal": None,
                },
            }
        ],
    }


class Server:
    """A scripted rerank server: counts requests and in-flight requests, records bodies."""

    def __init__(self, answer: Callable[[dict[str, Any]], httpx.Response | Awaitable[httpx.Response]]) -> None:
        self.answer = answer
        self.requests: list[httpx.Request] = []
        self.bodies: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        body = json.loads(request.content)
        self.bodies.append(body)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            out = self.answer(body)
            if not isinstance(out, httpx.Response):
                out = await out
            return out
        finally:
            self.in_flight -= 1


def document_of(body: dict[str, Any]) -> str:
    text = body["prompt"] if "prompt" in body else body["messages"][1]["content"]
    return text.split("<Document>: ", 1)[1].split("<|im_end|>", 1)[0]


def fixed(top: dict[str, float], chat: bool = False) -> Callable[[dict[str, Any]], httpx.Response]:
    return lambda _body: httpx.Response(200, json=chat_answer(top) if chat else completion_answer(top))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reranker(server: Server, **kwargs: Any) -> Qwen3Reranker:
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    kwargs.setdefault("timeout_s", 2.0)
    return Qwen3Reranker(base_url=BASE, client=client, **kwargs)


# ---- prompt building -----------------------------------------------------------------------------


def test_prompt_file_is_the_official_wording():
    prompt = load_prompt()
    assert prompt.system == SYSTEM
    assert prompt.user_template == "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"


def test_prompt_parser_rejects_a_template_without_the_three_fields():
    with pytest.raises(ValueError, match="fields"):
        parse_prompt("## system\nJudge.\n## user\n<Query>: {query}\n")
    with pytest.raises(ValueError, match="## user"):
        parse_prompt("## system\nJudge.\n")


async def test_completion_request_is_the_raw_qwen3_template():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    r = reranker(server, model="qwen3-reranker-8b", instruction="Find facts {about} people")
    await r.score("Who knows {Python}?", ["Alice writes Python"])
    (request,) = server.requests
    assert request.method == "POST"
    assert str(request.url) == f"{BASE}/v1/completions"
    assert server.bodies[0] == {
        "model": "qwen3-reranker-8b",
        "prompt": (
            f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            "<|im_start|>user\n"
            "<Instruct>: Find facts {about} people\n<Query>: Who knows {Python}?\n<Document>: Alice writes Python"
            "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        ),
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": 20,
    }


async def test_chat_request_has_system_and_user_messages():
    server = Server(fixed({"yes": -0.1, "no": -2.5}, chat=True))
    r = reranker(server, mode="chat", top_logprobs=5)
    await r.score("Who knows Python?", ["Alice writes Python"])
    assert str(server.requests[0].url) == f"{BASE}/v1/chat/completions"
    assert server.bodies[0] == {
        "model": "qwen3-reranker",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": (
                    f"<Instruct>: {DEFAULT_INSTRUCTION}\n<Query>: Who knows Python?\n<Document>: Alice writes Python"
                ),
            },
        ],
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": True,
        "top_logprobs": 5,
    }


@pytest.mark.parametrize("mode", ["completion", "chat"])
async def test_the_api_key_is_sent_as_a_bearer_token_on_every_request(mode):
    server = Server(fixed({"yes": -0.1, "no": -2.5}, chat=mode == "chat"))
    r = reranker(server, mode=mode, api_key="s3cret-key", max_concurrency=2)
    await r.score("Who knows Python?", ["Alice writes Python", "Bob runs the cluster", "Carol drinks tea"])
    assert len(server.requests) == 3
    assert [req.headers.get("authorization") for req in server.requests] == ["Bearer s3cret-key"] * 3


async def test_without_an_api_key_no_authorization_header_is_sent():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    await reranker(server).score("q", ["d"])
    assert "authorization" not in server.requests[0].headers


async def test_a_refused_key_is_a_store_error_that_does_not_show_the_key(caplog):
    server = Server(lambda _body: httpx.Response(401, json={"detail": "Invalid API key"}))
    r = reranker(server, api_key="s3cret-key")
    with pytest.raises(StoreError) as info:
        await r.score("q", ["d"])
    assert not isinstance(info.value, StoreUnavailable)  # the server is up: it refused
    assert "401" in str(info.value) or "401" in caplog.text
    assert "s3cret-key" not in str(info.value) and "s3cret-key" not in caplog.text


async def test_base_url_with_v1_suffix_and_name():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    client = httpx.AsyncClient(transport=httpx.MockTransport(server))
    r = Qwen3Reranker(base_url=f"{BASE}/v1/", client=client)
    assert r.name == f"qwen3-reranker@{BASE}"
    assert isinstance(r, Reranker)
    await r.score("q", ["d"])
    assert str(server.requests[0].url) == f"{BASE}/v1/completions"


async def test_documents_are_clipped_to_max_doc_chars():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    r = reranker(server, max_doc_chars=10)
    await r.score("q", ["0123456789ABCDEFGHIJ"])
    assert document_of(server.bodies[0]) == "0123456789"


def test_constructor_rejects_bad_settings():
    with pytest.raises(ValueError, match="mode"):
        Qwen3Reranker(base_url=BASE, mode="rerank")
    with pytest.raises(ValueError):
        Qwen3Reranker(base_url=BASE, max_concurrency=0)
    with pytest.raises(ValueError, match="URL"):
        Qwen3Reranker(base_url="localhost:8080")


# ---- parsing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("chat", [False, True])
async def test_yes_higher_scores_high(chat):
    server = Server(fixed({"yes": -0.1, "no": -2.5, "maybe": -4.0}, chat=chat))
    r = reranker(server, mode="chat" if chat else "completion")
    (score,) = await r.score("q", ["d"])
    assert score == round(sigmoid(2.4), 6)
    assert score > 0.9


@pytest.mark.parametrize("chat", [False, True])
async def test_no_higher_scores_low(chat):
    r = reranker(Server(fixed({"no": -0.1, "yes": -3.0}, chat=chat)), mode="chat" if chat else "completion")
    (score,) = await r.score("q", ["d"])
    assert score == round(sigmoid(-2.9), 6)
    assert score < 0.1


async def test_only_yes_present_takes_minus_ten_for_no():
    r = reranker(Server(fixed({"yes": -0.5, "the": -3.0})))
    assert await r.score("q", ["d"]) == [round(sigmoid(-0.5 - -10.0), 6)]


async def test_only_no_present_takes_the_listed_floor_when_below_minus_ten():
    # "yes" is absent from the top-N, so its logprob is below every listed one, here -12
    r = reranker(Server(fixed({"no": -0.01, "the": -12.0})))
    assert await r.score("q", ["d"]) == [round(sigmoid(-12.0 - -0.01), 6)]


async def test_case_and_space_variants_count_and_the_max_per_side_wins():
    top = {" Yes": -1.0, "YES": -0.5, "yes": -2.0, "\nno": -1.5, "No": -3.0, "\u2581no": -4.0}
    r = reranker(Server(fixed(top)))
    assert await r.score("q", ["d"]) == [round(sigmoid(1.0), 6)]


def test_yes_probability_is_bounded_and_stable():
    assert yes_probability({"yes": 0.0, "no": -1000.0}) == 1.0
    assert yes_probability({"yes": -1000.0, "no": 0.0}) == 0.0
    assert yes_probability([("yes", -math.inf), ("no", -1.0)]) == 0.0
    assert yes_probability({"yes": -0.7, "no": -0.7}) == 0.5


async def test_scores_are_rounded_to_six_decimals_and_in_input_order():
    def answer(body: dict[str, Any]) -> httpx.Response:
        lp = {"good": -0.123456789, "bad": -5.0}[document_of(body)]
        return httpx.Response(200, json=completion_answer({"yes": lp, "no": -1.0}))

    r = reranker(Server(answer))
    scores = await r.score("q", ["bad", "good", "bad"])
    assert scores == [round(sigmoid(-4.0), 6), round(sigmoid(1.0 - 0.123456789), 6), round(sigmoid(-4.0), 6)]
    assert all(s == round(s, 6) for s in scores)


@pytest.mark.parametrize(
    "payload",
    [
        {"choices": [{"text": "", "logprobs": None}]},  # server without logprobs
        {"choices": [{"text": "", "logprobs": {"tokens": [], "top_logprobs": []}}]},  # end-of-text sampled first
        {"choices": [{"message": {"content": "yes"}, "logprobs": {"content": []}}]},
        {"choices": [{"message": {"content": "yes"}, "logprobs": {"content": [{"token": "yes"}]}}]},
    ],
)
async def test_no_logprobs_fails_the_call(payload):
    r = reranker(Server(lambda _b: httpx.Response(200, json=payload)))
    with pytest.raises(StoreError) as info:
        await r.score("q", ["d"])
    assert not isinstance(info.value, StoreUnavailable)


async def test_neither_yes_nor_no_fails_the_call():
    r = reranker(Server(fixed({"maybe": -0.2, "the": -1.0})))
    with pytest.raises(StoreError, match="neither 'yes' nor 'no'"):
        await r.score("q", ["d"])


@pytest.mark.parametrize(
    "response",
    [
        httpx.Response(200, text="<html>not json</html>"),
        httpx.Response(200, json={"error": "weird"}),
        httpx.Response(200, json=["choices"]),
        httpx.Response(200, content=b"\xff\xfe\x00garbage"),
    ],
)
async def test_garbage_body_is_a_store_error(response):
    r = reranker(Server(lambda _b: response))
    with pytest.raises(StoreError) as info:
        await r.score("q", ["d"])
    assert not isinstance(info.value, StoreUnavailable)


async def test_http_500_is_a_store_error():
    r = reranker(Server(lambda _b: httpx.Response(500, text="model exploded " + "x" * 5000)))
    with pytest.raises(StoreError, match="HTTP 500") as info:
        await r.score("q", ["d"])
    assert not isinstance(info.value, StoreUnavailable)
    assert len(str(info.value)) < 400  # the payload is truncated, not echoed whole


async def test_transport_timeout_is_unavailable():
    def answer(_body: dict[str, Any]) -> httpx.Response:
        raise httpx.ReadTimeout("read timed out")

    with pytest.raises(StoreUnavailable, match="timed out"):
        await reranker(Server(answer)).score("q", ["d"])


async def test_slow_server_is_cut_at_timeout_s():
    async def answer(_body: dict[str, Any]) -> httpx.Response:
        await asyncio.sleep(30)
        return httpx.Response(200, json=completion_answer({"yes": -1.0, "no": -1.0}))

    r = reranker(Server(answer), timeout_s=0.05)
    started = time.perf_counter()
    with pytest.raises(StoreUnavailable, match="timed out"):
        await r.score("q", ["d1", "d2"])
    assert time.perf_counter() - started < 2.0


async def test_connection_refused_is_unavailable():
    def answer(_body: dict[str, Any]) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    with pytest.raises(StoreUnavailable, match="unreachable"):
        await reranker(Server(answer)).score("q", ["d"])


async def test_partial_failure_fails_the_call_and_keeps_the_good_scores_cached():
    fail = {"bad"}

    def answer(body: dict[str, Any]) -> httpx.Response:
        if document_of(body) in fail:
            return httpx.Response(503, text="busy")
        return httpx.Response(200, json=completion_answer({"yes": -0.2, "no": -2.0}))

    server = Server(answer)
    r = reranker(server, max_concurrency=1)
    with pytest.raises(StoreError, match="HTTP 503"):
        await r.score("q", ["good", "bad", "other"])
    assert [document_of(b) for b in server.bodies] == ["good", "bad"]  # "other" was cancelled, never sent
    fail.clear()
    scores = await r.score("q", ["good", "bad", "other"])
    assert len(scores) == 3
    assert [document_of(b) for b in server.bodies[2:]] == ["bad", "other"]


async def test_empty_documents_make_no_request():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    assert await reranker(server).score("q", []) == []
    assert server.requests == []


# ---- circuit breaker -----------------------------------------------------------------------------


async def test_breaker_opens_fails_fast_then_half_opens_and_closes():
    healthy = False

    def answer(_body: dict[str, Any]) -> httpx.Response:
        if not healthy:
            return httpx.Response(500, text="down")
        return httpx.Response(200, json=completion_answer({"yes": -0.1, "no": -2.5}))

    server, clock = Server(answer), Clock()
    r = reranker(server, breaker_failures=3, breaker_reset_s=30.0, clock=clock, cache_size=0)
    for i in range(3):
        assert r.circuit_state == "closed"
        with pytest.raises(StoreError):
            await r.score("q", [f"d{i}"])
    assert r.circuit_state == "open"
    assert len(server.requests) == 3

    # open: fails at once, no network
    with pytest.raises(StoreUnavailable, match="circuit open"):
        await r.score("q", ["d"])
    clock.now += 29.9
    with pytest.raises(StoreUnavailable, match="circuit open"):
        await r.score("q", ["d"])
    assert len(server.requests) == 3

    # half-open: one probe; it fails, so the circuit opens again for a full period
    clock.now += 0.2
    assert r.circuit_state == "half_open"
    with pytest.raises(StoreError, match="HTTP 500"):
        await r.score("q", ["probe1"])
    assert len(server.requests) == 4
    assert r.circuit_state == "open"
    with pytest.raises(StoreUnavailable, match="circuit open"):
        await r.score("q", ["d"])
    assert len(server.requests) == 4

    # the next probe succeeds and closes it
    healthy = True
    clock.now += 30.0
    assert await r.score("q", ["probe2"]) == [round(sigmoid(2.4), 6)]
    assert r.circuit_state == "closed"
    await r.score("q", ["d1", "d2"])
    assert len(server.requests) == 7


async def test_success_resets_the_consecutive_failure_count():
    outcomes = iter([500, 500, 200, 500, 500])

    def answer(_body: dict[str, Any]) -> httpx.Response:
        status = next(outcomes)
        return httpx.Response(status, json=completion_answer({"yes": -0.1, "no": -2.5}))

    r = reranker(Server(answer), breaker_failures=3, clock=Clock(), cache_size=0)
    for _ in range(5):
        with contextlib.suppress(StoreError):
            await r.score("q", ["d"])
    assert r.circuit_state == "closed"


async def test_half_open_lets_exactly_one_probe_through():
    release = asyncio.Event()
    healthy = False

    async def answer(_body: dict[str, Any]) -> httpx.Response:
        if not healthy:
            return httpx.Response(500)
        await release.wait()
        return httpx.Response(200, json=completion_answer({"yes": -0.1, "no": -2.5}))

    server, clock = Server(answer), Clock()
    r = reranker(server, breaker_failures=1, breaker_reset_s=5.0, clock=clock)
    with pytest.raises(StoreError):
        await r.score("q", ["d"])
    healthy = True
    clock.now += 5.0
    probe = asyncio.create_task(r.score("q", ["p"]))
    await asyncio.sleep(0.01)
    with pytest.raises(StoreUnavailable, match="circuit open"):
        await r.score("q", ["other"])
    release.set()
    assert len(await probe) == 1
    assert r.circuit_state == "closed"
    assert len(server.requests) == 2


async def test_a_cancelled_probe_frees_the_half_open_slot():
    healthy = False

    async def answer(_body: dict[str, Any]) -> httpx.Response:
        if not healthy:
            return httpx.Response(500)
        await asyncio.sleep(0.5)
        return httpx.Response(200, json=completion_answer({"yes": -0.1, "no": -2.5}))

    clock = Clock()
    r = reranker(Server(answer), breaker_failures=1, breaker_reset_s=5.0, clock=clock)
    with pytest.raises(StoreError):
        await r.score("q", ["d"])
    healthy = True
    clock.now += 5.0
    probe = asyncio.create_task(r.score("q", ["p"]))
    await asyncio.sleep(0.01)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert len(await r.score("q", ["p2"])) == 1  # a new probe was allowed, and it closed the circuit
    assert r.circuit_state == "closed"


# ---- cache ---------------------------------------------------------------------------------------


async def test_cache_avoids_a_second_request():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    r = reranker(server)
    first = await r.score("q", ["a", "b"])
    second = await r.score("q", ["b", "a"])
    assert second == first[::-1]
    assert len(server.requests) == 2
    await r.score("another query", ["a"])
    assert len(server.requests) == 3


async def test_duplicate_documents_in_one_call_are_asked_once():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    scores = await reranker(server).score("q", ["a", "a", "a"])
    assert len(set(scores)) == 1
    assert len(server.requests) == 1


async def test_cache_is_lru_bounded_and_can_be_disabled():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    r = reranker(server, cache_size=2)
    await r.score("q", ["a", "b"])
    await r.score("q", ["a"])  # touch a: b is now least recently used
    await r.score("q", ["c"])  # evicts b
    await r.score("q", ["a"])
    assert len(server.requests) == 3
    await r.score("q", ["b"])
    assert len(server.requests) == 4

    server2 = Server(fixed({"yes": -0.1, "no": -2.5}))
    r2 = reranker(server2, cache_size=0)
    await r2.score("q", ["a"])
    await r2.score("q", ["a"])
    assert len(server2.requests) == 2


async def test_cached_documents_are_served_while_the_circuit_is_open():
    healthy = True

    def answer(_body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200 if healthy else 500, json=completion_answer({"yes": -0.1, "no": -2.5}))

    server = Server(answer)
    r = reranker(server, breaker_failures=1, clock=Clock())
    scores = await r.score("q", ["a"])
    healthy = False
    with pytest.raises(StoreError):
        await r.score("q", ["b"])
    assert r.circuit_state == "open"
    assert await r.score("q", ["a"]) == scores  # no network needed
    assert len(server.requests) == 2


# ---- concurrency ---------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_concurrency_is_bounded(limit):
    async def answer(_body: dict[str, Any]) -> httpx.Response:
        await asyncio.sleep(0.01)
        return httpx.Response(200, json=completion_answer({"yes": -0.1, "no": -2.5}))

    server = Server(answer)
    scores = await reranker(server, max_concurrency=limit).score("q", [f"d{i}" for i in range(7)])
    assert len(scores) == 7
    assert len(server.requests) == 7
    assert server.max_in_flight == limit


async def test_the_bound_is_shared_by_concurrent_calls():
    async def answer(_body: dict[str, Any]) -> httpx.Response:
        await asyncio.sleep(0.01)
        return httpx.Response(200, json=completion_answer({"yes": -0.1, "no": -2.5}))

    server = Server(answer)
    r = reranker(server, max_concurrency=2)
    await asyncio.gather(*(r.score(f"q{i}", ["a", "b", "c"]) for i in range(3)))
    assert len(server.requests) == 9
    assert server.max_in_flight == 2


# ---- metrics and lifecycle -----------------------------------------------------------------------


async def test_metrics_count_calls_candidates_errors_and_cache():
    registry = CollectorRegistry()
    metrics = RerankMetrics(registry)
    healthy = True

    def answer(_body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(200 if healthy else 500, json=completion_answer({"yes": -0.1, "no": -2.5}))

    r = reranker(Server(answer), metrics=metrics, breaker_failures=1, clock=Clock())
    await r.score("q", ["a", "b"])
    await r.score("q", ["a"])
    healthy = False
    with pytest.raises(StoreError):
        await r.score("q", ["c"])
    with pytest.raises(StoreUnavailable):
        await r.score("q", ["d"])

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("hrt_rerank_calls_total", status="ok") == 2
    assert value("hrt_rerank_calls_total", status="error") == 1
    assert value("hrt_rerank_calls_total", status="circuit_open") == 1
    assert value("hrt_rerank_calls_total", status="unavailable") == 0
    assert value("hrt_rerank_candidates_count") == 4
    assert value("hrt_rerank_candidates_sum") == 5
    assert value("hrt_rerank_latency_seconds_count") == 2  # the two calls that reached the server
    assert value("hrt_rerank_server_errors_total", error_type="http_status") == 1
    assert value("hrt_rerank_cache_total", result="hit") == 1
    assert value("hrt_rerank_cache_total", result="miss") == 4


async def test_aclose_closes_only_its_own_client():
    server = Server(fixed({"yes": -0.1, "no": -2.5}))
    injected = httpx.AsyncClient(transport=httpx.MockTransport(server))
    async with Qwen3Reranker(base_url=BASE, client=injected) as r:
        await r.score("q", ["d"])
    assert not injected.is_closed
    await injected.aclose()

    own = Qwen3Reranker(base_url=BASE)
    await own.aclose()  # never opened: nothing to close
