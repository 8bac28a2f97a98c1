// The client against a real `hrt serve` (started by tests/integration/test_typescript_client.py,
// which gives HRT_URL and HRT_API_KEY: a key with every scope for every user). Every route, once.
import assert from "node:assert/strict";
import { test } from "node:test";

import { HRTClient, InvalidInput, NotFound, RateLimited } from "../dist/index.js";

const env = process.env;
assert.ok(env.HRT_URL && env.HRT_API_KEY, "HRT_URL and HRT_API_KEY are given by the test that starts the server");
const hrt = HRTClient.fromEnv(env);
const USER = `ts-${process.pid}`;
const AS_OF = "2026-01-01T00:00:00Z";

const unit = (muid, content, metadata, ts) => ({
  kind: "memory_unit",
  user_id: USER,
  muid,
  title: muid,
  content,
  creation_ts: ts,
  metadata,
});

test("ingest, retrieve with render and metadata filters, browse, entity, export, merge, stats, delete", async () => {
  const written = await hrt.ingest([
    unit("m-fuel", "The Apollo launch needs the fuel valves pressure-tested.", { project: "apollo", priority: 3 }, "2025-05-01T09:00:00Z"),
    unit("m-wx", "Apollo launch weather briefing moved to dawn.", { project: "apollo", priority: 1 }, "2025-05-02T09:00:00Z"),
    unit("m-zeus", "Zeus launch telemetry antenna is aligned.", { project: "zeus", priority: 5 }, "2025-05-03T09:00:00Z"),
    { kind: "concept", user_id: USER, id: "c-launch", name: "Launch", description: "rocket launches" },
    { kind: "concept", user_id: USER, id: "c-launches", name: "Launches" },
    ...["m-fuel", "m-wx", "m-zeus"].map((m) => ({ kind: "relation", user_id: USER, type: "MENTIONS", source: m, target: "c-launch" })),
  ]);
  assert.deepEqual(written, { upserted: 8, deleted: 0 });

  const request = { user_id: USER, key_phrases: ["launch"], as_of: AS_OF, limits: { memory_units: 10 }, render: { format: "compact" } };
  const ctx = await hrt.retrieve(request);
  assert.deepEqual(ctx.retrieved_memory_units.map((m) => m.muid).sort(), ["m-fuel", "m-wx", "m-zeus"]);
  assert.match(ctx.retrieval_metadata.rendered.text, /fuel valves/);
  // byte-identical answers for a pinned as_of
  assert.equal(await hrt.retrieveJson(request), await hrt.retrieveJson(request));

  const filtered = await hrt.retrieve({ ...request, filters: { metadata: { and: [{ project: "apollo" }, { priority: { gte: 2 } }] } } });
  assert.deepEqual(filtered.retrieved_memory_units.map((m) => m.muid), ["m-fuel"]);
  assert.deepEqual(filtered.retrieved_concepts, []);
  const none = await hrt.retrieve({ ...request, filters: { metadata: { priority: { gt: 100 } } } });
  assert.deepEqual(none.retrieved_memory_units, []);

  // browse: an async iterator over pages of 2
  const all = [];
  for await (const entity of hrt.listEntities(USER, { limit: 2 })) all.push(entity.id);
  assert.deepEqual(all, ["c-launch", "c-launches", "m-fuel", "m-wx", "m-zeus"]);
  let pages = 0;
  for await (const page of hrt.pages(USER, { limit: 2 })) pages += page.entities.length > 0 ? 1 : 0;
  assert.equal(pages, 3);
  const zeusOrBig = [];
  for await (const e of hrt.listEntities(USER, { metadata: { or: [{ project: "zeus" }, { priority: { gte: 3 } }] } })) zeusOrBig.push(e.id);
  assert.deepEqual(zeusOrBig, ["m-fuel", "m-zeus"]);

  const view = await hrt.getEntity(USER, "memory_unit", "m-fuel");
  assert.equal(view.id, "m-fuel");

  // export: a stream of NDJSON bytes, and its records
  const stream = await hrt.export(USER);
  const text = await new Response(stream).text();
  const lines = text.trim().split("\n");
  const records = [];
  for await (const record of hrt.exportRecords(USER)) records.push(record);
  assert.equal(records.length, lines.length);
  assert.ok(records.some((r) => r.muid === "m-fuel"));

  const merged = await hrt.mergeConcepts(USER, "c-launch", ["c-launches"]);
  assert.deepEqual(merged.merged, ["c-launches"]);
  const stats = await hrt.stats(USER);
  assert.equal(stats.memory_unit, 3);
  assert.equal(stats.concept, 1);

  const gone = await hrt.deleteEntity(USER, "memory_unit", "m-wx");
  assert.equal(gone.deleted, 1);
  await assert.rejects(hrt.getEntity(USER, "memory_unit", "m-wx"), (e) => e instanceof NotFound && e.status === 404 && e.body.code === "not_found");
  const user = await hrt.deleteUser(USER);
  assert.ok(user.deleted >= 3);
  assert.equal((await hrt.stats(USER)).memory_unit, 0);
});

test("conversations: messages in, a resend with positions changes nothing", async () => {
  const messages = [
    { role: "user", content: "I adopted a cat named Pixel.", index: 0 },
    { role: "assistant", content: [{ type: "text", text: "Lovely!" }, { type: "image_url" }], index: 1 },
  ];
  const first = await hrt.addMessages(`${USER}-chat`, "s-1", messages, { user_name: "Maya" });
  assert.deepEqual(first.messages.map((m) => m.status), ["added", "added"]);
  const again = await hrt.addMessages(`${USER}-chat`, "s-1", messages, { user_name: "Maya" });
  assert.deepEqual(again.messages.map((m) => m.status), ["unchanged", "unchanged"]);
  await hrt.deleteUser(`${USER}-chat`);
});

test("typed errors carry the API's error body, never the caller's input", async () => {
  await assert.rejects(
    hrt.retrieve({ user_id: USER, query: "x", filters: { metadata: { priority: { gte: ["secret-value"] } } } }),
    (e) => e instanceof InvalidInput && e.status === 422 && e.field === "filters.metadata" && !e.message.includes("secret-value"),
  );
  await assert.rejects(
    hrt.addMessages(USER, "s", [{ role: "robot", content: "x", index: 0 }]),
    (e) => e instanceof InvalidInput && e.body.field === "messages[0].role",
  );
});

test("keys: create, list, revoke; a rate-limited key is retried as Retry-After says", async () => {
  const name = `ts-key-${process.pid}`;
  const made = await hrt.createKey(name, ["retrieve"], { users: [USER], rate_limit: 0.5 }); // a burst of one request, then one every two seconds
  assert.ok(made.key.length > 20);
  assert.ok((await hrt.listKeys()).some((k) => k.name === name));
  const limited = new HRTClient({ baseUrl: env.HRT_URL, apiKey: made.key, retry: { maxAttempts: 1 } });
  const patient = new HRTClient({ baseUrl: env.HRT_URL, apiKey: made.key, retry: { maxAttempts: 5, maxTotalMs: 20000 } });
  const body = { user_id: USER, query: "anything", as_of: AS_OF };
  await limited.retrieve(body);
  await assert.rejects(limited.retrieve(body), (e) => e instanceof RateLimited && e.status === 429 && e.retryAfterS > 0);
  const answered = await patient.retrieve(body); // waits as Retry-After asks, then succeeds
  assert.deepEqual(answered.retrieved_memory_units, []);
  const revoked = await hrt.revokeKey(name);
  assert.equal(revoked.name, name);
  assert.equal((await hrt.healthz()).status, "ok");
  assert.match(await hrt.metrics(), /hrt_/);
});
