// One entity: its record, its validity and what it replaced or what replaced it (a timeline),
// who wrote it when, its relations both ways, and for a concept the messages that mention it.

import { call, paths } from "./api.js";
import { fmt, h, link, show } from "./dom.js";
import { route } from "./view.js";

function facts(view) {
  const rows = [
    ["kind", view.kind], ["id", view.id], ["version", view.version],
    ["written at", view.written_at], ["written by (key id)", view.written_by ?? (view.written_at ? "the operator" : null)],
    ["relations", view.relation_count],
  ];
  if (view.mentioned_by !== null && view.mentioned_by !== undefined) rows.push(["mentioned by", `${view.mentioned_by} memory units`]);
  return h("dl", { class: "facts" }, rows.map(([k, v]) => [h("dt", null, k), h("dd", { "data-testid": `fact-${k}` }, fmt(v))]));
}

function entityLink(user, other) {
  return link(route("u", user, "e", other.kind, other.id), other.title || other.id);
}

// the entity between what it replaced and what replaced it, each with its own interval
function timeline(user, view, around) {
  const when = (v) => (v && v.validity ? `${fmt(v.validity.valid_from)} → ${v.validity.valid_to || "now"}` : "");
  const step = (cls, label, other) => h("li", { class: `step ${cls}` },
    h("span", { class: "when" }, `${label} · ${when(around.get(other.id))}`), entityLink(user, other));
  const to = view.validity && view.validity.valid_to;
  return h("ol", { class: "timeline", "data-testid": "timeline" },
    view.supersedes.map((older) => step("older", "replaced", older)),
    h("li", { class: "step this" },
      h("span", { class: "when" }, when(view)),
      h("strong", null, view.title || view.id),
      to ? h("span", { class: "ended" }, " (no longer true)") : h("span", { class: "current" }, " (true now)")),
    view.superseded_by.map((newer) => step("newer", "replaced by", newer)));
}

// the entities of the timeline, read for their intervals (at most 20; one that fails is left blank)
async function neighbours(user, view) {
  const others = [...view.supersedes, ...view.superseded_by].slice(0, 20);
  const read = await Promise.all(others.map((o) => call("GET", paths.entity(user, o.kind, o.id), { query: { relation_limit: 1 } })
    .catch(() => null)));
  return new Map(read.filter((v) => v).map((v) => [v.id, v]));
}

function value(v) {
  if (v !== null && typeof v === "object") return h("pre", { class: "json" }, JSON.stringify(v, null, 2));
  return h("span", { class: "value" }, fmt(v));
}

function record(rec) {
  const rows = Object.entries(rec || {}).map(([k, v]) => [h("dt", null, k), h("dd", { "data-field": k }, value(v))]);
  return h("dl", { class: "record", "data-testid": "record" }, rows);
}

function relations(user, view) {
  const rows = view.relations.map((r) => h("tr", null,
    h("td", null, r.type),
    h("td", null, r.direction === "out" ? "→ out" : "← in"),
    h("td", null, h("span", { class: `kind ${r.kind}` }, r.kind)),
    h("td", null, entityLink(user, r)),
    h("td", null, fmt(r.weight)),
    h("td", null, fmt(r.relation_type)),
    h("td", null, r.valid_from || r.valid_to ? `${fmt(r.valid_from)} → ${fmt(r.valid_to)}` : "")));
  return h("table", { class: "relations", "data-testid": "relations" },
    h("thead", null, h("tr", null, ["type", "direction", "kind", "other end", "weight", "relation type", "valid"].map((t) => h("th", null, t)))),
    h("tbody", null, rows));
}

function mentions(user, view) {
  const found = view.relations.filter((r) => r.type === "MENTIONS" && r.direction === "in" && r.kind === "memory_unit");
  const items = found.map((r) => h("li", null, entityLink(user, r),
    r.id.startsWith("msg:") ? [" · ", h("span", { class: "hint" }, "a message")] : ""));
  const more = view.mentioned_by > found.length ? h("p", { class: "note" }, `${view.mentioned_by - found.length} more not listed`) : "";
  return [h("h2", null, `Messages and notes that mention it (${view.mentioned_by})`), h("ul", { "data-testid": "mentions" }, items), more];
}

export async function entityView(target, user, kind, id) {
  const view = await call("GET", paths.entity(user, kind, id), { query: { relation_limit: 1000 } });
  const session = view.record && view.record.metadata && view.record.metadata.session_id;
  const around = await neighbours(user, view);
  show(target,
    h("p", { class: "crumbs" }, link(route("u", user), `memory of ${user}`), " / ", kind),
    h("h1", { "data-testid": "entity-title" }, h("span", { class: `kind ${kind}` }, kind), " ", view.title || view.id),
    session ? h("p", null, link(route("u", user, "c", session), `open its conversation (${session})`)) : "",
    h("div", { class: "columns" },
      h("section", null, h("h2", null, "Who wrote it, when"), facts(view)),
      h("section", null, h("h2", null, "Validity"), timeline(user, view, around))),
    view.kind === "concept" ? mentions(user, view) : "",
    h("h2", null, `Relations (${view.relation_count})`),
    relations(user, view),
    h("h2", null, "Record"),
    record(view.record));
}
