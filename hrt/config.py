"""One settings object, read from ``HRT_*`` environment variables, built once and injected.

Library code never reads ``os.environ``; the CLI and the server call :func:`load_settings` once.
The retrieval knobs live in :mod:`hrt.retrieval_config`, the others in :mod:`hrt.settings_groups`;
both are importable from here.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from hrt.retrieval_config import (
    DEPRECATED_PRESETS,
    HASHED_UNLESS_DEFAULT,
    PRESETS,
    RELEVANCE_WEIGHTS,
    STAGES,
    WEIGHT_PRESET_NAMES,
    WEIGHT_PRESETS,
    AssemblyConfig,
    ExpansionConfig,
    GroundingConfig,
    IndexConfig,
    RerankConfig,
    RetrievalConfig,
    ScoringConfig,
    Weights,
    preset_weights,
)
from hrt.settings_groups import ModelSettings, OperationSettings, ServerSettings, StorageSettings

__all__ = [
    "DEPRECATED_PRESETS",
    "HASHED_UNLESS_DEFAULT",
    "PLACEHOLDER_SECRET",
    "PRESETS",
    "RELEVANCE_WEIGHTS",
    "STAGES",
    "WEIGHT_PRESETS",
    "WEIGHT_PRESET_NAMES",
    "AssemblyConfig",
    "ExpansionConfig",
    "GroundingConfig",
    "IndexConfig",
    "RerankConfig",
    "RetrievalConfig",
    "ScoringConfig",
    "Settings",
    "Weights",
    "default_cache_dir",
    "load_settings",
    "preset_weights",
]


class Settings(
    OperationSettings,
    ServerSettings,
    ModelSettings,
    StorageSettings,
    IndexConfig,
    GroundingConfig,
    ExpansionConfig,
    ScoringConfig,
    RerankConfig,
    AssemblyConfig,
    BaseSettings,
):
    """Every knob of HRT. Environment: ``HRT_<NAME>`` (e.g. ``HRT_DB_PATH``).

    The retrieval knobs are declared by the stages' configs (:mod:`hrt.retrieval_config`: so
    ``HRT_SEARCH_K`` sets ``GroundingConfig.search_k``); the others (:mod:`hrt.settings_groups`)
    say where things run and how they are reached, and never change a response."""

    model_config = SettingsConfigDict(env_prefix="HRT_", extra="ignore", frozen=True)

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
