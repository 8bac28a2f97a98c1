// A conversation: a session's messages in order, each with the concepts it linked and the facts it
// changed. A message's memory unit id is msg:<slug of the session>-<sha256 of it, 10 hex>:<position>
// (hrt/extraction/ids.py), so the messages are read one by one with GET .../entities/memory_unit/{id}.

import { ApiError, call, paths } from "./api.js";
import { fmt, h, link, show } from "./dom.js";
import { failure, route } from "./view.js";

const MAX_MESSAGES = 500;
const BATCH = 8;

function slug(text, maxLen) {
  const s = text.trim().toLowerCase().replace(/[^A-Za-z0-9_.:@-]+/g, "-").replace(/^[-._:@]+|[-._:@]+$/g, "");
  return s.slice(0, maxLen).replace(/[-._:@]+$/, "") || "x";
}

export async function messageId(session, position) {
  const bytes = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(session));
  const hex = [...new Uint8Array(bytes)].map((b) => b.toString(16).padStart(2, "0")).join("").slice(0, 10);
  return `msg:${slug(session, 40)}-${hex}:${position}`;
}

async function readMessages(user, session) {
  const found = [];
  for (let start = 0; start < MAX_MESSAGES; start += BATCH) {
    const ids = await Promise.all([...Array(BATCH).keys()].map((i) => messageId(session, start + i)));
    const views = await Promise.all(ids.map((id) => call("GET", paths.entity(user, "memory_unit", id), { query: { relation_limit: 1000 } })
      .catch((exc) => { if (exc instanceof ApiError && exc.status === 404) return null; throw exc; })));
    for (const view of views) {
      if (view === null) return found;
      found.push(view);
    }
  }
  return found;
}

// the notes and facts derived from the messages (an artifact DERIVED_FROM each), read for their text
async function readDerived(user, messages) {
  const wanted = messages.flatMap((m) => m.relations.filter((r) => r.type === "DERIVED_FROM" && r.direction === "in"));
  const found = new Map();
  for (let start = 0; start < wanted.length; start += BATCH) {
    const views = await Promise.all(wanted.slice(start, start + BATCH).map((r) =>
      call("GET", paths.entity(user, r.kind, r.id), { query: { relation_limit: 1 } }).catch(() => null)));
    for (const view of views) if (view) found.set(view.id, view);
  }
  return found;
}

function message(user, view, derivedViews) {
  const meta = (view.record && view.record.metadata) || {};
  const concepts = view.relations.filter((r) => r.type === "MENTIONS" && r.direction === "out");
  const replaced = view.supersedes;
  const derived = view.relations.filter((r) => r.type === "DERIVED_FROM" && r.direction === "in");
  const text = view.record ? view.record.content : view.title;
  return h("li", { class: `message ${meta.role || ""}`, "data-id": view.id, "data-testid": "message" },
    h("header", null,
      h("span", { class: "position" }, `#${fmt(meta.index)}`), " ",
      h("strong", null, meta.speaker || meta.role || ""), " ",
      h("span", { class: "hint" }, fmt(view.record && view.record.creation_ts)), " ",
      link(route("u", user, "e", "memory_unit", view.id), "open")),
    h("p", { class: "content" }, text),
    concepts.length ? h("p", { class: "links" }, "linked: ",
      concepts.map((c) => [link(route("u", user, "e", c.kind, c.id), c.title || c.id), " "])) : "",
    replaced.length ? h("p", { class: "changed", "data-testid": "changed" }, "changed: replaces ",
      replaced.map((r) => [link(route("u", user, "e", r.kind, r.id), r.title || r.id), " "])) : "",
    derived.length ? h("ul", { class: "derived", "data-testid": "derived" }, derived.map((d) => {
      const full = derivedViews.get(d.id);
      const text = full && full.record && full.record.content;
      return h("li", null, link(route("u", user, "e", d.kind, d.id), d.title || d.id), text ? `: ${text}` : "");
    })) : "",
    meta.changes ? h("pre", { class: "json" }, JSON.stringify(meta.changes, null, 2)) : "");
}

async function sessionsSeen(user) {
  // with the read scope, the sessions of the first memory units listed; else none (type one in)
  try {
    const page = await call("GET", paths.entities(user), { query: { kind: "memory_unit", limit: 500, include_invalidated: true } });
    const seen = new Set();
    for (const e of page.entities) {
      const s = e.record && e.record.metadata && e.record.metadata.session_id;
      if (s) seen.add(s);
    }
    return [...seen].sort();
  } catch (exc) {
    return [];
  }
}

export async function conversationView(target, user, session) {
  const input = h("input", { type: "text", name: "session", value: session || "", placeholder: "session id" });
  const open = (event) => { event.preventDefault(); if (input.value.trim()) window.location.hash = route("u", user, "c", input.value.trim()); };
  const picker = h("form", { class: "inline", id: "session", "on:submit": open }, input, h("button", { type: "submit" }, "Open"));
  if (!session) {
    const seen = await sessionsSeen(user);
    show(target, h("h1", null, "Conversations of ", h("span", { class: "mono" }, user)), picker,
      seen.length ? h("ul", { "data-testid": "sessions" }, seen.map((s) => h("li", null, link(route("u", user, "c", s), s))))
        : h("p", { class: "note" }, "Type a session id (POST /v1/conversations' session_id)."));
    return;
  }
  if (!window.crypto || !crypto.subtle) {
    show(target, failure(new Error("this page needs a secure context (https or localhost) to find a session's messages")));
    return;
  }
  const messages = await readMessages(user, session);
  const derived = await readDerived(user, messages);
  show(target,
    h("h1", null, "Conversation ", h("span", { class: "mono", "data-testid": "session" }, session)),
    picker,
    h("p", { class: "note" }, `${messages.length} messages`),
    h("ol", { class: "conversation", "data-testid": "conversation" }, messages.map((m) => message(user, m, derived))));
}
