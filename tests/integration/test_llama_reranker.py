"""The Qwen3-Reranker adapter against a REAL llama.cpp server (llama-cpp-python) running the small Gemma 3
270M base GGUF from PyPI. That model is not a reranker: these tests check the protocol and the
adapter's behaviour (real logprobs in both modes, scores in [0, 1], determinism, failure translation,
the circuit breaker, latency), never relevance.

Gemma puts "yes"/"no" far below the top 20 after the Qwen3 prompt (around logprob -7 to -12, in several
spellings: "No", " no", "YES"…), so scoring tests ask for the top 1000; a real Qwen3-Reranker answers
"yes" or "no" as its top token. The cost per request barely depends on N: the server sorts the whole
vocabulary either way.

Determinism: at temperature 0 the answer still depends on the server's state. llama-cpp-python reuses
the KV cache of the longest prompt prefix it shares with the previous request, and a prefix evaluated
in a different batch split gives slightly different logits (here P(yes) moved from 0.249195 to 0.257705
for the same pair). With ``--n_batch 1`` every token is evaluated alone, so prefix reuse is exact and
scores are identical whatever came before; the determinism test runs against such a server. The
adapter's own cache makes repeated calls identical within one HRT process whatever the server does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from hrt.errors import StoreError, StoreUnavailable
from hrt.rerankers import Qwen3Reranker
from hrt.rerankers.qwen3 import extract_top_logprobs
from tests.integration.llama_server import LlamaServer, llama_server, require_llama

pytestmark = pytest.mark.integration

TOP_N = 1000
QUERY = "Who on the team knows Python?"
DOCS = [
    "Alice is a senior Python developer who maintains the billing service.",
    "The weather in Paris was sunny for the whole offsite.",
    "Bob runs the Kubernetes cluster and the on-call rota.",
    "Carol prefers tea to coffee and keeps a cat called Max.",
    "Dan wrote the data pipeline in Rust last spring.",
    "Eve reviews every pull request that touches the Python SDK.",
    "Project Phoenix ships in Q3 if the Postgres migration lands.",
    "Frank is learning Go and wants to mentor interns.",
]
MODES = ["completion", "chat"]
EXACT_ARGS = ("--n_batch", "1")


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    model = require_llama()
    with llama_server(model, log_dir=tmp_path_factory.mktemp("llama")) as server:
        yield server


@pytest.fixture(scope="module")
def llama_exact(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """A server whose scores do not depend on its KV-cache history (see the module docstring)."""
    model = require_llama()
    with llama_server(model, log_dir=tmp_path_factory.mktemp("llama-exact"), extra_args=EXACT_ARGS) as server:
        yield server


def make(server: LlamaServer, **kwargs: Any) -> Qwen3Reranker:
    kwargs.setdefault("top_logprobs", TOP_N)
    kwargs.setdefault("timeout_s", 90.0)  # generous: a loaded 2-core machine is slow, never wrong
    kwargs.setdefault("cache_size", 0)  # every call below must reach the server
    kwargs.setdefault("api_key", server.api_key)  # the server refuses calls without it
    return Qwen3Reranker(base_url=server.base_url, **kwargs)


@pytest.mark.parametrize("mode", MODES)
async def test_real_logprobs_come_back(llama: LlamaServer, mode: str) -> None:
    r = make(llama, mode=mode, top_logprobs=20)
    path = "/v1/chat/completions" if mode == "chat" else "/v1/completions"
    async with httpx.AsyncClient(timeout=60, trust_env=False) as client:
        response = await client.post(llama.base_url + path, json=r.payload(QUERY, DOCS[0]), headers=llama.headers)
    assert response.status_code == 200, response.text[:500]
    logprobs = response.json()["choices"][0]["logprobs"]
    if mode == "chat":
        assert len(logprobs["content"]) == 1  # max_tokens 1
        assert len(logprobs["content"][0]["top_logprobs"]) >= 20
    else:
        assert len(logprobs["top_logprobs"]) == 1
        assert len(logprobs["top_logprobs"][0]) >= 20
    pairs = extract_top_logprobs(response.json())
    assert all(isinstance(lp, float) and lp <= 0.0 for _, lp in pairs)
    await r.aclose()


@pytest.mark.parametrize("mode", MODES)
async def test_the_server_refuses_a_call_without_its_api_key(llama: LlamaServer, mode: str) -> None:
    """A reranker is a service like the stores: without the key (or with another one) the server
    answers 401 and the adapter fails the call as a server error, which the pipeline degrades."""
    path = "/v1/chat/completions" if mode == "chat" else "/v1/completions"
    payload = make(llama, mode=mode).payload(QUERY, DOCS[0])
    async with httpx.AsyncClient(base_url=llama.base_url, timeout=60, trust_env=False) as client:
        for headers in ({}, {"Authorization": "Bearer not-the-key"}):
            refused = await client.post(path, json=payload, headers=headers)
            assert refused.status_code == 401, refused.text[:300]
            assert (await client.get("/v1/models", headers=headers)).status_code == 401
    for key in (None, "not-the-key"):
        async with make(llama, mode=mode, api_key=key) as r:
            with pytest.raises(StoreError) as info:
                await r.score(QUERY, DOCS[:1])
        assert not isinstance(info.value, StoreUnavailable)  # the server is up: it said no
    async with make(llama, mode=mode) as r:  # HRT's reranker sends the key
        scores = await r.score(QUERY, DOCS[:1])
    assert scores is not None and len(scores) == 1 and 0.0 <= scores[0] <= 1.0


@pytest.mark.parametrize("mode", MODES)
async def test_scores_are_floats_in_unit_interval(llama: LlamaServer, mode: str) -> None:
    async with make(llama, mode=mode) as r:
        scores = await r.score(QUERY, DOCS[:4])
    assert scores is not None and len(scores) == 4
    assert all(isinstance(s, float) and 0.0 <= s <= 1.0 and s == round(s, 6) for s in scores)


# Under --n_batch 1 a cold prompt is evaluated one token at a time: on a loaded 2-core host one took 69 s,
# and a second request in flight waits for it (llama_cpp.server runs one at a time). What is tested here
# is the scores, not the speed, so no timeout a slow host reaches.
EXACT_TIMEOUT_S = 600.0


@pytest.mark.parametrize("mode", MODES)
async def test_the_same_call_twice_gives_identical_scores(llama_exact: LlamaServer, mode: str) -> None:
    async with make(llama_exact, mode=mode, max_concurrency=2, timeout_s=EXACT_TIMEOUT_S) as r:
        first = await r.score(QUERY, DOCS[:4])
        await r.score("Who likes coffee?", DOCS[4:6])  # change the server's KV cache in between
        second = await r.score(QUERY, DOCS[:4])
    async with make(llama_exact, mode=mode, max_concurrency=1, timeout_s=EXACT_TIMEOUT_S) as fresh:
        third = await fresh.score(QUERY, DOCS[:4])
    assert first == second == third


async def test_the_adapter_cache_keeps_repeated_calls_identical_on_a_default_server(llama: LlamaServer) -> None:
    requests = 0

    async def on_request(_request: httpx.Request) -> None:
        nonlocal requests
        requests += 1

    client = httpx.AsyncClient(event_hooks={"request": [on_request]}, trust_env=False)
    r = make(llama, client=client, cache_size=2048)
    first = await r.score(QUERY, DOCS[:4])
    await r.score("Who likes coffee?", DOCS[4:6])
    assert await r.score(QUERY, DOCS[:4]) == first
    assert requests == 6
    await client.aclose()


async def test_top_20_of_a_non_reranker_fails_cleanly(llama: LlamaServer) -> None:
    """The official top-20 of this base model holds neither yes nor no: the call fails with a
    StoreError (the pipeline's fallback path), never with a made-up score."""
    async with make(llama, top_logprobs=20) as r:
        with pytest.raises(StoreError, match="neither 'yes' nor 'no'") as info:
            await r.score(QUERY, DOCS[:2])
    assert not isinstance(info.value, StoreUnavailable)


async def test_killing_the_server_mid_run_is_translated_fast_and_opens_the_breaker(tmp_path: Path) -> None:
    model = require_llama()
    # a bound on the documents the server does answer, not on the kill: a queued request waits for the one
    # ahead (llama_cpp.server runs one at a time), which took more than 10 s on a loaded 2-core host
    timeout_s = 120.0
    requests_sent = 0
    responses = 0
    killed_at: float | None = None

    with llama_server(model, log_dir=tmp_path) as server:

        async def on_request(_request: httpx.Request) -> None:
            nonlocal requests_sent
            requests_sent += 1

        async def on_response(_response: httpx.Response) -> None:
            nonlocal responses, killed_at
            responses += 1
            if responses == 2:
                server.kill()  # SIGKILL while the next request is already queued at the server
                killed_at = time.perf_counter()

        client = httpx.AsyncClient(event_hooks={"request": [on_request], "response": [on_response]}, trust_env=False)
        r = make(server, client=client, timeout_s=timeout_s, max_concurrency=2, breaker_failures=2)
        with pytest.raises(StoreUnavailable, match=r"unreachable|timed out"):
            await r.score(QUERY, DOCS)
        assert killed_at is not None
        assert time.perf_counter() - killed_at < timeout_s
        assert not server.alive()
        assert r.circuit_state == "closed"  # one failed call so far

        started = time.perf_counter()
        with pytest.raises(StoreUnavailable, match="unreachable"):  # connection refused
            await r.score(QUERY, ["another document"])
        assert time.perf_counter() - started < timeout_s
        assert r.circuit_state == "open"

        before = requests_sent
        with pytest.raises(StoreUnavailable, match="circuit open"):
            await r.score(QUERY, ["a third document"])
        assert requests_sent == before  # refused without the network (a time bound fails on a loaded host)
        await client.aclose()


async def test_the_breaker_closes_once_the_server_is_back(tmp_path: Path) -> None:
    """Killed: calls fail and the breaker opens. Back at the same address: after ``breaker_reset_s``
    one probe goes through, succeeds, and the breaker closes; calls score again."""
    model = require_llama()
    with llama_server(model, log_dir=tmp_path) as server:
        port, key = int(server.base_url.rsplit(":", 1)[1]), server.api_key
        async with httpx.AsyncClient(trust_env=False) as client:
            r = make(server, client=client, timeout_s=120.0, breaker_failures=1, breaker_reset_s=1.0)
            assert len(await r.score(QUERY, DOCS[:1])) == 1 and r.circuit_state == "closed"
            server.kill()
            with pytest.raises(StoreUnavailable):
                await r.score(QUERY, ["a document it never scored"])
            assert r.circuit_state == "open"
            with llama_server(model, log_dir=tmp_path, api_key=key, port=port):
                await asyncio.sleep(1.1)  # the breaker's reset time: the next call is its probe
                scores = await r.score(QUERY, ["another document it never scored"])
                assert len(scores) == 1 and 0.0 <= scores[0] <= 1.0
                assert r.circuit_state == "closed"
