/**
 * A typed client of `hrt serve` for Node 18+ and browsers (the platform's `fetch`, no dependency).
 *
 *     import { HRTClient } from "@hrt/client";
 *     const hrt = new HRTClient({ baseUrl: "http://127.0.0.1:8080", apiKey: process.env.HRT_API_KEY });
 *     const ctx = await hrt.retrieve({ user_id: "u-maya", query: "Project Phoenix", render: { format: "compact" } });
 *
 * Every route has a method; the types are generated from the server's OpenAPI document
 * (`src/types.gen.ts`). Errors are thrown as {@link HRTError} subclasses carrying the API's error
 * body (`code`, `message`, `field`, `errors`). Retries follow the Python client's rules: 429 and a
 * request that never reached the server are retried whatever it is; 503 and a connection lost after
 * sending only when a second attempt cannot do harm (reads, ingest, deletes, merges, and messages
 * that carry their positions); waits double from `backoffMs` with jitter, never shorter than
 * `Retry-After`, never past `maxTotalMs`.
 */
import type { AugmentedMemoryContext, ConversationMessage, ConversationResult, EntityPage, EntitySummary, EntityView, Health, IngestRecord, KeyInfo, MergeResult, NewKey, Readiness, RetrieveRequest, UserStats, WriteSummary } from "./types.gen.js";
export type * from "./types.gen.js";
export type FilterScalar = string | number | boolean;
/** Operators on one field; several in one object must all hold. Types never mix (2 is not "2"). */
export type FieldCondition = {
    eq?: FilterScalar | null;
    ne?: FilterScalar | null;
    gt?: number | string;
    gte?: number | string;
    lt?: number | string;
    lte?: number | string;
    in?: FilterScalar[];
    nin?: FilterScalar[];
    /** a substring of a string field, or an element of a list field */
    contains?: FilterScalar;
    /** present (null included), or absent */
    exists?: boolean;
};
/**
 * Which memory units' metadata to keep: `{field: value}` (equality), `{field: {op: value}}`,
 * `{and: [...]}`, `{or: [...]}`, `{not: {...}}`; a field is a key or a dotted path ("owner.team").
 * Only memory units carry metadata: with a filter, concepts and artifacts are left out. An absent
 * field satisfies no operator but `{exists: false}`.
 */
export type MetadataFilter = {
    and: MetadataFilter[];
} | {
    or: MetadataFilter[];
} | {
    not: MetadataFilter;
} | {
    [field: string]: FilterScalar | null | FieldCondition | MetadataFilter | MetadataFilter[];
};
export type RetrieveOptions = Omit<RetrieveRequest, "filters"> & {
    filters?: Omit<NonNullable<RetrieveRequest["filters"]>, "metadata"> & {
        metadata?: MetadataFilter;
    };
};
/** The API's error body: `{"error": {code, message, field, errors?}}`. */
export interface ErrorDetail {
    code: string;
    message: string;
    field?: string | null;
    errors?: {
        field: string;
        message: string;
    }[];
    [key: string]: unknown;
}
export declare class HRTError extends Error {
    readonly status: number | undefined;
    readonly code: string;
    readonly field: string | null;
    readonly body: ErrorDetail | undefined;
    constructor(message: string, options?: {
        status?: number;
        code?: string;
        body?: ErrorDetail;
        cause?: unknown;
    });
}
export declare class MalformedBody extends HRTError {
}
export declare class Unauthenticated extends HRTError {
}
export declare class Forbidden extends HRTError {
}
export declare class NotFound extends HRTError {
}
export declare class Conflict extends HRTError {
}
export declare class PayloadTooLarge extends HRTError {
}
export declare class InvalidInput extends HRTError {
}
export declare class RateLimited extends HRTError {
    /** what `Retry-After` asked, in seconds */
    retryAfterS: number | null;
}
export declare class StoreUnavailable extends HRTError {
}
/** The server could not be reached (or the connection broke before an answer). */
export declare class Unreachable extends HRTError {
}
/** `Retry-After` as seconds from now: delay-seconds or an HTTP date; null when absent or unreadable. */
export declare function retryAfterSeconds(value: string | null, now?: number): number | null;
export interface RetryPolicy {
    /** attempts in all (1: no retry); default 4 */
    maxAttempts?: number;
    /** the first wait; doubles per attempt up to maxBackoffMs; default 250 */
    backoffMs?: number;
    maxBackoffMs?: number;
    /** no wait that would end past this long after the first attempt began; default 30000 */
    maxTotalMs?: number;
    jitter?: boolean;
    /** retry writes after they may have been applied (503, connection lost); default true */
    retryWrites?: boolean;
}
export interface ClientOptions {
    baseUrl?: string;
    apiKey?: string;
    retry?: RetryPolicy;
    /** the fetch to use (default: globalThis.fetch) */
    fetch?: typeof fetch;
    /** how to wait between attempts (tests) */
    sleep?: (ms: number) => Promise<void>;
    /** per attempt; default 60000 */
    timeoutMs?: number;
}
export type EntityKind = "memory_unit" | "concept" | "artifact";
export interface BrowseOptions {
    kind?: EntityKind;
    tags?: string[];
    agent?: string[];
    created_after?: string | Date;
    created_before?: string | Date;
    valid_at?: string | Date;
    prefix?: string;
    include_invalidated?: boolean;
    /** the page size, 1 to 500 */
    limit?: number;
    metadata?: MetadataFilter;
}
export interface AddMessagesOptions {
    agent_id?: string;
    /** the first message's position when the messages carry no index */
    start?: number;
    user_name?: string;
    agent_name?: string;
}
export interface CreateKeyOptions {
    users?: string[] | null;
    expires?: string;
    rate_limit?: number;
    max_concurrency?: number;
}
export declare class HRTClient {
    readonly baseUrl: string;
    private readonly headers;
    private readonly retry;
    private readonly fetchImpl;
    private readonly sleep;
    private readonly timeoutMs;
    constructor(options?: ClientOptions);
    /** `HRT_URL` (default http://127.0.0.1:8080) and `HRT_API_KEY` from an environment (pass process.env). */
    static fromEnv(env: Record<string, string | undefined>, options?: ClientOptions): HRTClient;
    /** POST /v1/retrieve: the AugmentedMemoryContext (with `render`, its text in retrieval_metadata.rendered). */
    retrieve(request: RetrieveOptions): Promise<AugmentedMemoryContext>;
    /** The response's canonical JSON text, as the server sent it (byte-identical for a pinned as_of). */
    retrieveJson(request: RetrieveOptions): Promise<string>;
    /** POST /v1/ingest: records upserted (or deleted) in one transaction; idempotent by id. */
    ingest(records: IngestRecord[]): Promise<WriteSummary>;
    /** POST /v1/ingest of NDJSON text (the export's format). */
    ingestJsonl(text: string): Promise<WriteSummary>;
    /**
     * POST /v1/conversations: messages of one session. Messages that each carry their `index` (or
     * follow a `start`) are retried after a 503 or a lost connection (sent twice, they change nothing);
     * others only when nothing was sent, since they would go after the session's last message again.
     */
    addMessages(userId: string, sessionId: string, messages: ConversationMessage[], options?: AddMessagesOptions): Promise<ConversationResult>;
    deleteEntity(userId: string, kind: EntityKind, entityId: string): Promise<WriteSummary>;
    deleteUser(userId: string): Promise<WriteSummary>;
    /** Merge concepts `ids` into `target` (their relations, names and aliases move onto it). */
    mergeConcepts(userId: string, target: string, ids: string[]): Promise<MergeResult>;
    stats(userId: string): Promise<UserStats>;
    getEntity(userId: string, kind: EntityKind, entityId: string, relationLimit?: number): Promise<EntityView>;
    /** The pages of GET /v1/users/{user_id}/entities, one request per page, following next_cursor. */
    pages(userId: string, options?: BrowseOptions): AsyncGenerator<EntityPage>;
    /** Every entity the filters let through, in id order (`for await`); a page fetched at a time. */
    listEntities(userId: string, options?: BrowseOptions): AsyncGenerator<EntitySummary>;
    /**
     * GET /v1/users/{user_id}/export: the user's records as an NDJSON byte stream (the ingest format),
     * as the server sends it. Retried as any read until the answer starts, never after.
     */
    export(userId: string): Promise<ReadableStream<Uint8Array>>;
    /** The export's records, one object per line, as they stream in; a stream cut inside a line throws. */
    exportRecords(userId: string): AsyncGenerator<Record<string, unknown>>;
    listKeys(): Promise<KeyInfo[]>;
    /** Create a key (never retried once sent: a second creation would fail on the name). */
    createKey(name: string, scopes: string[], options?: CreateKeyOptions): Promise<NewKey>;
    revokeKey(name: string): Promise<KeyInfo>;
    healthz(): Promise<Health>;
    /** 503 here is an answer (not ready, with the reason), not an error. */
    readyz(): Promise<Readiness>;
    metrics(): Promise<string>;
    private json;
    private backoff;
    private mayResend;
    /** The answer to `call` (its status accepted), after the retries its kind allows. */
    private send;
    private waitBeforeRetry;
}
export default HRTClient;
