"""The wire contract: the retrieval request and the AugmentedMemoryContext V9.4.

Field names and nesting are exactly those of the V9.4 contract, in snake_case. HRT's additions live in
``retrieval_metadata`` (which the V9.4 prompt already refers to). Field order here is the order
in the canonical JSON, so changing it changes the bytes of every response.
"""

from __future__ import annotations

import json
import unicodedata
from datetime import datetime
from typing import Annotated, Any, Literal, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, WithJsonSchema, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from hrt.auth import KEY_NAME, SCOPES
from hrt.auth import Scope as KeyScope
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


# --------------------------------------------------------------------------------------------
# Response: AugmentedMemoryContext V9.4
# --------------------------------------------------------------------------------------------


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScoreBreakdown(_Out):
    semantic: float
    recency: float
    salience: float
    preference: float
    # HRT addition (null when the item was not reranked): the reranker's relevance in [0, 1]
    rerank: float | None = None


class IdName(_Out):
    id: str
    name: str


class IdTitle(_Out):
    id: str
    title: str


class RetrievedMemoryUnit(_Out):
    muid: str
    title: str
    content_snippet: str
    creation_ts: str
    source_type: str
    importance_score: float
    final_retrieval_score: float
    score_breakdown: ScoreBreakdown
    connected_concept_ids_and_names: list[IdName]


class RetrievedConcept(_Out):
    id: str
    name: str
    type: str
    description_snippet: str
    status: str
    salience: float
    final_retrieval_score: float
    score_breakdown: ScoreBreakdown
    related_top_memory_unit_ids_and_titles: list[IdTitle]
    key_properties_values: dict[str, Any]


class RetrievedArtifact(_Out):
    id: str
    artifact_type: str
    title: str
    content_snippet: str
    created_at: str
    final_retrieval_score: float
    score_breakdown: ScoreBreakdown


class WeightsUsed(_Out):
    alpha_semantic_similarity: float
    beta_recency: float
    gamma_salience: float
    delta_user_preference: float


class ScoringDetails(_Out):
    total_candidates_considered: int
    seed_entities_identified_from_key_phrases: int
    graph_traversal_depth_used: int
    weights_used: WeightsUsed


StageStatus = Literal["ok", "skipped", "degraded", "timeout", "error"]


class PhraseGrounding(_Out):
    """Per key phrase: where its adaptive threshold ended and what it grounded to."""

    key_phrase: str
    threshold: float
    best_similarity: float
    seed_ids: list[str]
    matched: bool


class BestEffort(_Out):
    """No phrase reached its floor, so each phrase's best hits seeded the walk anyway (a question in
    plain words over a user with memories never gets nothing): ``phrases`` searched that way,
    ``seed_ids`` the hits walked from, in order. Present only then."""

    phrases: list[str]
    seed_ids: list[str]


class SeedGrounding(_Out):
    """The request's ``seed_ids``, beside the phrases' grounding: those walked from (``found``:
    entities of the user known as of the request) and those that name none (``unknown``), each in
    the request's order. Present only when the request named seed_ids."""

    seed_ids: list[str]
    found: list[str]
    unknown: list[str]


class TimeWindowOut(_Out):
    """A date a key phrase names, as the span scoring matched timestamps against (start included,
    end excluded, ISO-8601 UTC)."""

    key_phrase: str
    text: str
    start: str
    end: str


class RelevanceGate(_Out):
    """The relevance gate of this request: recency, salience and preference counted for an item in
    proportion ``clamp((semantic / best_semantic[kind] - threshold) / (1 - threshold), 0, 1)``
    (all of them when ``threshold`` is 0)."""

    threshold: float
    best_semantic: dict[str, float]


class PathHop(_Out):
    """One step of the path from a seed: the edge walked and the node it reached."""

    edge: str
    node_id: str
    direction: Literal["out", "in"]  # out: the edge points from the previous node to node_id


class ItemProvenance(_Out):
    """Why an item came back: what grounded it or its seed, the path from the seed, and the
    evidence its semantic term was scored on."""

    kind: Literal["memory_unit", "concept", "artifact"]
    phrases: list[str]  # the key phrases whose search returned the item itself
    seed_id: str
    seed_phrases: list[str]  # the key phrases whose search made the seed a seed
    hops: list[PathHop]  # [] when the item is its own seed
    # which evidence its semantic term is: its own search hit, its path from the seed, that path
    # times its own best cosine to the phrases, or (an artifact) the semantic term of the memory unit
    # it was reached from over DERIVED_FROM, the last hop (docs/api.md, Scoring)
    evidence: Literal["search", "path", "path_x_cosine", "source"]
    search_evidence: float | None  # its own evidence from the search, when the search returned it
    path_score: float
    own_similarity: float | None  # its own best cosine to the phrases, when path_x_cosine used it


class MemoryUnitAttributes(_Out):
    """A returned memory unit's shared-memory attributes, beside its V9.4 fields."""

    source_agent_id: str | None
    tags: list[str]
    metadata: dict[str, Any]


class RenderBudget(_Out):
    unit: Literal["chars", "tokens"]
    limit: int
    used: int
    tokenizer: str | None  # with tokens


class RenderedContext(_Out):
    """The context as one deterministic text for the agent's prompt (request field ``render``)."""

    format: RenderFormat
    text: str
    budget: RenderBudget
    included: list[str]  # item ids, in the text's order
    truncated: str | None  # the last included item, when it was cut to fit (marked in the text)
    left_out: list[str]  # returned items that did not fit, in score order
    # format compact only (absent otherwise): the included items whose text was cut to
    # max_item_chars, in the text's order, and the concepts left out because an included memory
    # unit's text names them and they have nothing else to say (no description, no properties)
    shortened: list[str] | None = None
    redundant: list[str] | None = None


class ItemInterval(_Out):
    """When a returned item was true (ISO-8601 UTC; null is open): ``valid_from`` is its own, else
    a memory unit's or artifact's creation; ``valid_to`` its own, else the start of the earliest
    successor known as of the request (``superseded_by``)."""

    valid_from: str | None
    valid_to: str | None
    superseded_by: list[str]
    valid: bool  # holds at valid_at (false only with include_invalidated)


class ValidityReport(_Out):
    """The event time a request asked about, what it set aside as not true then, and the
    returned items' intervals (docs/api.md, "Facts that change")."""

    valid_at: str
    include_invalidated: bool
    # per kind: candidates set aside as not valid at valid_at (superseded or outside their interval)
    suppressed: dict[str, int]
    intervals: dict[str, ItemInterval]  # per returned item id, keys sorted


class AppliedConfig(_Out):
    """The preset and overrides a request asked for (what ``config_hash`` then hashes besides the
    server's configuration)."""

    preset: str | None
    overrides: dict[str, Any]


class RetrievalMetadata(_Out):
    contract_version: str
    user_id: str
    as_of: str
    key_phrases_processed: list[str]
    key_phrase_source: Literal["key_phrases", "query", "messages", "seed_ids"]
    phrase_grounding: list[PhraseGrounding]
    stages: dict[str, StageStatus]
    degraded: bool
    degraded_reasons: list[str]
    rerank_applied: bool
    missing_records: dict[str, list[str]]
    near_duplicates_removed: int
    deployment: str
    config_hash: str
    time_windows: list[TimeWindowOut]
    relevance_gate: RelevanceGate
    validity: ValidityReport
    # per returned item id (memory units, concepts, artifacts), keys sorted
    provenance: dict[str, ItemProvenance] = Field(default_factory=dict)
    # per returned memory unit: who wrote it, its tags and metadata (keys sorted)
    memory_unit_attributes: dict[str, MemoryUnitAttributes] = Field(default_factory=dict)
    rendered: RenderedContext | None = None
    # present only when the request named a preset or config overrides
    config: AppliedConfig | None = None
    # present only when the request named seed_ids
    seed_grounding: SeedGrounding | None = None
    # present only when no phrase grounded and the phrases' best hits below the floor were walked from
    best_effort: BestEffort | None = None
    # present only as false: nothing was ever stored for the user (a new user's first request); the
    # response is then empty, every phrase unmatched, the stages after intake skipped
    user_known: bool | None = None


class AugmentedMemoryContext(_Out):
    retrieved_memory_units: list[RetrievedMemoryUnit]
    retrieved_concepts: list[RetrievedConcept]
    retrieved_artifacts: list[RetrievedArtifact]
    retrieval_summary: str
    scoring_details: ScoringDetails
    unmatched_key_phrases: list[str]
    retrieval_metadata: RetrievalMetadata

    def canonical_json(self, *, indent: int | None = None) -> str:
        """The one serialisation of a response. Field order is fixed by the models; the pipeline
        builds free-form maps (properties, stage statuses) with sorted keys and rounds floats."""
        data = self.model_dump(mode="json")
        if data["retrieval_metadata"]["config"] is None:  # absent unless asked for (RetrievalMetadata)
            del data["retrieval_metadata"]["config"]
        meta = data["retrieval_metadata"]
        # absent unless asked for, unless it happened, or unless false
        for name in ("seed_grounding", "best_effort", "user_known"):
            if meta[name] is None:
                del meta[name]
        rendered = meta["rendered"]
        for name in ("shortened", "redundant"):  # the compact format's alone
            if rendered is not None and rendered[name] is None:
                del rendered[name]
        return canonical_dumps(data, indent=indent)


def canonical_dumps(data: Any, *, indent: int | None = None) -> str:
    return json.dumps(
        data,
        ensure_ascii=False,
        indent=indent,
        separators=(",", ":") if indent is None else (",", ": "),
        allow_nan=False,
    )


def response_json_schema() -> dict[str, Any]:
    return AugmentedMemoryContext.model_json_schema()


def request_json_schema() -> dict[str, Any]:
    return RetrieveRequest.model_json_schema()


# --------------------------------------------------------------------------------------------
# The other routes' bodies (the server answers them, hrt.client parses them)
# --------------------------------------------------------------------------------------------


class WriteSummary(BaseModel):
    upserted: int
    deleted: int


class UserStats(BaseModel):
    """Counts of one user's records; all zero for a user with none."""

    memory_unit: int
    concept: int
    artifact: int
    relation: int
    preference: int


class Health(BaseModel):
    status: Literal["ok"]


class KeyInfo(BaseModel):
    """An API key as listed: everything but its secret and hash."""

    name: str
    key_id: str
    status: Literal["active", "expired", "revoked"]
    scopes: list[KeyScope]
    users: list[str] | Literal["*"]
    created_at: str | None
    expires_at: str | None
    revoked_at: str | None
    last_used_at: str | None
    rate_limit: float | None
    max_concurrency: int | None
    parent: str | None = Field(
        None, description="the key id of the admin key that made it over HTTP; null: the operator (`hrt keys`)"
    )
    hash: Literal["sha256", "scrypt"] = Field(
        "sha256", description="how it is stored: scrypt for a key of an older version not used since"
    )


class NewKey(KeyInfo):
    key: str = Field(description="the secret key: shown once, never again")


class KeyRequest(BaseModel):
    """A key to create over HTTP: within the scopes and users of the admin key that asks."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    name: str = Field(pattern=f"^{KEY_NAME.pattern}$", description="unique among the live keys this key made")
    scopes: list[KeyScope] = Field(min_length=1, max_length=len(SCOPES))
    users: list[UserId] | None = Field(
        None, min_length=1, max_length=1000, description="the users it acts for; null for every user"
    )
    expires: str | None = Field(
        None,
        max_length=64,
        description="a duration (30d, 12h, 90m, 2w) or an ISO date, at most ten years away and not after the maker's",
    )
    rate_limit: float | None = Field(
        None, ge=0, le=1_000_000, description="requests per second: 0 (none) or 0.01 to 1,000,000; within the maker's"
    )
    max_concurrency: int | None = Field(None, ge=0, le=100_000, description="within the maker's; 0: none")


class Readiness(BaseModel):
    status: Literal["ready", "warming", "unavailable"]
    stores: dict[str, Literal["ok", "unavailable"]]
    caches: str
    embedder: str
    deployment: str
    graph_expansion: str
    auth: Literal["on", "off"]
    warnings: list[str] = Field(default_factory=list)
    # the reranker `"rerank": true` uses: none, qwen3-reranker@<server>, onnx-cross-encoder:<file>
    # (a default, so a client reads the report of a server older than the field)
    reranker: str = "none"


# --------------------------------------------------------------------------------------------
# Merging concepts (hrt/merge.py)
# --------------------------------------------------------------------------------------------

MAX_MERGE_IDS = 32


class MergeRequest(BaseModel):
    """The body of the merge route: the concepts to merge into the one the path names."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ids: list[EntityId] = Field(..., min_length=1, max_length=MAX_MERGE_IDS)

    @field_validator("ids")
    @classmethod
    def _distinct(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("names an id twice")
        return value


class MergeResult(BaseModel):
    """What a merge did: the concepts merged now (``merged``), the ids that name no concept of the
    user (already merged, deleted, or never one: ``absent``), the relations moved onto the target
    and those dropped as self-loops or weaker duplicates, and the target's aliases after it."""

    user_id: str
    target: str
    merged: list[str]
    absent: list[str]
    relations_moved: int
    relations_dropped: int
    aliases: list[str]
