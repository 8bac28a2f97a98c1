"""The retrieval response, the AugmentedMemoryContext V9.4 (:class:`AugmentedMemoryContext`) and
its parts, in the order of the canonical JSON; the canonical JSON itself and both JSON Schemas."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hrt.contract.request import RenderFormat, RetrieveRequest


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
