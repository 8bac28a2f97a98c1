"""The retrieval request (:class:`RetrieveRequest`) and its parts: limits, time range, filters,
render options and configuration overrides, with the bounds every field is held to."""

from __future__ import annotations

import unicodedata
from datetime import datetime
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from hrt.config import DEPRECATED_PRESETS, PRESETS, WEIGHT_PRESET_NAMES, Weights, preset_weights
from hrt.metadata_filter import JSON_SCHEMA as METADATA_FILTER_SCHEMA
from hrt.metadata_filter import FilterError, parse_filter
from hrt.records import EntityId, IsoDateTime, UserId, utc

CONTRACT_VERSION = "9.4"

MAX_KEY_PHRASES = 20
MAX_PHRASE_CHARS = 200
MAX_QUERY_CHARS = 2000
MAX_MESSAGES = 50
MAX_MESSAGE_CHARS = 20_000
MAX_LIMIT = 50
MAX_SEED_IDS = 32


# --------------------------------------------------------------------------------------------
# Request
# --------------------------------------------------------------------------------------------


class _Strict(BaseModel):
    # strict: JSON's types as declared (lax validation reads true as 1, "3" as 3, 3.0 as 3)
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class Message(_Strict):
    role: str = Field(..., min_length=1, max_length=32)
    content: str = Field(..., max_length=MAX_MESSAGE_CHARS)


class Limits(_Strict):
    memory_units: int = Field(5, ge=0, le=MAX_LIMIT)
    concepts: int = Field(5, ge=0, le=MAX_LIMIT)
    artifacts: int = Field(3, ge=0, le=MAX_LIMIT)


class TimeRange(_Strict):
    start: IsoDateTime | None = None
    end: IsoDateTime | None = None

    _utc = field_validator("start", "end")(lambda v: utc(v) if v is not None else None)

    @model_validator(mode="after")
    def _ordered(self) -> TimeRange:
        if self.start is not None and self.end is not None and self.start > self.end:
            raise ValueError("start must not be after end")
        return self


# a metadata filter (hrt.metadata_filter's grammar), kept as the JSON the caller sent
MetadataFilter = Annotated[dict[str, Any], WithJsonSchema(METADATA_FILTER_SCHEMA)]


class Filters(_Strict):
    """Restrict what is returned. Tags and agents apply to memory units; the time range applies to
    memory units' ``creation_ts`` and artifacts' ``created_at``; ``metadata`` (operators over the
    memory units' metadata, :mod:`hrt.metadata_filter`) keeps only the memory units it matches.
    Traversal may pass through entities that are filtered out; they are never returned."""

    tags: list[str] = Field(default_factory=list, max_length=50)
    source_agent_ids: list[str] = Field(default_factory=list, max_length=50)
    kinds: list[Literal["memory_unit", "concept", "artifact"]] = Field(default_factory=list, max_length=3)
    time_range: TimeRange | None = None
    metadata: MetadataFilter | SkipJsonSchema[None] = None

    @field_validator("metadata", mode="before")
    @classmethod
    def _metadata(cls, value: Any) -> Any:
        if value is not None:
            try:
                parse_filter(value)
            except FilterError as exc:  # the position in the filter, never the caller's values
                raise ValueError(str(exc)) from None
        return value


TokenizerName = Literal["cl100k_base", "minilm-wordpiece"]


RenderFormat = Literal["markdown", "text", "compact"]
DEFAULT_RENDER_CHARS = 8_000
DEFAULT_ITEM_CHARS = 600  # compact: an item's text at most this long, else cut at a word with "…"
MIN_ITEM_CHARS, MAX_ITEM_CHARS = 80, 100_000


class RenderOptions(_Strict):
    """Ask for the context as one text within a budget (``retrieval_metadata.rendered``).

    The budget is ``max_tokens`` counted with ``tokenizer`` when given, else ``max_chars``
    (8,000 characters by default); with both, the text fits both. ``compact`` is the text for an
    LLM's prompt (no ids, scores or provenance; one line per item, each at most ``max_item_chars``
    characters of text, 600 by default); ``markdown`` and ``text`` show everything."""

    format: RenderFormat = "markdown"
    max_chars: int | None = Field(None, ge=200, le=400_000)
    max_tokens: int | None = Field(None, ge=50, le=100_000)
    tokenizer: TokenizerName = "cl100k_base"
    max_item_chars: int | None = Field(
        None,
        ge=MIN_ITEM_CHARS,
        le=MAX_ITEM_CHARS,
        description=f"format compact only: an item's text at most this many characters (default {DEFAULT_ITEM_CHARS})",
    )

    @field_validator("max_item_chars")
    @classmethod
    def _item_cap(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("format", "markdown") != "compact":
            raise ValueError("applies to format compact only")
        return value

    @property
    def item_chars(self) -> int:
        """The compact format's cap on an item's text."""
        return DEFAULT_ITEM_CHARS if self.max_item_chars is None else self.max_item_chars


# the names of hrt.config.PRESETS and DEPRECATED_PRESETS (checked below: the table is the one
# source, the Literal gives the JSON Schema its enum and mypy its type)
RetrievalPresetName = Literal[
    "balanced", "semantic", "recent", "salient", "personal", "relevance", "tuned-depth1", "tuned-2026-11"
]


class ConfigOverrides(_Strict):
    """The retrieval settings one request may change (docs/configuration.md names them; unset ones
    keep the server's or the preset's). Bounded so that no request costs much more than a default
    one: the walk's fan-out and caps, the index and the reranker stay the server's. The request's
    ``weights``, ``weights_preset`` and ``max_depth`` are the same settings (``weights``,
    ``default_depth``) under their older names."""

    weights: Weights | None = None
    default_depth: int | None = Field(None, ge=0, le=3)
    search_k: int | None = Field(None, ge=1, le=200)
    seeds_per_phrase: int | None = Field(None, ge=1, le=50)
    lexical_admits_at_floor: bool | None = None
    semantic_evidence: Literal["cosine", "fused"] | None = None
    phrase_evidence: Literal["max", "mean"] | None = None
    reached_evidence: Literal["path", "path_x_cosine", "scoped"] | None = None
    path_evidence: Literal["best", "noisy_or"] | None = None
    hop_decay: float | None = Field(None, gt=0.0, le=1.0)
    relevance_gate: float | None = Field(None, ge=0.0, lt=1.0)
    temporal_match: Literal["off", "tier"] | None = None
    passage_weight: float | None = Field(None, ge=0.0, le=10.0)
    passage_pool: int | None = Field(None, ge=1, le=200)
    artifact_evidence: Literal["own", "source"] | None = None
    recency_half_life_days: float | None = Field(None, gt=0.0, le=36_500.0)
    recency_clock: Literal["latest", "as_of"] | None = None
    invalidated_factor: float | None = Field(None, ge=0.0, le=1.0)
    rerank_blend: float | None = Field(None, ge=0.0, le=1.0)
    dedup_jaccard: float | None = Field(None, gt=0.0, le=1.0)
    phrase_best: bool | None = None
    snippet_chars: int | None = Field(None, ge=40, le=4000)
    related_items: int | None = Field(None, ge=0, le=20)

    def given(self) -> dict[str, object]:
        """The fields the request set, by name, sorted."""
        return {k: v for k, v in sorted(self.model_dump(exclude_none=True).items())}


def normalise_phrase(text: str) -> str:
    """NFKC, whitespace collapsed, trimmed. Case is kept (snippets quote it); dedup ignores it."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


# a phrase with something in it: the JSON Schema says so too, so generated clients and fuzzers know
KeyPhrase = Annotated[str, Field(min_length=1, max_length=MAX_PHRASE_CHARS, pattern=r"\S")]
# the presets that change the weights alone (hrt.config.WEIGHT_PRESET_NAMES, checked below)
PresetName = Literal["balanced", "semantic", "recent", "salient", "personal"]
if set(get_args(RetrievalPresetName)) != {*PRESETS, *DEPRECATED_PRESETS} or get_args(PresetName) != WEIGHT_PRESET_NAMES:
    raise ImportError("hrt.contract's preset names differ from hrt.config.PRESETS / WEIGHT_PRESET_NAMES")


class RetrieveRequest(_Strict):
    """What the DialogueAgent (or an orchestrator) asks for.

    Key phrases come from ``key_phrases``; else ``query``; else the last three ``messages``.
    ``seed_ids`` name entities to walk from beside them, or instead of them (docs/api.md,
    "Starting from known entities").
    """

    # one of the three is needed (checked below); omitted, not null, in the JSON Schema
    model_config = ConfigDict(
        json_schema_extra={"anyOf": [{"required": [name]} for name in ("key_phrases", "query", "messages", "seed_ids")]}
    )

    user_id: UserId
    # the bounds sit on the non-null member: on the union they would be applied to a null too
    key_phrases: Annotated[list[KeyPhrase], Field(min_length=1, max_length=MAX_KEY_PHRASES)] | SkipJsonSchema[None] = (
        None
    )
    query: Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS, pattern=r"\S")] | SkipJsonSchema[None] = None
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)] | SkipJsonSchema[None] = None
    # entities the caller already knows: seeds of the walk at full strength
    seed_ids: Annotated[list[EntityId], Field(min_length=1, max_length=MAX_SEED_IDS)] | SkipJsonSchema[None] = None
    limits: Limits = Field(default_factory=Limits)
    # three older names of config overrides, applied on top of "config" (overrides()):
    # max_depth is config.default_depth, weights config.weights, weights_preset the weights of
    # that preset
    max_depth: int | None = Field(
        None, ge=0, le=3, description="the walk's depth: config.default_depth under its older name"
    )
    weights: Weights | None = Field(None, description="the scoring weights: config.weights under its older name")
    weights_preset: PresetName | None = Field(
        None, description="the weights of this preset (balanced: the default weights) as config.weights"
    )
    as_of: IsoDateTime | None = None
    # event time: what was true then, as known at as_of (default: as_of); docs/api.md "Facts that change"
    valid_at: IsoDateTime | None = None
    # return facts that do not hold at valid_at too (superseded, ended), marked and without recency
    include_invalidated: bool = False
    filters: Filters = Field(default_factory=Filters)
    rerank: bool = False
    # items scoring below it are not returned (after rerank when reranking)
    min_score: float | None = Field(None, ge=0.0, le=1.0)
    render: RenderOptions | None = None
    # a named retrieval configuration (hrt/config.py PRESETS), then per-setting overrides; both
    # echoed in retrieval_metadata.config and part of config_hash. weights, weights_preset and
    # max_depth above are overrides too, applied on top
    preset: RetrievalPresetName | None = Field(
        None, description="a named retrieval configuration; tuned-2026-11 is tuned-depth1's deprecated name"
    )
    config: ConfigOverrides | None = None

    @field_validator("preset")
    @classmethod
    def _preset(cls, value: RetrievalPresetName | None) -> RetrievalPresetName | None:
        # a deprecated name means its preset, echoed (and hashed) under the new name
        return cast(RetrievalPresetName, DEPRECATED_PRESETS[value]) if value in DEPRECATED_PRESETS else value

    @field_validator("key_phrases")
    @classmethod
    def _phrases(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("must hold 1 to 20 key phrases")
        for i, p in enumerate(value):
            if len(p) > MAX_PHRASE_CHARS:
                raise ValueError(f"phrase {i} is {len(p)} characters; at most {MAX_PHRASE_CHARS}")
            if not normalise_phrase(p):
                raise ValueError(f"phrase {i} is empty")
        return value

    @field_validator("seed_ids")
    @classmethod
    def _seed_ids(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("names an id twice")
        return value

    @field_validator("as_of", "valid_at")
    @classmethod
    def _as_of(cls, value: datetime | None) -> datetime | None:
        return utc(value) if value is not None else None

    def overrides(self) -> dict[str, object]:
        """The settings this request changes on top of its preset, by name, sorted: ``config``,
        then ``weights`` / ``weights_preset`` and ``max_depth`` (their older names) over it."""
        given = self.config.given() if self.config is not None else {}
        if self.weights is not None:
            given["weights"] = self.weights.model_dump()
        elif self.weights_preset is not None:
            given["weights"] = preset_weights(self.weights_preset).model_dump()
        if self.max_depth is not None:
            given["default_depth"] = self.max_depth
        return dict(sorted(given.items()))

    @model_validator(mode="after")
    def _has_input(self) -> RetrieveRequest:
        has_query = self.query is not None and normalise_phrase(self.query) != ""
        has_messages = bool(self.messages) and any(normalise_phrase(m.content) for m in self.messages or [])
        if not self.key_phrases and not has_query and not has_messages and not self.seed_ids:
            raise ValueError("give key_phrases, a non-empty query, messages, or seed_ids")
        if self.weights is not None and self.weights_preset is not None:
            raise ValueError("give weights or weights_preset, not both")
        return self
