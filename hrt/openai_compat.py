"""What HRT's clients of OpenAI-compatible servers (llama.cpp's ``llama-server``, llama-cpp-python's
``llama_cpp.server``, vLLM) share: the reranker (:mod:`hrt.rerankers.qwen3`) and the LLM extractor
(:mod:`hrt.extraction.llm`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import TracebackType
from typing import Self

import httpx

from hrt.breaker import BreakerState, CircuitBreaker


def api_root(base_url: str, what: str) -> str:
    """The server's root URL, given with or without its ``/v1`` suffix (``what`` names the client in
    errors); endpoints are ``{root}/v1/...``."""
    root = base_url.strip().rstrip("/")
    if not root.startswith(("http://", "https://")):
        raise ValueError(f"{what} base_url must be an http(s) URL, got {base_url!r}")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class ServerClient:
    """One server behind an HTTP client, a bounded number of requests in flight and a circuit breaker.

    The client is made on first use and closed by :meth:`aclose`; an injected one is the caller's to
    close. ``api_key`` (llama.cpp's ``--api-key``, OpenAI's key) goes as a bearer token on every call.
    One instance belongs to one event loop (its semaphore and HTTP client are loop-bound).
    """

    def __init__(
        self,
        *,
        api_key: str | None,
        timeout_s: float,
        max_concurrency: int,
        breaker_failures: int,
        breaker_reset_s: float,
        client: httpx.AsyncClient | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client
        self._owns_client = client is None
        self._breaker = CircuitBreaker(breaker_failures, breaker_reset_s, clock)
        self._semaphore = asyncio.Semaphore(max_concurrency)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # trust_env=False: HRT library code takes no configuration from the environment (proxies included)
            limits = httpx.Limits(max_connections=self.max_concurrency, max_keepalive_connections=self.max_concurrency)
            self._client = httpx.AsyncClient(timeout=self.timeout_s, limits=limits, trust_env=False)
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client this object created (an injected client is the caller's to close)."""
        if self._client is not None and self._owns_client:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    @property
    def circuit_state(self) -> BreakerState:
        return self._breaker.state
