"""The optional LLM extractor: what one message of a conversation says, as entities, relations and
facts, asked of a chat model behind an OpenAI-compatible endpoint (``POST {base_url}/v1/chat/completions``:
llama.cpp's ``llama-server``, llama-cpp-python's ``llama_cpp.server``, vLLM, OpenAI).

The port is :class:`LLMExtractor`; :class:`ChatLLMExtractor` implements it; :func:`load_llm_extractor`
builds it from the settings, or gives None when ``HRT_EXTRACTOR_BASE_URL`` is unset (the default: the
rules alone).

The model's answer is data, never trusted: it is parsed as JSON and validated by :class:`LLMExtraction`
(bounded lists and strings, no unknown keys). Anything else fails the call with
:class:`ExtractionFailed`, whose ``reason`` says why:

- ``invalid``: the server answered, but the content is not JSON matching the schema (the caller falls
  back to the rules for that message);
- ``timeout``: no answer within ``timeout_s``;
- ``error``: the server could not be reached, refused the call (an HTTP error: a wrong key, model or
  URL) or answered with something that is not a chat completion;
- ``open``: the circuit breaker (:mod:`hrt.breaker`) is open after consecutive failed calls
  (timeouts, errors or invalid answers), so no request was sent. An invalid answer counts against
  the server like a timeout: a model that answers junk in seconds would otherwise keep every
  conversation call (and the write slot it holds) waiting on it message after message.

Every outcome is counted in ``hrt_extractor_calls_total{outcome}``; the calls that reached the server
are timed in ``hrt_extractor_latency_seconds``.

Determinism: temperature 0 and a fixed seed; the answer is constrained to the JSON schema
(:data:`RESPONSE_SCHEMA`) where the server supports it (``response_format``, see
:data:`ResponseFormat`), which makes even a small model answer with valid JSON.

One instance belongs to one event loop (its semaphore and HTTP client are loop-bound).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, runtime_checkable

import httpx
from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints, ValidationError, model_validator

from hrt.errors import HRTError
from hrt.openai_compat import ServerClient, api_root
from hrt.templates import chat_prompt_sections, load_template

if TYPE_CHECKING:
    from hrt.config import Settings
    from hrt.metrics import Metrics

log = logging.getLogger(__name__)

MAX_ENTITIES = 32
MAX_RELATIONS = 32
MAX_FACTS = 16
MAX_NAME_CHARS = 200
MAX_TYPE_CHARS = 64
MAX_FACT_CHARS = 1000
PROMPT_TEMPLATE = "memory_extraction.md"
SEED = 0
LOG_PREVIEW_CHARS = 200


# ---- what the model must answer --------------------------------------------------------------------


def _squash(value: object) -> object:
    """Whitespace runs to one space, ends stripped (non-strings pass on, for the type check to refuse)."""
    return " ".join(value.split()) if isinstance(value, str) else value


def _label(value: object) -> object:
    squashed = _squash(value)
    return squashed.lower() if isinstance(squashed, str) else squashed


def _entity_type(value: object) -> object:
    label = _label(value)
    return "entity" if label == "" or label is None else label


Name = Annotated[str, BeforeValidator(_squash), StringConstraints(min_length=1, max_length=MAX_NAME_CHARS)]
Fact = Annotated[str, BeforeValidator(_squash), StringConstraints(min_length=1, max_length=MAX_FACT_CHARS)]
RelationType = Annotated[str, BeforeValidator(_label), StringConstraints(min_length=1, max_length=MAX_TYPE_CHARS)]
EntityType = Annotated[str, BeforeValidator(_entity_type), StringConstraints(max_length=MAX_TYPE_CHARS)]


class LLMEntity(BaseModel):
    """A named thing the message mentions; ``type`` is a lower-case label (blank: ``entity``)."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    type: EntityType = "entity"


class LLMRelation(BaseModel):
    """``source`` is ``type`` to ``target``; both name entities of the same extraction."""

    model_config = ConfigDict(extra="forbid")

    source: Name
    target: Name
    type: RelationType


class LLMExtraction(BaseModel):
    """One message's extraction. After validation: entities are unique by lower-cased name (the first
    kept), relations name kept entities (others are dropped, not refused) with their kept spelling and
    are unique, facts are unique."""

    model_config = ConfigDict(extra="forbid")

    entities: list[LLMEntity] = Field(default_factory=list, max_length=MAX_ENTITIES)
    relations: list[LLMRelation] = Field(default_factory=list, max_length=MAX_RELATIONS)
    facts: list[Fact] = Field(default_factory=list, max_length=MAX_FACTS)

    @model_validator(mode="after")
    def _consistent(self) -> LLMExtraction:
        by_name: dict[str, LLMEntity] = {}
        for entity in self.entities:
            by_name.setdefault(entity.name.lower(), entity)
        relations: dict[tuple[str, str, str], LLMRelation] = {}
        for relation in self.relations:
            source, target = by_name.get(relation.source.lower()), by_name.get(relation.target.lower())
            if source is None or target is None:
                continue
            key = (source.name.lower(), target.name.lower(), relation.type)
            relations.setdefault(key, LLMRelation(source=source.name, target=target.name, type=relation.type))
        self.entities = list(by_name.values())
        self.relations = list(relations.values())
        self.facts = list(dict.fromkeys(self.facts))
        return self


def _string(max_length: int, min_length: int = 1) -> dict[str, Any]:
    return {"type": "string", "minLength": min_length, "maxLength": max_length}


def _array(items: dict[str, Any], max_items: int) -> dict[str, Any]:
    return {"type": "array", "items": items, "maxItems": max_items}


def _object(properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


# The JSON schema the server constrains the answer to (llama.cpp turns it into a grammar). It states
# the bounds of the models above; every key is required so the model always writes all three.
RESPONSE_SCHEMA: dict[str, Any] = _object(
    {
        "entities": _array(
            _object({"name": _string(MAX_NAME_CHARS), "type": _string(MAX_TYPE_CHARS, 0)}), MAX_ENTITIES
        ),
        "relations": _array(
            _object(
                {
                    "source": _string(MAX_NAME_CHARS),
                    "target": _string(MAX_NAME_CHARS),
                    "type": _string(MAX_TYPE_CHARS),
                }
            ),
            MAX_RELATIONS,
        ),
        "facts": _array(_string(MAX_FACT_CHARS), MAX_FACTS),
    }
)

# How the request asks for JSON:
# - json_object+schema: {"type": "json_object", "schema": …}, llama.cpp's form (llama-server and
#   llama-cpp-python's server, which compile the schema to a grammar);
# - json_schema: {"type": "json_schema", "json_schema": {"name", "schema"}}, OpenAI's and vLLM's form
#   (also llama-server's; llama-cpp-python's server ignores it);
# - json_object: JSON of any shape; off: no response_format (a server that refuses the field).
ResponseFormat = Literal["json_object+schema", "json_schema", "json_object", "off"]


def response_format(kind: ResponseFormat) -> dict[str, Any] | None:
    if kind == "json_object+schema":
        return {"type": "json_object", "schema": RESPONSE_SCHEMA}
    if kind == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "memory_extraction", "schema": RESPONSE_SCHEMA}}
    if kind == "json_object":
        return {"type": "json_object"}
    return None


# ---- the port ----------------------------------------------------------------------------------------


OutcomeReason = Literal["invalid", "timeout", "error", "open"]
OUTCOMES = ("ok", "invalid", "timeout", "error", "open")


class ExtractionFailed(HRTError):
    """No extraction for this message; ``reason`` is one of :data:`OutcomeReason` (module docstring)."""

    code = "extraction_failed"

    def __init__(self, reason: OutcomeReason, message: str) -> None:
        super().__init__(f"LLM extraction failed ({reason}): {message}")
        self.reason: OutcomeReason = reason


@runtime_checkable
class LLMExtractor(Protocol):
    name: str

    async def extract(self, speaker: str, text: str, context: Sequence[str] = ()) -> LLMExtraction:
        """What ``text``, said by ``speaker``, states; ``context``: the previous messages, oldest first,
        each as one line (e.g. ``"Alice: …"``), to resolve references. Raises :class:`ExtractionFailed`."""
        ...

    async def close(self) -> None:
        """Release the extractor's connections."""
        ...


# ---- metrics ---------------------------------------------------------------------------------------

LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 60.0)


class ExtractorMetrics:
    """``hrt_extractor_calls_total{outcome}`` (one of :data:`OUTCOMES`) and
    ``hrt_extractor_latency_seconds`` (the calls that reached the server), on the service's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter("hrt_extractor_calls", "LLM extractor calls, by outcome", ["outcome"], registry=registry)
        self.latency = Histogram(
            "hrt_extractor_latency_seconds",
            "Latency of one LLM extractor call that reached the server",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        for outcome in OUTCOMES:  # dashboards see zeros rather than gaps
            self.calls.labels(outcome=outcome)


# ---- the adapter -----------------------------------------------------------------------------------


def _preview(text: object, limit: int = LOG_PREVIEW_CHARS) -> str:
    s = str(text)
    return s if len(s) <= limit else f"{s[:limit]}…(+{len(s) - limit} chars)"


@contextmanager
def _map_httpx_errors(url: str) -> Iterator[None]:
    """httpx's exceptions as :class:`ExtractionFailed` (at the adapter edge)."""
    try:
        yield
    except (httpx.TimeoutException, TimeoutError) as exc:
        raise ExtractionFailed("timeout", f"no answer from {url} in time") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise ExtractionFailed("error", f"{url}: {type(exc).__name__}: {_preview(exc)}") from exc


def parse_content(content: object) -> LLMExtraction:
    """The model's message content as an :class:`LLMExtraction`, or ``ExtractionFailed("invalid")``.
    A Markdown code fence around the JSON is tolerated."""
    if not isinstance(content, str):
        raise ExtractionFailed("invalid", f"the answer has no text content ({type(content).__name__})")
    text = content.strip()
    if text.startswith("```"):
        text = text.removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ExtractionFailed("invalid", f"the answer is not JSON: {_preview(text)}") from exc
    if not isinstance(data, dict):
        raise ExtractionFailed("invalid", f"the answer is not a JSON object: {_preview(text)}")
    try:
        return LLMExtraction.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ExtractionFailed(
            "invalid", f"{exc.error_count()} schema error(s), first at {where or 'top'}: {first['msg']}"
        ) from exc


def _content_of(body: object) -> object:
    """``choices[0].message.content`` of a chat completion, or ``ExtractionFailed("error")``."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ExtractionFailed("error", f"not a chat completion (no choices): {_preview(body)}")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ExtractionFailed("error", f"not a chat completion (no message): {_preview(body)}")
    return message.get("content")


class ChatLLMExtractor(ServerClient):
    """:class:`LLMExtractor` over an OpenAI-compatible chat endpoint. See the module docstring."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str = "memory-extractor",
        api_key: str | None = None,
        timeout_s: float = 20.0,
        max_concurrency: int = 2,
        response_format: ResponseFormat = "json_object+schema",
        max_tokens: int = 1024,
        max_message_chars: int = 8000,
        max_context: int = 4,
        max_context_chars: int = 1000,
        breaker_failures: int = 3,
        breaker_reset_s: float = 30.0,
        client: httpx.AsyncClient | None = None,
        metrics: ExtractorMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        prompt: str | None = None,
    ) -> None:
        if timeout_s <= 0 or max_concurrency < 1 or max_tokens < 1 or max_message_chars < 1:
            raise ValueError("extractor: timeout_s > 0, max_concurrency >= 1, max_tokens >= 1, max_message_chars >= 1")
        if max_context < 0 or max_context_chars < 1:
            raise ValueError("extractor: max_context >= 0, max_context_chars >= 1")
        super().__init__(
            api_key=api_key,
            timeout_s=timeout_s,
            max_concurrency=max_concurrency,
            breaker_failures=breaker_failures,
            breaker_reset_s=breaker_reset_s,
            client=client,
            clock=clock,
        )
        self._root = api_root(base_url, "extractor")
        self.name = f"llm:{model}@{self._root}"
        self.model = model
        self.response_format = response_format
        self.max_tokens = max_tokens
        self.max_message_chars = max_message_chars
        self.max_context = max_context
        self.max_context_chars = max_context_chars
        self.system, self.user_template = chat_prompt_sections(
            prompt if prompt is not None else load_template(PROMPT_TEMPLATE),
            {"speaker", "message", "context"},
            "extractor",
        )
        self._url = f"{self._root}/v1/chat/completions"
        self._metrics = metrics

    async def close(self) -> None:
        """Close the HTTP client this extractor created (:meth:`ServerClient.aclose`)."""
        await self.aclose()

    # -- requests

    def messages(self, speaker: str, text: str, context: Sequence[str] = ()) -> list[dict[str, str]]:
        """The chat messages for one message: the system prompt, then the user template filled in."""
        recent = list(context)[-self.max_context :] if self.max_context else []
        squashed = (" ".join(c.split())[: self.max_context_chars] for c in recent)
        lines = "\n".join(f"- {c}" for c in squashed if c) or "(none)"
        user = self.user_template.format(
            speaker=" ".join(speaker.split()) or "Unknown", message=text[: self.max_message_chars], context=lines
        )
        return [{"role": "system", "content": self.system}, {"role": "user", "content": user}]

    def payload(self, speaker: str, text: str, context: Sequence[str] = ()) -> dict[str, Any]:
        """The JSON body of one call."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self.messages(speaker, text, context),
            "temperature": 0.0,
            "seed": SEED,
            "max_tokens": self.max_tokens,
        }
        fmt = response_format(self.response_format)
        if fmt is not None:
            body["response_format"] = fmt
        return body

    async def _ask(self, body: dict[str, Any]) -> LLMExtraction:
        with _map_httpx_errors(self._url):
            response = await self._post(self._url, body)
        if not response.is_success:
            raise ExtractionFailed(
                "error", f"{self._url} answered HTTP {response.status_code}: {_preview(response.text)}"
            )
        try:
            answer = response.json()
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise ExtractionFailed("error", f"{self._url} sent non-JSON: {_preview(response.text)}") from exc
        return parse_content(_content_of(answer))

    async def extract(self, speaker: str, text: str, context: Sequence[str] = ()) -> LLMExtraction:
        """See :meth:`LLMExtractor.extract`. Waits for one of ``max_concurrency`` slots; ``timeout_s``
        bounds the request once it has one."""
        body = self.payload(speaker, text, context)
        async with self._semaphore:
            # asked after the wait: calls queued behind a server that just failed do not pile on it
            if not self._breaker.allow():
                self._count("open")
                raise ExtractionFailed(
                    "open",
                    f"circuit open after {self._breaker.consecutive_failures} consecutive failed calls; "
                    f"next probe in {self._breaker.retry_in():.1f}s",
                )
            return await self._guarded(body)

    async def _guarded(self, body: dict[str, Any]) -> LLMExtraction:
        started = time.perf_counter()
        outcome = ""
        try:
            result = await self._ask(body)
            outcome = "ok"
            return result
        except ExtractionFailed as exc:
            outcome = exc.reason
            log.warning("LLM extraction failed (%s): %s", exc.reason, exc.message)
            raise
        except Exception as exc:  # a bug, not the server: still a failed call, still one error type
            outcome = "error"
            log.exception("LLM extraction failed unexpectedly")
            raise ExtractionFailed("error", f"unexpected {type(exc).__name__}: {_preview(exc)}") from exc
        finally:
            if not outcome:  # cancelled by the caller: no verdict on the server
                self._breaker.record_abandoned()
            elif outcome == "ok":
                self._breaker.record_success()
            else:  # timeout, error, or an answer that is not a valid extraction: all useless
                self._breaker.record_failure()
            if outcome:
                self._count(outcome, time.perf_counter() - started)

    def _count(self, outcome: str, seconds: float | None = None) -> None:
        if self._metrics is not None:
            self._metrics.calls.labels(outcome=outcome).inc()
            if seconds is not None:
                self._metrics.latency.observe(seconds)


def load_llm_extractor(settings: Settings, metrics: Metrics) -> LLMExtractor | None:
    """The chat-model extractor when ``HRT_EXTRACTOR_BASE_URL`` is set, else None (rules only)."""
    if not settings.extractor_base_url:
        return None
    key = settings.extractor_api_key
    return ChatLLMExtractor(
        base_url=settings.extractor_base_url,
        model=settings.extractor_model,
        api_key=key.get_secret_value() if key is not None else None,
        timeout_s=settings.extractor_timeout_s,
        max_concurrency=settings.extractor_max_concurrency,
        response_format=settings.extractor_response_format,
        metrics=ExtractorMetrics(metrics.registry),
    )
