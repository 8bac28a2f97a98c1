"""Qwen3-Reranker behind HRT's :class:`~hrt.reranker.Reranker` port, over an OpenAI-compatible llama.cpp
server (llama-cpp-python's ``llama_cpp.server`` or upstream ``llama-server``).

Protocol (QwenLM/Qwen3-Embedding README, "Reranker Model"): the model reads a system line, then
``<Instruct>: …\\n<Query>: …\\n<Document>: …``, and must answer ``yes`` or ``no``. We ask for exactly one
token at temperature 0 with the top-N logprobs, and score the document with

    score = P(yes) = exp(l_yes) / (exp(l_yes) + exp(l_no))        (softmax over the yes/no pair)

Tokens match case- and whitespace-insensitively (``" Yes"``, ``"yes"`` and ``"YES"`` are all yes; the
max logprob per side is taken). When only one side is in the top-N, the missing side's logprob is
``min(-10, lowest listed logprob)``: -10 is vLLM's convention for the Qwen3-Reranker, and the clamp
keeps it consistent with what the answer proves (a token absent from the top-N is below every
listed one). Neither side present, no logprobs, an HTTP error, a timeout or unparsable JSON fail
that document.

Two request modes:

- ``completion`` (default): ``POST /v1/completions`` with the raw Qwen3 chat-template prompt built here,
  ``logprobs: N``. Exact and independent of the chat template stored in the GGUF.
- ``chat``: ``POST /v1/chat/completions`` with system and user messages, ``logprobs: true``,
  ``top_logprobs: N``. Right only when the server's chat template is Qwen3's with thinking off.

Failure contract: one HTTP request per document, run concurrently under a semaphore. If any
document fails, the whole call fails (the remaining requests are cancelled) with
:class:`~hrt.errors.StoreUnavailable` (connection error, timeout, open circuit) or
:class:`~hrt.errors.StoreError` (HTTP error, unusable answer); the pipeline then keeps the scorer's
order for every item. A partial result is never returned: blending reranker scores into some items
and not others would mix two scales in one ranking. Successful scores are cached (LRU on
``(query, document)``), so a retry after a partial failure only re-asks the failed documents.
A circuit breaker (:mod:`hrt.breaker`) stops calling a server that keeps failing.

Determinism: temperature 0 and 6-decimal rounding are not enough on their own. A llama.cpp server
reuses the KV cache of the prompt prefix shared with its previous request, and a prefix evaluated in
a different batch split yields slightly different logits. Within one process the score cache makes
repeated calls identical; for scores that do not depend on the server's history, run
llama-cpp-python with ``--n_batch 1``, which is slower per document (docs/deployment.md,
"Reranking with Qwen3-Reranker (llama.cpp)").

One instance belongs to one event loop (its semaphore and HTTP client are loop-bound).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from hrt.errors import HRTError, StoreError, StoreUnavailable
from hrt.openai_compat import AnswerTooLarge, ServerClient, api_root
from hrt.reranker import SCORE_DECIMALS
from hrt.rerankers.metrics import RerankMetrics
from hrt.rerankers.score_cache import ScoreCache
from hrt.templates import chat_prompt_sections, load_template

log = logging.getLogger(__name__)

RerankMode = Literal["chat", "completion"]

DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
PROMPT_TEMPLATE = "qwen3_reranker.md"
# vLLM's Qwen3-Reranker example scores a token missing from the top-20 as logprob -10.
MISSING_SIDE_LOGPROB = -10.0
LOG_PREVIEW_CHARS = 200
# SentencePiece and byte-level BPE word-start markers, for servers that return raw pieces.
_SPACE_MARKERS = "\u2581\u0120"


def _preview(text: object, limit: int = LOG_PREVIEW_CHARS) -> str:
    s = str(text)
    return s if len(s) <= limit else f"{s[:limit]}…(+{len(s) - limit} chars)"


# ---- prompt ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RerankPrompt:
    """The system line and the user template (fields ``instruction``, ``query``, ``document``)."""

    system: str
    user_template: str

    def user(self, instruction: str, query: str, document: str) -> str:
        return self.user_template.format(instruction=instruction, query=query, document=document)

    def messages(self, instruction: str, query: str, document: str) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.user(instruction, query, document)},
        ]

    def completion(self, instruction: str, query: str, document: str) -> str:
        """The Qwen3 chat template applied by hand, thinking off (the empty ``<think>`` block)."""
        return (
            f"<|im_start|>system\n{self.system}<|im_end|>\n"
            f"<|im_start|>user\n{self.user(instruction, query, document)}<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        )


_USER_FIELDS = {"instruction", "query", "document"}


def parse_prompt(text: str) -> RerankPrompt:
    """Read a ``## system`` / ``## user`` prompt file (see ``prompts/qwen3_reranker.md``)."""
    system, user = chat_prompt_sections(text, _USER_FIELDS, "reranker")
    return RerankPrompt(system=system, user_template=user)


def load_prompt(name: str = PROMPT_TEMPLATE) -> RerankPrompt:
    return parse_prompt(load_template(name))


# ---- answer parsing (pure) -------------------------------------------------------------------------


class RerankParseError(ValueError):
    """The server answered, but not with what the protocol needs. ``error_type`` names the metric label."""

    def __init__(self, message: str, error_type: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _logprob(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return None if math.isnan(f) or f == math.inf else f


def extract_top_logprobs(body: object) -> list[tuple[str, float]]:
    """The first generated token's top-N ``(token, logprob)`` pairs.

    Accepts both answer shapes, whichever endpoint produced them:
    OpenAI chat (``choices[0].logprobs.content[0].top_logprobs = [{token, logprob}, …]``, also what
    newer upstream llama-server returns for completions) and OpenAI legacy completions
    (``choices[0].logprobs.top_logprobs[0] = {token: logprob}``, llama-cpp-python).
    """
    if not isinstance(body, dict):
        raise RerankParseError("answer is not a JSON object", "invalid_response")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise RerankParseError("answer has no choices", "invalid_response")
    logprobs = choices[0].get("logprobs")
    if logprobs is None:
        raise RerankParseError("answer has no logprobs (does the server compute them?)", "no_logprobs")
    if not isinstance(logprobs, dict):
        raise RerankParseError("logprobs is not an object", "invalid_response")
    pairs: list[tuple[str, float]] = []
    content = logprobs.get("content")
    top = logprobs.get("top_logprobs")
    if isinstance(content, list) and content:
        first = content[0]
        if not isinstance(first, dict):
            raise RerankParseError("logprobs.content[0] is not an object", "invalid_response")
        entries = first.get("top_logprobs")
        if not isinstance(entries, list):
            raise RerankParseError("logprobs.content[0] has no top_logprobs list", "no_logprobs")
        for entry in [first, *entries]:
            if isinstance(entry, dict) and isinstance(entry.get("token"), str):
                lp = _logprob(entry.get("logprob"))
                if lp is not None:
                    pairs.append((entry["token"], lp))
    elif isinstance(top, list) and top:
        first_top = top[0]
        if not isinstance(first_top, dict):
            raise RerankParseError("logprobs.top_logprobs[0] is not an object", "no_logprobs")
        for token, value in first_top.items():
            lp = _logprob(value)
            if isinstance(token, str) and lp is not None:
                pairs.append((token, lp))
    else:
        raise RerankParseError("logprobs carry no token (empty answer, e.g. end-of-text first)", "no_logprobs")
    if not pairs:
        raise RerankParseError("top logprobs are empty", "no_logprobs")
    return pairs


def _side(token: str) -> str:
    return token.strip().strip(_SPACE_MARKERS).strip().lower()


def yes_probability(top: Sequence[tuple[str, float]] | Mapping[str, float]) -> float:
    """P(yes) from the top-N logprobs of the answer token (rule in the module docstring)."""
    pairs = list(top.items()) if isinstance(top, Mapping) else list(top)
    yes = max((lp for tok, lp in pairs if _side(tok) == "yes"), default=None)
    no = max((lp for tok, lp in pairs if _side(tok) == "no"), default=None)
    if yes is None and no is None:
        listed = ", ".join(repr(tok) for tok, _ in pairs[:8])
        raise RerankParseError(f"neither 'yes' nor 'no' in the top {len(pairs)} tokens ({listed})", "no_yes_no")
    missing = min(MISSING_SIDE_LOGPROB, min(lp for _, lp in pairs))
    l_yes = missing if yes is None else yes
    l_no = missing if no is None else no
    if l_yes == -math.inf and l_no == -math.inf:
        raise RerankParseError("both 'yes' and 'no' have probability 0", "no_yes_no")
    if l_yes == -math.inf:
        return 0.0
    if l_no == -math.inf:
        return 1.0
    # sigmoid(l_yes - l_no), written so that exp() never overflows
    d = l_yes - l_no
    if d >= 0:
        return 1.0 / (1.0 + math.exp(-d))
    e = math.exp(d)
    return e / (1.0 + e)


# ---- transport -------------------------------------------------------------------------------------


@contextmanager
def map_httpx_errors(what: str, on_error: Callable[[str], None] | None = None) -> Iterator[None]:
    """Translate httpx exceptions at the adapter edge (the httpx ``map_httpcore_exceptions`` pattern).

    Unreachable or slow server: :class:`StoreUnavailable`; anything else httpx raises: :class:`StoreError`.
    ``on_error`` receives the metric label (see :data:`hrt.rerankers.metrics.SERVER_ERROR_TYPES`).
    """
    note = on_error or (lambda _label: None)
    try:
        yield
    except (httpx.TimeoutException, TimeoutError) as exc:
        note("timeout")
        raise StoreUnavailable(f"rerank server timed out ({what})") from exc
    except (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError) as exc:
        note("connection")
        raise StoreUnavailable(f"rerank server unreachable ({what}): {type(exc).__name__}: {_preview(exc)}") from exc
    except AnswerTooLarge as exc:
        note("invalid_response")
        raise StoreError(f"rerank server answer refused ({what}): {exc}") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        note("other")
        raise StoreError(f"rerank request failed ({what}): {type(exc).__name__}: {_preview(exc)}") from exc


class _Skipped(Exception):
    """Internal: a queued document not sent because its call had already failed."""


# ---- the adapter -----------------------------------------------------------------------------------


class Qwen3Reranker(ServerClient):
    """Scores documents with a Qwen3-Reranker served by llama.cpp. See the module docstring."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None = None,
        model: str = "qwen3-reranker",
        instruction: str = DEFAULT_INSTRUCTION,
        timeout_s: float = 10.0,
        max_concurrency: int = 4,
        mode: str = "completion",
        top_logprobs: int = 20,
        max_doc_chars: int = 4000,
        breaker_failures: int = 3,
        breaker_reset_s: float = 30.0,
        cache_size: int = 2048,
        client: httpx.AsyncClient | None = None,
        metrics: RerankMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        prompt: RerankPrompt | None = None,
    ) -> None:
        if mode not in ("chat", "completion"):
            raise ValueError(f"reranker mode must be 'chat' or 'completion', got {mode!r}")
        if timeout_s <= 0 or max_concurrency < 1 or top_logprobs < 1 or max_doc_chars < 1 or cache_size < 0:
            raise ValueError("reranker: timeout_s > 0, max_concurrency >= 1, top_logprobs >= 1, max_doc_chars >= 1")
        if not instruction.strip():
            raise ValueError("reranker instruction must not be blank")
        super().__init__(
            api_key=api_key,
            timeout_s=timeout_s,
            max_concurrency=max_concurrency,
            breaker_failures=breaker_failures,
            breaker_reset_s=breaker_reset_s,
            client=client,
            clock=clock,
        )
        self._root = api_root(base_url, "reranker")
        self.name = f"qwen3-reranker@{self._root}"
        self.model = model
        self.instruction = instruction
        self.mode: RerankMode = "chat" if mode == "chat" else "completion"
        self.top_logprobs = top_logprobs
        self.max_doc_chars = max_doc_chars
        self.prompt = prompt or load_prompt()
        self._metrics = metrics
        self._cache = ScoreCache(cache_size)
        self._url = f"{self._root}/v1/chat/completions" if self.mode == "chat" else f"{self._root}/v1/completions"

    # -- requests

    def payload(self, query: str, document: str) -> dict[str, Any]:
        """The JSON body for one (query, document) pair (``document`` already clipped)."""
        if self.mode == "chat":
            return {
                "model": self.model,
                "messages": self.prompt.messages(self.instruction, query, document),
                "max_tokens": 1,
                "temperature": 0.0,
                "logprobs": True,
                "top_logprobs": self.top_logprobs,
            }
        return {
            "model": self.model,
            "prompt": self.prompt.completion(self.instruction, query, document),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": self.top_logprobs,
        }

    def _server_error(self, error_type: str) -> None:
        if self._metrics is not None:
            self._metrics.server_errors.labels(error_type=error_type).inc()

    async def _score_one(self, query: str, document: str, abort: asyncio.Event) -> float:
        body = self.payload(query, document)
        async with self._semaphore:
            if abort.is_set():  # another document of this call failed while this one queued
                raise _Skipped
            if log.isEnabledFor(logging.DEBUG):
                log.debug("rerank POST %s doc=%r", self._url, _preview(document, 80))
            with map_httpx_errors(self._url, self._server_error):
                response = await self._post(self._url, body)
        if not response.is_success:
            self._server_error("http_status")
            log.warning("rerank server answered %d: %s", response.status_code, _preview(response.text))
            raise StoreError(f"rerank server answered HTTP {response.status_code}: {_preview(response.text)}")
        try:
            answer = response.json()
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            self._server_error("invalid_response")
            log.warning("rerank server sent non-JSON: %s", _preview(response.text))
            raise StoreError(f"rerank server sent non-JSON: {_preview(response.text)}") from exc
        try:
            p_yes = yes_probability(extract_top_logprobs(answer))
        except RerankParseError as exc:
            self._server_error(exc.error_type)
            log.warning("rerank answer unusable (%s): %s; answer=%s", exc.error_type, exc, _preview(answer))
            raise StoreError(f"rerank answer unusable: {exc}") from exc
        return round(p_yes, SCORE_DECIMALS)

    async def _score_all(self, query: str, documents: Sequence[str]) -> dict[str, float]:
        """Score distinct documents concurrently; the first failure cancels the rest and is raised."""
        abort = asyncio.Event()

        async def one(document: str) -> float:
            try:
                return await self._score_one(query, document, abort)
            except BaseException:
                abort.set()
                raise

        tasks = [asyncio.ensure_future(one(d)) for d in documents]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            for t in tasks:
                if not t.done():
                    t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        out: dict[str, float] = {}
        failures: list[BaseException] = []
        for doc, task in zip(documents, tasks, strict=True):
            if task.cancelled():
                continue
            exc = task.exception()
            if isinstance(exc, _Skipped):
                continue
            if exc is not None:
                failures.append(exc)
                continue
            out[doc] = task.result()
            self._cache.put((query, doc), out[doc])
        if failures:
            first = next((e for e in failures if isinstance(e, HRTError)), failures[0])
            log.warning(
                "rerank call failed: %d of %d documents failed, %d scored, %d not asked; first: %s",
                len(failures),
                len(documents),
                len(out),
                len(documents) - len(out) - len(failures),
                _preview(first),
            )
            raise first
        return out

    async def score(self, query: str, documents: Sequence[str]) -> list[float] | None:
        """P(yes) per document in input order, rounded to 6 decimals; raises on any failure."""
        if not documents:
            return []
        clipped = [d[: self.max_doc_chars] for d in documents]
        return await self._cache.scores(query, clipped, self._guarded, self._metrics)

    async def _guarded(self, query: str, todo: Sequence[str]) -> dict[str, float]:
        """One call to the server under the circuit breaker, with its metrics."""
        m = self._metrics
        if not self._breaker.allow():
            if m is not None:
                m.calls.labels(status="circuit_open").inc()
            raise StoreUnavailable(
                f"reranker circuit open after {self._breaker.consecutive_failures} consecutive failed calls; "
                f"next probe in {self._breaker.retry_in():.1f}s"
            )
        started = time.perf_counter()
        status = "ok"
        try:
            fresh = await self._score_all(query, todo)
        except StoreUnavailable:
            status = "unavailable"
            self._breaker.record_failure()
            raise
        except StoreError:
            status = "error"
            self._breaker.record_failure()
            raise
        except Exception as exc:  # a bug, not the server: still a failed call, still one HRT error type
            status = "error"
            self._breaker.record_failure()
            log.exception("rerank call failed unexpectedly")
            raise StoreError(f"reranker failed unexpectedly: {type(exc).__name__}: {_preview(exc)}") from exc
        except BaseException:  # cancelled by the caller: no verdict on the server
            status = ""
            self._breaker.record_abandoned()
            raise
        finally:
            if m is not None and status:
                m.calls.labels(status=status).inc()
                m.latency.observe(time.perf_counter() - started)
        self._breaker.record_success()
        return fresh
