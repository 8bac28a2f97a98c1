// The retry rules, through an injected fetch (as the Python client's are through httpx's
// MockTransport): the client is under test, the answers it gets are scripted.
import assert from "node:assert/strict";
import { test } from "node:test";

import { HRTClient, StoreUnavailable, Unreachable, retryAfterSeconds } from "../dist/index.js";

function scripted(answers) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, init });
    const next = answers.shift();
    if (next instanceof Error) throw next;
    return new Response(JSON.stringify(next.body ?? {}), { status: next.status, headers: next.headers ?? {} });
  };
  return { fetch, calls };
}

const unavailable = { status: 503, body: { error: { code: "store_unavailable", message: "down", field: null } }, headers: { "retry-after": "2" } };
const result = { status: 200, body: { user_id: "u", session_id: "s", messages: [] } };

function client(fetch, waits) {
  return new HRTClient({ baseUrl: "http://hrt.invalid", apiKey: "k", fetch, sleep: async (ms) => void waits.push(ms), retry: { jitter: false } });
}

test("a conversation call is retried after a 503 only when its messages carry their positions", async () => {
  const waits = [];
  const placed = scripted([unavailable, result]);
  await client(placed.fetch, waits).addMessages("u", "s", [{ content: "hi", index: 4 }]);
  assert.equal(placed.calls.length, 2);
  assert.deepEqual(waits, [2000]); // Retry-After, not the shorter backoff
  const started = scripted([unavailable, result]);
  await client(started.fetch, []).addMessages("u", "s", [{ content: "hi" }], { start: 7 });
  assert.equal(started.calls.length, 2);
  const appended = scripted([unavailable, result]);
  await assert.rejects(client(appended.fetch, []).addMessages("u", "s", [{ content: "hi" }]), (e) => e instanceof StoreUnavailable && e.body.code === "store_unavailable");
  assert.equal(appended.calls.length, 1);
});

test("429 is retried for any call; a lost connection only for idempotent ones", async () => {
  const limited = scripted([{ status: 429, headers: { "retry-after": "1" }, body: { error: { code: "rate_limited", message: "slow down" } } }, { status: 201, body: { key: "k" } }]);
  await client(limited.fetch, []).createKey("n", ["retrieve"]);
  assert.equal(limited.calls.length, 2);
  const lost = scripted([new TypeError("fetch failed"), { status: 200, body: { status: "ok" } }]);
  assert.deepEqual(await client(lost.fetch, []).healthz(), { status: "ok" });
  const key = scripted([new TypeError("fetch failed"), { status: 201, body: {} }]);
  await assert.rejects(client(key.fetch, []).createKey("n", ["retrieve"]), Unreachable);
  assert.equal(key.calls.length, 1);
});

test("no wait past the total budget; Retry-After as seconds or a date", async () => {
  const waits = [];
  const late = scripted([{ ...unavailable, headers: { "retry-after": "60" } }, result]);
  const hrt = new HRTClient({ baseUrl: "http://hrt.invalid", fetch: late.fetch, sleep: async (ms) => void waits.push(ms), retry: { maxTotalMs: 5000 } });
  await assert.rejects(hrt.stats("u"), StoreUnavailable);
  assert.deepEqual(waits, []);
  assert.equal(retryAfterSeconds("3"), 3);
  assert.equal(retryAfterSeconds(new Date(10_000).toUTCString(), 4_000), 6);
  assert.equal(retryAfterSeconds("soon"), null);
});

test("browse sends a metadata filter as one JSON parameter and follows the cursor", async () => {
  const pages = scripted([
    { status: 200, body: { user_id: "u", entities: [{ id: "a" }], next_cursor: "c1", records_omitted: false } },
    { status: 200, body: { user_id: "u", entities: [{ id: "b" }], next_cursor: null, records_omitted: false } },
  ]);
  const ids = [];
  for await (const e of client(pages.fetch, []).listEntities("u", { metadata: { p: { gte: 2 } }, tags: ["x", "y"] })) ids.push(e.id);
  assert.deepEqual(ids, ["a", "b"]);
  const first = new URL(pages.calls[0].url);
  assert.equal(first.searchParams.get("metadata"), '{"p":{"gte":2}}');
  assert.deepEqual(first.searchParams.getAll("tags"), ["x", "y"]);
  assert.equal(new URL(pages.calls[1].url).searchParams.get("cursor"), "c1");
});
