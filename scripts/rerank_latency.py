"""Measure the Qwen3Reranker adapter against a real llama.cpp server with the small test GGUF:
median request latency and wall time per document, per mode, server setting and concurrency.

    python scripts/rerank_latency.py        # needs scripts/install-llama.sh to have run

A measurement, not a test (docs/deployment.md's reranker figures come from here).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hrt.rerankers import Qwen3Reranker  # noqa: E402
from tests.integration.llama_server import llama_server, require_llama  # noqa: E402
from tests.integration.test_llama_reranker import DOCS, QUERY, TOP_N  # noqa: E402


async def timed(base_url: str, api_key: str, mode: str, concurrency: int, query: str) -> tuple[float, float]:
    durations: list[float] = []

    async def on_request(request: httpx.Request) -> None:
        request.extensions["t0"] = time.perf_counter()

    async def on_response(response: httpx.Response) -> None:
        durations.append(time.perf_counter() - response.request.extensions["t0"])

    async with httpx.AsyncClient(event_hooks={"request": [on_request], "response": [on_response]}) as client:
        r = Qwen3Reranker(
            base_url=base_url,
            api_key=api_key,
            client=client,
            mode=mode,
            max_concurrency=concurrency,
            top_logprobs=TOP_N,
            timeout_s=120,
            cache_size=0,
        )
        started = time.perf_counter()
        await r.score(query, DOCS)
        wall = time.perf_counter() - started
    return statistics.median(durations) * 1000, wall / len(DOCS) * 1000


async def measure(base_url: str, api_key: str, label: str) -> None:
    for mode in ("completion", "chat"):
        warm = Qwen3Reranker(base_url=base_url, api_key=api_key, mode=mode, top_logprobs=TOP_N, timeout_s=120)
        await warm.score("warm-up", DOCS[:1])
        await warm.aclose()
        for concurrency in (1, 2):
            median_ms, per_doc = await timed(base_url, api_key, mode, concurrency, f"{QUERY} ({mode} {concurrency})")
            print(
                f"{label:>10} {mode:>10} concurrency {concurrency}: median request {median_ms:6.0f} ms, "
                f"wall {per_doc:6.0f} ms per document"
            )


def main() -> None:
    model = require_llama()
    for label, extra in (("default", ()), ("n_batch 1", ("--n_batch", "1"))):
        with llama_server(model, extra_args=extra) as server:
            asyncio.run(measure(server.base_url, server.api_key, label))


if __name__ == "__main__":
    main()
