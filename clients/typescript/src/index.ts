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

import type {
  AugmentedMemoryContext,
  ConversationMessage,
  ConversationResult,
  EntityPage,
  EntitySummary,
  EntityView,
  Health,
  IngestRecord,
  KeyInfo,
  MergeResult,
  NewKey,
  Readiness,
  RetrieveRequest,
  UserStats,
  WriteSummary,
} from "./types.gen.js";

export type * from "./types.gen.js";

// ---------------------------------------------------------------------------------------------
// metadata filters (docs/api.md, "Metadata filters")
// ---------------------------------------------------------------------------------------------

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
export type MetadataFilter =
  | { and: MetadataFilter[] }
  | { or: MetadataFilter[] }
  | { not: MetadataFilter }
  | { [field: string]: FilterScalar | null | FieldCondition | MetadataFilter | MetadataFilter[] };

export type RetrieveOptions = Omit<RetrieveRequest, "filters"> & {
  filters?: Omit<NonNullable<RetrieveRequest["filters"]>, "metadata"> & { metadata?: MetadataFilter };
};

// ---------------------------------------------------------------------------------------------
// errors
// ---------------------------------------------------------------------------------------------

/** The API's error body: `{"error": {code, message, field, errors?}}`. */
export interface ErrorDetail {
  code: string;
  message: string;
  field?: string | null;
  errors?: { field: string; message: string }[];
  [key: string]: unknown;
}

export class HRTError extends Error {
  readonly status: number | undefined;
  readonly code: string;
  readonly field: string | null;
  readonly body: ErrorDetail | undefined;
  constructor(message: string, options: { status?: number; code?: string; body?: ErrorDetail; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = options.status;
    this.code = options.code ?? options.body?.code ?? "error";
    this.field = options.body?.field ?? null;
    this.body = options.body;
  }
}
export class MalformedBody extends HRTError {}
export class Unauthenticated extends HRTError {}
export class Forbidden extends HRTError {}
export class NotFound extends HRTError {}
export class Conflict extends HRTError {}
export class PayloadTooLarge extends HRTError {}
export class InvalidInput extends HRTError {}
export class RateLimited extends HRTError {
  /** what `Retry-After` asked, in seconds */
  retryAfterS: number | null = null;
}
export class StoreUnavailable extends HRTError {}
/** The server could not be reached (or the connection broke before an answer). */
export class Unreachable extends HRTError {}

const ERRORS: Record<number, typeof HRTError> = {
  400: MalformedBody,
  401: Unauthenticated,
  403: Forbidden,
  404: NotFound,
  409: Conflict,
  413: PayloadTooLarge,
  422: InvalidInput,
  429: RateLimited,
  503: StoreUnavailable,
};

async function errorFrom(response: Response): Promise<HRTError> {
  const text = await response.text().catch(() => "");
  let body: ErrorDetail | undefined;
  try {
    const parsed = JSON.parse(text) as { error?: ErrorDetail };
    body = parsed && typeof parsed.error === "object" ? parsed.error : undefined;
  } catch {
    body = undefined;
  }
  const Kind = ERRORS[response.status] ?? HRTError;
  const message = body?.message ?? `HTTP ${response.status}`;
  const error = new Kind(message, { status: response.status, code: body?.code ?? `http_${response.status}`, ...(body ? { body } : {}) });
  if (error instanceof RateLimited) error.retryAfterS = retryAfterSeconds(response.headers.get("retry-after"));
  return error;
}

/** `Retry-After` as seconds from now: delay-seconds or an HTTP date; null when absent or unreadable. */
export function retryAfterSeconds(value: string | null, now: number = Date.now()): number | null {
  if (value === null || !value.trim()) return null;
  const text = value.trim();
  if (/^\d+(\.\d+)?$/.test(text)) return Number(text);
  const at = Date.parse(text);
  return Number.isNaN(at) ? null : Math.max(0, (at - now) / 1000);
}

// ---------------------------------------------------------------------------------------------
// the client
// ---------------------------------------------------------------------------------------------

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

interface Call {
  method: string;
  path: string;
  /** may it be sent again after it may have been applied */
  idempotent: boolean;
  write?: boolean;
  json?: unknown;
  body?: string;
  headers?: Record<string, string>;
  accept?: number[];
}

const DEFAULT_URL = "http://127.0.0.1:8080";

function segment(value: string): string {
  return encodeURIComponent(value);
}

function queryString(params: Record<string, unknown>): string {
  const query = new URLSearchParams();
  for (const name of Object.keys(params).sort()) {
    const value = params[name];
    if (value === undefined || value === null) continue;
    if (name === "metadata") {
      query.append(name, JSON.stringify(value));
      continue;
    }
    for (const v of Array.isArray(value) ? value : [value]) {
      query.append(name, v instanceof Date ? v.toISOString() : String(v));
    }
  }
  const text = query.toString();
  return text ? `?${text}` : "";
}

export class HRTClient {
  readonly baseUrl: string;
  private readonly headers: Record<string, string>;
  private readonly retry: Required<RetryPolicy>;
  private readonly fetchImpl: typeof fetch;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly timeoutMs: number;

  constructor(options: ClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? DEFAULT_URL).replace(/\/+$/, "");
    this.headers = { accept: "application/json" };
    if (options.apiKey) this.headers.authorization = `Bearer ${options.apiKey}`;
    this.retry = {
      maxAttempts: 4,
      backoffMs: 250,
      maxBackoffMs: 5000,
      maxTotalMs: 30000,
      jitter: true,
      retryWrites: true,
      ...options.retry,
    };
    if (this.retry.maxAttempts < 1) throw new RangeError("maxAttempts must be at least 1");
    const f = options.fetch ?? globalThis.fetch;
    if (typeof f !== "function") throw new TypeError("no fetch: give options.fetch (Node 18+ and browsers have one)");
    this.fetchImpl = f.bind(globalThis);
    this.sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.timeoutMs = options.timeoutMs ?? 60000;
  }

  /** `HRT_URL` (default http://127.0.0.1:8080) and `HRT_API_KEY` from an environment (pass process.env). */
  static fromEnv(env: Record<string, string | undefined>, options: ClientOptions = {}): HRTClient {
    return new HRTClient({ baseUrl: env.HRT_URL ?? DEFAULT_URL, ...(env.HRT_API_KEY ? { apiKey: env.HRT_API_KEY } : {}), ...options });
  }

  // --- retrieval -----------------------------------------------------------------------------

  /** POST /v1/retrieve: the AugmentedMemoryContext (with `render`, its text in retrieval_metadata.rendered). */
  async retrieve(request: RetrieveOptions): Promise<AugmentedMemoryContext> {
    return (await this.json({ method: "POST", path: "/v1/retrieve", idempotent: true, json: request })) as AugmentedMemoryContext;
  }

  /** The response's canonical JSON text, as the server sent it (byte-identical for a pinned as_of). */
  async retrieveJson(request: RetrieveOptions): Promise<string> {
    const response = await this.send({ method: "POST", path: "/v1/retrieve", idempotent: true, json: request });
    return response.text();
  }

  // --- writes --------------------------------------------------------------------------------

  /** POST /v1/ingest: records upserted (or deleted) in one transaction; idempotent by id. */
  async ingest(records: IngestRecord[]): Promise<WriteSummary> {
    return (await this.json({ method: "POST", path: "/v1/ingest", idempotent: true, write: true, json: { records } })) as WriteSummary;
  }

  /** POST /v1/ingest of NDJSON text (the export's format). */
  async ingestJsonl(text: string): Promise<WriteSummary> {
    return (await this.json({
      method: "POST",
      path: "/v1/ingest",
      idempotent: true,
      write: true,
      body: text,
      headers: { "content-type": "application/x-ndjson" },
    })) as WriteSummary;
  }

  /**
   * POST /v1/conversations: messages of one session. Messages that each carry their `index` (or
   * follow a `start`) are retried after a 503 or a lost connection (sent twice, they change nothing);
   * others only when nothing was sent, since they would go after the session's last message again.
   */
  async addMessages(
    userId: string,
    sessionId: string,
    messages: ConversationMessage[],
    options: AddMessagesOptions = {},
  ): Promise<ConversationResult> {
    const body: Record<string, unknown> = { user_id: userId, session_id: sessionId, messages };
    for (const [k, v] of Object.entries(options)) if (v !== undefined && v !== null) body[k] = v;
    const placed = options.start !== undefined || messages.every((m) => m.index !== undefined && m.index !== null);
    return (await this.json({ method: "POST", path: "/v1/conversations", idempotent: placed, write: true, json: body })) as ConversationResult;
  }

  async deleteEntity(userId: string, kind: EntityKind, entityId: string): Promise<WriteSummary> {
    const path = `/v1/users/${segment(userId)}/entities/${segment(kind)}/${segment(entityId)}`;
    return (await this.json({ method: "DELETE", path, idempotent: true, write: true })) as WriteSummary;
  }

  async deleteUser(userId: string): Promise<WriteSummary> {
    return (await this.json({ method: "DELETE", path: `/v1/users/${segment(userId)}`, idempotent: true, write: true })) as WriteSummary;
  }

  /** Merge concepts `ids` into `target` (their relations, names and aliases move onto it). */
  async mergeConcepts(userId: string, target: string, ids: string[]): Promise<MergeResult> {
    const path = `/v1/users/${segment(userId)}/concepts/${segment(target)}/merge`;
    return (await this.json({ method: "POST", path, idempotent: true, write: true, json: { ids } })) as MergeResult;
  }

  // --- reads ---------------------------------------------------------------------------------

  async stats(userId: string): Promise<UserStats> {
    return (await this.json({ method: "GET", path: `/v1/users/${segment(userId)}/stats`, idempotent: true })) as UserStats;
  }

  async getEntity(userId: string, kind: EntityKind, entityId: string, relationLimit?: number): Promise<EntityView> {
    const path = `/v1/users/${segment(userId)}/entities/${segment(kind)}/${segment(entityId)}${queryString({ relation_limit: relationLimit })}`;
    return (await this.json({ method: "GET", path, idempotent: true })) as EntityView;
  }

  /** The pages of GET /v1/users/{user_id}/entities, one request per page, following next_cursor. */
  async *pages(userId: string, options: BrowseOptions = {}): AsyncGenerator<EntityPage> {
    let cursor: string | null = null;
    do {
      const path: string = `/v1/users/${segment(userId)}/entities${queryString({ ...options, cursor })}`;
      const page = (await this.json({ method: "GET", path, idempotent: true })) as EntityPage;
      yield page;
      cursor = page.next_cursor ?? null;
    } while (cursor !== null);
  }

  /** Every entity the filters let through, in id order (`for await`); a page fetched at a time. */
  async *listEntities(userId: string, options: BrowseOptions = {}): AsyncGenerator<EntitySummary> {
    for await (const page of this.pages(userId, options)) yield* page.entities;
  }

  /**
   * GET /v1/users/{user_id}/export: the user's records as an NDJSON byte stream (the ingest format),
   * as the server sends it. Retried as any read until the answer starts, never after.
   */
  async export(userId: string): Promise<ReadableStream<Uint8Array>> {
    const response = await this.send({
      method: "GET",
      path: `/v1/users/${segment(userId)}/export`,
      idempotent: true,
      headers: { accept: "application/x-ndjson" },
    }, false);
    if (response.body === null) throw new HRTError("the export answered without a body", { code: "export_incomplete" });
    return response.body;
  }

  /** The export's records, one object per line, as they stream in; a stream cut inside a line throws. */
  async *exportRecords(userId: string): AsyncGenerator<Record<string, unknown>> {
    const reader = (await this.export(userId)).getReader();
    const decoder = new TextDecoder();
    let rest = "";
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        rest += decoder.decode(value, { stream: true });
        const lines = rest.split("\n");
        rest = lines.pop() ?? "";
        for (const line of lines) if (line) yield JSON.parse(line) as Record<string, unknown>;
      }
    } catch (cause) {
      throw new HRTError(`the export from ${this.baseUrl} ended before its last line: export again`, { code: "export_incomplete", cause });
    } finally {
      reader.releaseLock();
    }
    rest += decoder.decode();
    if (rest) throw new HRTError(`the export from ${this.baseUrl} ended before its last line: export again`, { code: "export_incomplete" });
  }

  // --- keys and operations --------------------------------------------------------------------

  async listKeys(): Promise<KeyInfo[]> {
    return (await this.json({ method: "GET", path: "/v1/keys", idempotent: true })) as KeyInfo[];
  }

  /** Create a key (never retried once sent: a second creation would fail on the name). */
  async createKey(name: string, scopes: string[], options: CreateKeyOptions = {}): Promise<NewKey> {
    const body: Record<string, unknown> = { name, scopes, users: options.users ?? null };
    for (const k of ["expires", "rate_limit", "max_concurrency"] as const) if (options[k] !== undefined) body[k] = options[k];
    return (await this.json({ method: "POST", path: "/v1/keys", idempotent: false, json: body, accept: [201] })) as NewKey;
  }

  async revokeKey(name: string): Promise<KeyInfo> {
    return (await this.json({ method: "DELETE", path: `/v1/keys/${segment(name)}`, idempotent: false })) as KeyInfo;
  }

  async healthz(): Promise<Health> {
    return (await this.json({ method: "GET", path: "/healthz", idempotent: true })) as Health;
  }

  /** 503 here is an answer (not ready, with the reason), not an error. */
  async readyz(): Promise<Readiness> {
    return (await this.json({ method: "GET", path: "/readyz", idempotent: true, accept: [200, 503] })) as Readiness;
  }

  async metrics(): Promise<string> {
    return (await this.send({ method: "GET", path: "/metrics", idempotent: true, headers: { accept: "text/plain" } })).text();
  }

  // --- sending, with retries ------------------------------------------------------------------

  private async json(call: Call): Promise<unknown> {
    return (await this.send(call)).json();
  }

  private backoff(attempt: number): number {
    const wait = Math.min(this.retry.maxBackoffMs, this.retry.backoffMs * 2 ** (attempt - 1));
    return this.retry.jitter ? wait * (0.5 + Math.random() / 2) : wait;
  }

  private mayResend(call: Call): boolean {
    return call.idempotent && (this.retry.retryWrites || !call.write);
  }

  /** The answer to `call` (its status accepted), after the retries its kind allows. */
  private async send(call: Call, timed = true): Promise<Response> {
    const started = Date.now();
    const accept = call.accept ?? [200];
    for (let attempt = 1; ; attempt++) {
      let outcome: Response | HRTError;
      const controller = new AbortController();
      const timer = timed ? setTimeout(() => controller.abort(), this.timeoutMs) : undefined;
      try {
        outcome = await this.fetchImpl(this.baseUrl + call.path, {
          method: call.method,
          headers: { ...this.headers, ...(call.json !== undefined ? { "content-type": "application/json" } : {}), ...call.headers },
          body: call.json !== undefined ? JSON.stringify(call.json) : call.body,
          signal: controller.signal,
        });
      } catch (cause) {
        outcome = new Unreachable(`${this.baseUrl} did not answer ${call.method} ${call.path}: ${String(cause)}`, { code: "unreachable", cause });
      } finally {
        if (timer !== undefined) clearTimeout(timer);
      }
      if (outcome instanceof Response && accept.includes(outcome.status)) return outcome;
      const wait = await this.waitBeforeRetry(call, attempt, started, outcome);
      if (wait === null) throw outcome instanceof Response ? await errorFrom(outcome) : outcome;
      if (outcome instanceof Response) await outcome.body?.cancel();
      await this.sleep(wait);
    }
  }

  private async waitBeforeRetry(call: Call, attempt: number, started: number, outcome: Response | HRTError): Promise<number | null> {
    if (attempt >= this.retry.maxAttempts) return null;
    let wait = this.backoff(attempt);
    if (outcome instanceof Response) {
      // 429: refused before any route ran, safe to send again; 503: perhaps applied
      if (!(outcome.status === 429 || (outcome.status === 503 && this.mayResend(call)))) return null;
      const after = retryAfterSeconds(outcome.headers.get("retry-after"));
      wait = Math.max(wait, (after ?? 0) * 1000);
    } else if (!this.mayResend(call)) {
      // fetch does not say whether the request left: a call that may not be sent twice is not
      return null;
    }
    return Date.now() + wait - started > this.retry.maxTotalMs ? null : wait;
  }
}

export default HRTClient;
