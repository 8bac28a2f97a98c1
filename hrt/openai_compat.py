"""What HRT's clients of OpenAI-compatible servers (llama.cpp's ``llama-server``, llama-cpp-python's
``llama_cpp.server``, vLLM) share: the reranker (:mod:`hrt.rerankers.qwen3`) and the LLM extractor
(:mod:`hrt.extraction.llm`)."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx

from hrt.breaker import BreakerState, CircuitBreaker


def api_root(base_url: str, what: str) -> str:
    """The server's root URL, given with or without its ``/v1`` suffix (``what`` names the client in
    errors); endpoints are ``{root}/v1/...``."""
    root = base_url.strip().rstrip("/")
    if not root.startswith(("http://", "https://")):
        raise ValueError(f"{what} base_url must be an http(s) URL, got {base_url!r}")
    return root[: -len("/v1")] if root.endswith("/v1") else root


# an answer is a few KiB (an extraction's JSON, a rerank's logprobs): a server sending far more is
# broken or hostile, and is read no further than this, decompressed bytes counted (a gzip bomb of a
# few hundred KiB would otherwise expand to hundreds of MB in memory)
MAX_ANSWER_BYTES = 1 << 20


class AnswerTooLarge(httpx.DecodingError):
    """An answer over :data:`MAX_ANSWER_BYTES` once decoded, or in an encoding HRT does not read."""


@dataclass(frozen=True)
class Answer:
    """A server's answer, read within its bound."""

    status_code: int
    content: bytes

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _decompressor(encoding: str) -> Any:
    """A zlib decompressor for the answer's Content-Encoding (None: none); br, zstd and stacked
    encodings are refused, as HRT asks for gzip at most."""
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise AnswerTooLarge(f"the answer is in an encoding HRT does not read ({encoding[:40]})")


async def read_bounded(response: httpx.Response, limit: int = MAX_ANSWER_BYTES) -> bytes:
    """The body of ``response`` (opened with ``stream``), read and decompressed a chunk at a time and
    never past ``limit`` bytes: :class:`AnswerTooLarge` beyond, whatever Content-Length claims."""
    if response.is_stream_consumed:  # read whole already by its transport (one in memory): its size alone
        if len(response.content) > limit:
            raise AnswerTooLarge(f"the answer is over {limit} bytes; at most {limit} are read")
        return response.content
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit and "content-encoding" not in response.headers:
        raise AnswerTooLarge(f"the answer is {declared} bytes; at most {limit} are read")
    decoder = _decompressor(response.headers.get("content-encoding", "").strip().lower())
    out = bytearray()
    async for raw in response.aiter_raw():
        # decompressed at most one byte past what is left: a bomb stops there, its tail unread
        data = raw if decoder is None else decoder.decompress(raw, limit + 1 - len(out))
        out += data
        if len(out) > limit or (decoder is not None and decoder.unconsumed_tail):
            raise AnswerTooLarge(f"the answer is over {limit} bytes; at most {limit} are read")
    if decoder is not None:
        out += decoder.flush()
    return bytes(out)


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

    async def _post(self, url: str, body: dict[str, Any]) -> Answer:
        """POST ``body``; the whole exchange within ``timeout_s`` (httpx's own timeout bounds each
        phase), the answer read within :data:`MAX_ANSWER_BYTES`."""
        headers = {**self._headers, "Accept-Encoding": "gzip"}
        async with (
            asyncio.timeout(self.timeout_s),
            self._http().stream("POST", url, json=body, headers=headers, timeout=self.timeout_s) as response,
        ):
            return Answer(response.status_code, await read_bounded(response))

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
