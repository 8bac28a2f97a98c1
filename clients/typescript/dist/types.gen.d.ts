/** The preset and overrides a request asked for (what ``config_hash`` then hashes besides the
 * server's configuration). */
export type AppliedConfig = {
    overrides: {
        [key: string]: unknown;
    };
    preset: string | null;
};
export type Artifact = {
    artifact_type: string;
    confidence?: number;
    content: string;
    created_at: string;
    /** 1-128 chars: letters, digits, _ . : @ - */
    id: string;
    kind?: "artifact";
    supersedes?: string[];
    title?: string;
    /** the tenant; 1-128 chars */
    user_id: string;
    valid_from?: string | null;
    valid_to?: string | null;
};
export type AugmentedMemoryContext = {
    retrieval_metadata: RetrievalMetadata;
    retrieval_summary: string;
    retrieved_artifacts: RetrievedArtifact[];
    retrieved_concepts: RetrievedConcept[];
    retrieved_memory_units: RetrievedMemoryUnit[];
    scoring_details: ScoringDetails;
    unmatched_key_phrases: string[];
};
/** No phrase reached its floor, so each phrase's best hits seeded the walk anyway (a question in
 * plain words over a user with memories never gets nothing): ``phrases`` searched that way,
 * ``seed_ids`` the hits walked from, in order. Present only then. */
export type BestEffort = {
    phrases: string[];
    seed_ids: string[];
};
export type Concept = {
    aliases?: string[];
    description?: string;
    /** 1-128 chars: letters, digits, _ . : @ - */
    id: string;
    kind?: "concept";
    name: string;
    properties?: {
        [key: string]: string | number | boolean | null;
    };
    salience?: number;
    status?: string;
    type?: string;
    /** the tenant; 1-128 chars */
    user_id: string;
    valid_from?: string | null;
    valid_to?: string | null;
};
/** The retrieval settings one request may change (docs/configuration.md names them; unset ones
 * keep the server's or the preset's). Bounded so that no request costs much more than a default
 * one: the walk's fan-out and caps, the index and the reranker stay the server's. The request's
 * ``weights``, ``weights_preset`` and ``max_depth`` are the same settings (``weights``,
 * ``default_depth``) under their older names. */
export type ConfigOverrides = {
    artifact_evidence?: ("own" | "source") | null;
    dedup_jaccard?: number | null;
    default_depth?: number | null;
    hop_decay?: number | null;
    invalidated_factor?: number | null;
    lexical_admits_at_floor?: boolean | null;
    passage_pool?: number | null;
    passage_weight?: number | null;
    path_evidence?: ("best" | "noisy_or") | null;
    phrase_best?: boolean | null;
    phrase_evidence?: ("max" | "mean") | null;
    reached_evidence?: ("path" | "path_x_cosine" | "scoped") | null;
    recency_clock?: ("latest" | "as_of") | null;
    recency_half_life_days?: number | null;
    related_items?: number | null;
    relevance_gate?: number | null;
    rerank_blend?: number | null;
    search_k?: number | null;
    seeds_per_phrase?: number | null;
    semantic_evidence?: ("cosine" | "fused") | null;
    snippet_chars?: number | null;
    temporal_match?: ("off" | "tier") | null;
    weights?: Weights | null;
};
/** One message of a conversation. ``name`` is the speaker (default: the role, capitalised). */
export type ConversationMessage = {
    /** the text, or OpenAI's content parts: their text parts are joined by a line break, other parts (images, audio, files) left out */
    content: string | ((string | ({
        text?: string;
        type: "input_text" | "output_text" | "text";
    }))[]);
    /** its position in the session (0-based) */
    index?: number | null;
    metadata?: {
        [key: string]: unknown;
    };
    name?: string | null;
    /** developer is taken as system, function as tool */
    role?: "assistant" | "developer" | "function" | "system" | "tool" | "user";
    timestamp?: string | null;
};
/** Messages of one session of one user, in order. Without ``index`` (per message) or ``start``
 * (the first message's position), the messages go after the session's last one. */
export type ConversationRequest = {
    agent_id?: string | null;
    /** the speaker of role assistant */
    agent_name?: string | null;
    messages: ConversationMessage[];
    /** 1-128 printable chars */
    session_id: string;
    start?: number | null;
    /** the tenant; 1-128 chars */
    user_id: string;
    /** the speaker of role user */
    user_name?: string | null;
};
export type ConversationResult = {
    concepts_linked: number;
    concepts_unlinked: number;
    extractor?: "rules" | "rules+llm";
    llm_fallbacks?: number;
    messages: MessageResult[];
    relations: number;
    session_id: string;
    user_id: string;
};
/** ``{"op": "delete", "kind": ..., "user_id": ..., ...}``: what to remove, by key. */
export type Deletion = {
    id?: string | null;
    kind: "memory_unit" | "concept" | "artifact" | "relation" | "preference";
    muid?: string | null;
    op: "delete";
    source?: string | null;
    target?: string | null;
    target_kind?: ("concept" | "concept_type" | "source_type" | "artifact_type") | null;
    type?: EdgeType | null;
    /** the tenant; 1-128 chars */
    user_id: string;
};
export type EdgeType = "MENTIONS" | "RELATED_TO" | "DERIVED_FROM" | "FOLLOWS" | "SUPERSEDES";
/** A page of a user's entities in id order; ``next_cursor`` fetches the next one (null: the last). */
export type EntityPage = {
    entities: EntitySummary[];
    next_cursor: string | null;
    /** true when the key lacks the read (or export) scope: each entity's record is null, ids and titles only (whole records in bulk need one of those scopes) */
    records_omitted?: boolean;
    user_id: string;
};
/** Another entity, named: its kind, id and title (a concept's name). */
export type EntityRef = {
    id: string;
    kind: Kind;
    title: string;
};
/** One entity of a page: its record as stored, and when and by which key it was last written. */
export type EntitySummary = {
    id: string;
    kind: Kind;
    /** the record as stored; null unless the key has the read or export scope (ids and titles only) */
    record: {
        [key: string]: unknown;
    } | null;
    title: string;
    written_at: string | null;
    written_by: string | null;
};
/** One entity and what HRT knows of it. */
export type EntityView = {
    id: string;
    kind: Kind;
    /** a concept's: how many memory units mention it; null otherwise */
    mentioned_by: number | null;
    /** the record as ingested (as stored: timestamps canonical UTC) */
    record: {
        [key: string]: unknown;
    };
    /** its relations in both directions, all of them */
    relation_count: number;
    /** its relations, by type, out before in, weight descending, then id; at most relation_limit */
    relations: RelationView[];
    /** what replaces it (SUPERSEDES to it), by id */
    superseded_by: EntityRef[];
    /** what it replaces (SUPERSEDES from it), by id */
    supersedes: EntityRef[];
    title: string;
    user_id: string;
    validity: ValidityView;
    /** 1 when first written, one more for each write since */
    version: number;
    /** when it was last written (null: before HRT recorded it) */
    written_at: string | null;
    /** the id of the API key that last wrote it (null: the operator) */
    written_by: string | null;
};
/** Every error response: ``{"error": {"code", "message", "field"}}``. */
export type ErrorBody = {
    error: ErrorDetail;
};
export type ErrorDetail = {
    code: string;
    /** every invalid field of the request (up to 100), the first being `field`'s */
    errors?: FieldError[] | null;
    field?: string | null;
    message: string;
};
export type FieldError = {
    field: string;
    message: string;
};
/** Restrict what is returned. Tags and agents apply to memory units; the time range applies to
 * memory units' ``creation_ts`` and artifacts' ``created_at``; ``metadata`` (operators over the
 * memory units' metadata, :mod:`hrt.metadata_filter`) keeps only the memory units it matches.
 * Traversal may pass through entities that are filtered out; they are never returned. */
export type Filters = {
    kinds?: ("memory_unit" | "concept" | "artifact")[];
    /** Memory units whose metadata matches: {field: value} (equals), {field: {op: value}} with op one of eq, ne, gt, gte, lt, lte, in, nin, contains, exists; {and: [..]}, {or: [..]}, {not: {..}}; a field is a metadata key or a dotted path (project.phase). Several members: all must hold. Only memory units carry metadata: with a filter, concepts and artifacts are left out. An absent field satisfies no operator but exists: false. Example: {"and": [{"project": "apollo"}, {"priority": {"gte": 2}}]} */
    metadata?: {
        [key: string]: unknown;
    };
    source_agent_ids?: string[];
    tags?: string[];
    time_range?: TimeRange | null;
};
export type Health = {
    status: "ok";
};
export type IdName = {
    id: string;
    name: string;
};
export type IdTitle = {
    id: string;
    title: string;
};
/** When a returned item was true (ISO-8601 UTC; null is open): ``valid_from`` is its own, else
 * a memory unit's or artifact's creation; ``valid_to`` its own, else the start of the earliest
 * successor known as of the request (``superseded_by``). */
export type ItemInterval = {
    superseded_by: string[];
    valid: boolean;
    valid_from: string | null;
    valid_to: string | null;
};
/** Why an item came back: what grounded it or its seed, the path from the seed, and the
 * evidence its semantic term was scored on. */
export type ItemProvenance = {
    evidence: "search" | "path" | "path_x_cosine" | "source";
    hops: PathHop[];
    kind: "memory_unit" | "concept" | "artifact";
    own_similarity: number | null;
    path_score: number;
    phrases: string[];
    search_evidence: number | null;
    seed_id: string;
    seed_phrases: string[];
};
/** An API key as listed: everything but its secret and hash. */
export type KeyInfo = {
    created_at: string | null;
    expires_at: string | null;
    /** how it is stored: scrypt for a key of an older version not used since */
    hash?: "sha256" | "scrypt";
    key_id: string;
    last_used_at: string | null;
    max_concurrency: number | null;
    name: string;
    /** the key id of the admin key that made it over HTTP; null: the operator (`hrt keys`) */
    parent?: string | null;
    rate_limit: number | null;
    revoked_at: string | null;
    scopes: ("retrieve" | "ingest" | "admin" | "ops" | "export" | "read")[];
    status: "active" | "expired" | "revoked";
    users: string[] | "*";
};
/** A key to create over HTTP: within the scopes and users of the admin key that asks. */
export type KeyRequest = {
    /** a duration (30d, 12h, 90m, 2w) or an ISO date, at most ten years away and not after the maker's */
    expires?: string | null;
    /** within the maker's; 0: none */
    max_concurrency?: number | null;
    /** unique among the live keys this key made */
    name: string;
    /** requests per second: 0 (none) or 0.01 to 1,000,000; within the maker's */
    rate_limit?: number | null;
    scopes: ("retrieve" | "ingest" | "admin" | "ops" | "export" | "read")[];
    /** the users it acts for; null for every user */
    users?: string[] | null;
};
export type Kind = "memory_unit" | "concept" | "artifact";
export type Limits = {
    artifacts?: number;
    concepts?: number;
    memory_units?: number;
};
export type MemoryUnit = {
    content: string;
    creation_ts: string;
    importance_score?: number;
    kind?: "memory_unit";
    metadata?: {
        [key: string]: unknown;
    };
    /** 1-128 chars: letters, digits, _ . : @ - */
    muid: string;
    source_agent_id?: string | null;
    source_type?: string;
    supersedes?: string[];
    tags?: string[];
    title?: string;
    /** the tenant; 1-128 chars */
    user_id: string;
    valid_from?: string | null;
    valid_to?: string | null;
};
/** A returned memory unit's shared-memory attributes, beside its V9.4 fields. */
export type MemoryUnitAttributes = {
    metadata: {
        [key: string]: unknown;
    };
    source_agent_id: string | null;
    tags: string[];
};
/** The body of the merge route: the concepts to merge into the one the path names. */
export type MergeRequest = {
    ids: string[];
};
/** What a merge did: the concepts merged now (``merged``), the ids that name no concept of the
 * user (already merged, deleted, or never one: ``absent``), the relations moved onto the target
 * and those dropped as self-loops or weaker duplicates, and the target's aliases after it. */
export type MergeResult = {
    absent: string[];
    aliases: string[];
    merged: string[];
    relations_dropped: number;
    relations_moved: number;
    target: string;
    user_id: string;
};
export type Message = {
    content: string;
    role: string;
};
export type MessageResult = {
    index: number;
    muid: string;
    status: "added" | "unchanged" | "replaced";
};
export type NewKey = {
    created_at: string | null;
    expires_at: string | null;
    /** how it is stored: scrypt for a key of an older version not used since */
    hash?: "sha256" | "scrypt";
    /** the secret key: shown once, never again */
    key: string;
    key_id: string;
    last_used_at: string | null;
    max_concurrency: number | null;
    name: string;
    /** the key id of the admin key that made it over HTTP; null: the operator (`hrt keys`) */
    parent?: string | null;
    rate_limit: number | null;
    revoked_at: string | null;
    scopes: ("retrieve" | "ingest" | "admin" | "ops" | "export" | "read")[];
    status: "active" | "expired" | "revoked";
    users: string[] | "*";
};
/** One step of the path from a seed: the edge walked and the node it reached. */
export type PathHop = {
    direction: "out" | "in";
    edge: string;
    node_id: string;
};
/** Per key phrase: where its adaptive threshold ended and what it grounded to. */
export type PhraseGrounding = {
    best_similarity: number;
    key_phrase: string;
    matched: boolean;
    seed_ids: string[];
    threshold: number;
};
export type Preference = {
    kind?: "preference";
    target: string;
    target_kind: "concept" | "concept_type" | "source_type" | "artifact_type";
    /** the tenant; 1-128 chars */
    user_id: string;
    weight: number;
};
export type Readiness = {
    auth: "on" | "off";
    caches: string;
    deployment: string;
    embedder: string;
    graph_expansion: string;
    reranker?: string;
    status: "ready" | "warming" | "unavailable";
    stores: {
        [key: string]: "ok" | "unavailable";
    };
    warnings?: string[];
};
export type Relation = {
    kind?: "relation";
    relation_type?: string | null;
    /** 1-128 chars: letters, digits, _ . : @ - */
    source: string;
    /** 1-128 chars: letters, digits, _ . : @ - */
    target: string;
    type: EdgeType;
    /** the tenant; 1-128 chars */
    user_id: string;
    valid_from?: string | null;
    valid_to?: string | null;
    weight?: number;
};
/** One relation seen from the entity read: ``out`` when it points from it. ``kind``, ``id``
 * and ``title`` are the other end's; the interval is the relation's own (null: open). */
export type RelationView = {
    direction: "out" | "in";
    id: string;
    kind: Kind;
    relation_type: string | null;
    title: string;
    type: string;
    valid_from: string | null;
    valid_to: string | null;
    weight: number;
};
/** The relevance gate of this request: recency, salience and preference counted for an item in
 * proportion ``clamp((semantic / best_semantic[kind] - threshold) / (1 - threshold), 0, 1)``
 * (all of them when ``threshold`` is 0). */
export type RelevanceGate = {
    best_semantic: {
        [key: string]: number;
    };
    threshold: number;
};
export type RenderBudget = {
    limit: number;
    tokenizer: string | null;
    unit: "chars" | "tokens";
    used: number;
};
/** Ask for the context as one text within a budget (``retrieval_metadata.rendered``).
 *
 * The budget is ``max_tokens`` counted with ``tokenizer`` when given, else ``max_chars``
 * (8,000 characters by default); with both, the text fits both. ``compact`` is the text for an
 * LLM's prompt (no ids, scores or provenance; one line per item, each at most ``max_item_chars``
 * characters of text, 600 by default); ``markdown`` and ``text`` show everything. */
export type RenderOptions = {
    format?: "markdown" | "text" | "compact";
    max_chars?: number | null;
    /** format compact only: an item's text at most this many characters (default 600) */
    max_item_chars?: number | null;
    max_tokens?: number | null;
    tokenizer?: "cl100k_base" | "minilm-wordpiece";
};
/** The context as one deterministic text for the agent's prompt (request field ``render``). */
export type RenderedContext = {
    budget: RenderBudget;
    format: "markdown" | "text" | "compact";
    included: string[];
    left_out: string[];
    redundant?: string[] | null;
    shortened?: string[] | null;
    text: string;
    truncated: string | null;
};
export type RetrievalMetadata = {
    as_of: string;
    best_effort?: BestEffort | null;
    config?: AppliedConfig | null;
    config_hash: string;
    contract_version: string;
    degraded: boolean;
    degraded_reasons: string[];
    deployment: string;
    key_phrase_source: "key_phrases" | "query" | "messages" | "seed_ids";
    key_phrases_processed: string[];
    memory_unit_attributes?: {
        [key: string]: MemoryUnitAttributes;
    };
    missing_records: {
        [key: string]: string[];
    };
    near_duplicates_removed: number;
    phrase_grounding: PhraseGrounding[];
    provenance?: {
        [key: string]: ItemProvenance;
    };
    relevance_gate: RelevanceGate;
    rendered?: RenderedContext | null;
    rerank_applied: boolean;
    seed_grounding?: SeedGrounding | null;
    stages: {
        [key: string]: "ok" | "skipped" | "degraded" | "timeout" | "error";
    };
    time_windows: TimeWindowOut[];
    user_id: string;
    user_known?: boolean | null;
    validity: ValidityReport;
};
/** What the DialogueAgent (or an orchestrator) asks for.
 *
 * Key phrases come from ``key_phrases``; else ``query``; else the last three ``messages``.
 * ``seed_ids`` name entities to walk from beside them, or instead of them (docs/api.md,
 * "Starting from known entities"). */
export type RetrieveRequest = {
    as_of?: string | null;
    config?: ConfigOverrides | null;
    filters?: Filters;
    include_invalidated?: boolean;
    key_phrases?: string[];
    limits?: Limits;
    /** the walk's depth: config.default_depth under its older name */
    max_depth?: number | null;
    messages?: Message[];
    min_score?: number | null;
    /** a named retrieval configuration; tuned-2026-11 is tuned-depth1's deprecated name */
    preset?: ("balanced" | "semantic" | "recent" | "salient" | "personal" | "relevance" | "tuned-depth1" | "tuned-2026-11") | null;
    query?: string;
    render?: RenderOptions | null;
    rerank?: boolean;
    seed_ids?: string[];
    /** the tenant; 1-128 chars */
    user_id: string;
    valid_at?: string | null;
    /** the scoring weights: config.weights under its older name */
    weights?: Weights | null;
    /** the weights of this preset (balanced: the default weights) as config.weights */
    weights_preset?: ("balanced" | "semantic" | "recent" | "salient" | "personal") | null;
};
export type RetrievedArtifact = {
    artifact_type: string;
    content_snippet: string;
    created_at: string;
    final_retrieval_score: number;
    id: string;
    score_breakdown: ScoreBreakdown;
    title: string;
};
export type RetrievedConcept = {
    description_snippet: string;
    final_retrieval_score: number;
    id: string;
    key_properties_values: {
        [key: string]: unknown;
    };
    name: string;
    related_top_memory_unit_ids_and_titles: IdTitle[];
    salience: number;
    score_breakdown: ScoreBreakdown;
    status: string;
    type: string;
};
export type RetrievedMemoryUnit = {
    connected_concept_ids_and_names: IdName[];
    content_snippet: string;
    creation_ts: string;
    final_retrieval_score: number;
    importance_score: number;
    muid: string;
    score_breakdown: ScoreBreakdown;
    source_type: string;
    title: string;
};
export type ScoreBreakdown = {
    preference: number;
    recency: number;
    rerank?: number | null;
    salience: number;
    semantic: number;
};
export type ScoringDetails = {
    graph_traversal_depth_used: number;
    seed_entities_identified_from_key_phrases: number;
    total_candidates_considered: number;
    weights_used: WeightsUsed;
};
/** The request's ``seed_ids``, beside the phrases' grounding: those walked from (``found``:
 * entities of the user known as of the request) and those that name none (``unknown``), each in
 * the request's order. Present only when the request named seed_ids. */
export type SeedGrounding = {
    found: string[];
    seed_ids: string[];
    unknown: string[];
};
export type TimeRange = {
    end?: string | null;
    start?: string | null;
};
/** A date a key phrase names, as the span scoring matched timestamps against (start included,
 * end excluded, ISO-8601 UTC). */
export type TimeWindowOut = {
    end: string;
    key_phrase: string;
    start: string;
    text: string;
};
/** Counts of one user's records; all zero for a user with none. */
export type UserStats = {
    artifact: number;
    concept: number;
    memory_unit: number;
    preference: number;
    relation: number;
};
/** The event time a request asked about, what it set aside as not true then, and the
 * returned items' intervals (docs/api.md, "Facts that change"). */
export type ValidityReport = {
    include_invalidated: boolean;
    intervals: {
        [key: string]: ItemInterval;
    };
    suppressed: {
        [key: string]: number;
    };
    valid_at: string;
};
/** The entity's interval as retrieval reads it: ``valid_from`` its own, else its creation;
 * ``valid_to`` its own, else the start of its earliest successor (null: open). */
export type ValidityView = {
    valid_from: string | null;
    valid_to: string | null;
};
/** The EntityScorer's four weights; names as in V9.4 ``weights_used``. */
export type Weights = {
    alpha_semantic_similarity?: number;
    beta_recency?: number;
    delta_user_preference?: number;
    gamma_salience?: number;
};
export type WeightsUsed = {
    alpha_semantic_similarity: number;
    beta_recency: number;
    delta_user_preference: number;
    gamma_salience: number;
};
export type WriteSummary = {
    deleted: number;
    upserted: number;
};
/** One record of POST /v1/ingest. */
export type IngestRecord = MemoryUnit | Concept | Artifact | Relation | Preference | Deletion;
