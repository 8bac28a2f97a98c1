"""The configuration reference, ``docs/configuration.md``, generated from the settings model.

Names, types, defaults and what each setting does (its field's ``description``) come from
:class:`hrt.config.Settings` itself; only the order of the rows, and which settings share one, is
kept here (:data:`ROWS`). ``make docs`` (``python -m hrt.config_docs docs/configuration.md``)
rewrites the file and ``tests/unit/test_config_docs.py`` fails when a setting has no description,
is in no row, or the file is out of date.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, SecretStr

from hrt.config import DEPRECATED_PRESETS, PRESETS, STAGES, Settings
from hrt.contract import ConfigOverrides
from hrt.stores import registry
from hrt.stores.backend import ROLE_NAMES, ROLES, VARIABLES

# The reference's rows, in order: the settings shown in one row, described by the first one's
# description (each field's ``description``: hrt/retrieval_config.py, hrt/settings_groups.py)
ROWS: list[tuple[str, ...]] = [
    ("record_store",),
    ("graph_store",),
    ("vector_index",),
    ("db_path",),
    ("postgres_dsn",),
    ("postgres_pool_size",),
    ("neo4j_uri", "neo4j_database"),
    ("neo4j_user", "neo4j_password"),
    ("neo4j_expansion",),
    ("weaviate_host", "weaviate_http_port", "weaviate_grpc_port", "weaviate_collection"),
    ("weaviate_api_key",),
    ("weaviate_replication_factor",),
    ("embedding_model",),
    ("embedding_backend",),
    ("embedding_quantize",),
    ("embedding_device",),
    ("embedding_batch_size",),
    ("embedding_cache_size",),
    ("compute_threads",),
    ("embedding_threads",),
    ("embedding_write_nice",),
    ("switch_interval_ms",),
    ("cache_dir",),
    ("model_repository",),
    ("preload_users",),
    ("ann_min_vectors",),
    ("ann_m", "ann_ef_construction", "ann_ef_search"),
    ("rrf_k",),
    ("search_k",),
    ("seeds_per_phrase",),
    ("threshold_max", "threshold_min", "threshold_step", "threshold_target_ratio"),
    ("lexical_admits_at_floor",),
    ("semantic_evidence",),
    ("phrase_evidence",),
    ("reached_evidence",),
    ("default_depth",),
    ("path_evidence",),
    ("hop_decay",),
    ("fanout_per_node",),
    ("max_candidates_per_kind",),
    ("weights",),
    ("relevance_gate",),
    ("temporal_match",),
    ("passage_weight",),
    ("passage_pool",),
    ("artifact_evidence",),
    ("recency_half_life_days",),
    ("recency_clock",),
    ("invalidated_factor",),
    ("neutral_preference",),
    ("reranker_base_url",),
    ("reranker_api_key",),
    ("reranker_model",),
    ("reranker_instruction",),
    ("reranker_mode",),
    ("reranker_timeout_s",),
    ("reranker_max_concurrency",),
    ("reranker_top_logprobs",),
    ("reranker_oversample",),
    ("reranker_max_candidates",),
    ("rerank_budget_s",),
    ("rerank_blend",),
    ("reranker_onnx_model",),
    ("reranker_onnx_tokenizer",),
    ("reranker_onnx_max_length",),
    ("reranker_onnx_threads",),
    ("extractor_base_url",),
    ("extractor_model",),
    ("extractor_api_key",),
    ("extractor_timeout_s",),
    ("extractor_max_concurrency",),
    ("extractor_call_budget_s",),
    ("extractor_response_format",),
    ("shortlist_factor",),
    ("dedup_jaccard",),
    ("phrase_best",),
    ("snippet_chars",),
    ("related_items",),
    ("score_decimals",),
    ("host", "port"),
    ("auth",),
    ("auth_refresh_s",),
    ("auth_outage_grace_s",),
    ("key_rate_limit",),
    ("key_max_concurrency",),
    ("request_timeout_s",),
    ("max_body_bytes",),
    ("max_ingest_body_bytes",),
    ("max_ingest_records",),
    ("body_read_timeout_s",),
    ("max_ingest_bodies",),
    ("log_level",),
    ("max_concurrent_ingests",),
    ("ingest_retry_after_s",),
    ("browse_max_page_bytes",),
    ("max_concurrent_browse_pages",),
    ("browse_tenant_bytes_per_s",),
    ("tenant_body_bytes_per_s",),
    ("tenant_write_ms_per_s",),
    ("refusal_hold_max_s",),
    ("conversation_notes",),
    ("max_conversation_state_rows",),
    ("export_idle_s",),
    ("user_write_wait_s",),
    ("projector_max_attempts",),
    ("read_your_writes_timeout_s",),
    ("store_probe_interval_s",),
    ("store_probe_timeout_s",),
    ("store_suspect_after_s",),
    ("otel_traces_exporter",),
    ("otel_exporter_otlp_endpoint", "otel_exporter_otlp_traces_endpoint"),
    ("otel_sdk_disabled",),
    ("degrade_on_outage",),
]

HEADER = """# Configuration

One settings object, read from `HRT_*` environment variables once at start (`hrt/config.py`);
library code never reads the environment. This file is generated from the settings model
(`make docs`; a test fails when it is out of date): defaults are the code's own.

Every `hrt` command (`hrt serve` included) warns at start of an `HRT_*` variable that nothing in
HRT reads, with the nearest known name (`hrt: warning: HRT_SEACH_K is not a variable HRT reads
(did you mean HRT_SEARCH_K?); it is ignored`). A bad value stops it with one line naming the
variable, never the value (`hrt: error: HRT_MAX_CONCURRENT_INGESTS: Input should be a valid
integer`); any other failure is one `hrt: error:` line as well, and `hrt --debug <command>`
prints the traceback instead.

Settings marked *(request)* may also be changed by one request (`"config": {...}`, see
[below](#retrieval-configuration-presets-and-per-request-overrides)).

| variable | default | what |
|---|---|---|
"""

RETRIEVAL = """
## Retrieval configuration, presets and per-request overrides

The settings that can change a response form one frozen `RetrievalConfig` (`hrt/retrieval_config.py`), one part
per pipeline stage; `config_hash` in every response is its hash, so two servers with the same data and
the same hash answer alike. The others (where the stores are, ports, pools, caches, budgets) never
change a response and are not hashed.

{stages}

A request may name a **preset**, a change to the server's configuration (`"preset": "relevance"`), and
then **override** the settings marked *(request)* (`"config": {{"search_k": 50}}`), each validated within
bounds that keep a request's cost near a default one's. The request fields `weights`, `weights_preset`
and `max_depth` are older names of overrides, applied on top of `config`: `weights` is `config.weights`,
`weights_preset` the weights of that preset (`balanced`: the default weights) as `config.weights`, and
`max_depth` is `config.default_depth`. The preset and the overrides, whichever name set them, are
echoed in `retrieval_metadata.config` and enter `config_hash`, so one configuration has one hash
however it was asked for; a request that names none of them runs the server's configuration and
carries no `config` key.

| preset | changes |
|---|---|
{presets}

{deprecated}
"""


def default_text(value: Any) -> str:
    """A default as the reference shows it."""
    if value is None or isinstance(value, SecretStr):
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, BaseModel):
        return "`" + json.dumps(value.model_dump(mode="json"), separators=(",", ":")) + "`"
    if isinstance(value, str | Path):
        return f"`{value}`" if str(value) else "—"
    return str(value)


def undescribed(model: type[BaseModel] = Settings) -> list[str]:
    """Fields of ``model`` with no ``description`` (a new setting needs one, on its field)."""
    return [name for name, field in model.model_fields.items() if not (field.description or "").strip()]


def unplaced(rows: Sequence[tuple[str, ...]] = ROWS) -> list[str]:
    """Settings in no row of ``rows``, or in more than one (a new setting needs its row in :data:`ROWS`)."""
    named = [name for names in rows for name in names]
    return [name for name in Settings.model_fields if named.count(name) != 1]


def description(name: str) -> str:
    """What the setting ``name`` does: its field's ``description``."""
    what = Settings.model_fields[name].description
    if not what:
        raise ValueError(
            f"{name} has no description: give its field one (hrt/retrieval_config.py or hrt/settings_groups.py)"
        )
    return what


def variable(name: str) -> str:
    """A setting's environment variable: ``HRT_<NAME>``, or the standard name it reads (``OTEL_*``)."""
    alias = Settings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return f"HRT_{name.upper()}"


BACKENDS = """
## Backends

`HRT_RECORD_STORE`, `HRT_GRAPH_STORE` and `HRT_VECTOR_INDEX` each name a backend that can fill that
role, from the registry of backends (`hrt/stores/registry.py`; a name no backend of the role has
stops the start with one line listing the ones that do). The embedded record store projects only
into the embedded graph and vectors; PostgreSQL's projections go through its outbox to any of them.
Adding a backend: docs/development.md, "Adding a backend".

| backend | roles | what | settings it reads | `hrt dev up` service |
|---|---|---|---|---|
{rows}
"""


def render_backends() -> str:
    """The registered backends as the reference's table."""
    rows = []
    for b in registry.backends():
        roles = ", ".join(f"{ROLE_NAMES[r]} (`{VARIABLES[r]}`)" for r in ROLES if r in b.roles)
        variables = ", ".join(f"`{v}`" for v in b.variables) or "none"
        rows.append(f"| `{b.name}` | {roles} | {b.summary} | {variables} | {b.dev_service or 'none'} |")
    return BACKENDS.format(rows="\n".join(rows))


def render_configuration() -> str:
    fields = Settings.model_fields
    unknown = [name for names in ROWS for name in names if name not in fields]
    if unknown:
        raise ValueError(f"in ROWS but not settings: {unknown}")
    rows = []
    for names in ROWS:
        what = description(names[0])
        variables = " / ".join(f"`{variable(name)}`" for name in names)
        defaults = " / ".join(default_text(fields[name].default) for name in names)
        marked = f"{what} *(request)*" if all(n in ConfigOverrides.model_fields for n in names) else what
        rows.append(f"| {variables} | {defaults} | {marked.replace('|', chr(92) + '|')} |")
    stages = "\n".join(
        f"- **{name}**: " + ", ".join(f"`{f}`" for f in stage.model_fields) for name, stage in STAGES.items()
    )
    presets = "\n".join(
        f"| `{name}` | "
        + (", ".join(f"`{k}` = {default_text(v)}" for k, v in changes.items()) or "none: the server's configuration")
        + " |"
        for name, changes in PRESETS.items()
    )
    deprecated = " ".join(
        f"`{old}`, the former name of `{new}`, is still accepted (echoed as `{new}`)."
        for old, new in DEPRECATED_PRESETS.items()
    )
    return (
        HEADER
        + "\n".join(rows)
        + "\n"
        + render_backends()
        + RETRIEVAL.format(stages=stages, presets=presets, deprecated=deprecated)
    )


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/configuration.md")
    target.write_text(render_configuration(), encoding="utf-8")
    print(f"wrote {target}")
