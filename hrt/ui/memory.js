// A user's memory: counts per kind, then the entities a page at a time with the filters of
// GET /v1/users/{u}/entities; the title prefix is the search by text.

import { call, paths } from "./api.js";
import { failure, route } from "./view.js";
import { fmt, h, link, show } from "./dom.js";

const KINDS = ["memory_unit", "concept", "artifact"];

function counts(stats) {
  const cards = [...KINDS, "relation", "preference"].map((kind) =>
    h("div", { class: "card", "data-kind": kind, "data-testid": `count-${kind}` },
      h("span", { class: "number" }, fmt(stats[kind] ?? 0)), h("span", { class: "label" }, kind.replace("_", " "))));
  return h("div", { class: "cards" }, cards);
}

function field(label, input) {
  return h("label", { class: "field" }, h("span", null, label), input);
}

function filtersForm(onSubmit) {
  const kind = h("select", { name: "kind" }, h("option", { value: "" }, "every kind"),
    KINDS.map((k) => h("option", { value: k }, k)));
  const inputs = {
    kind,
    prefix: h("input", { type: "search", name: "prefix", placeholder: "title starts with…" }),
    tags: h("input", { type: "text", name: "tags", placeholder: "tag, tag" }),
    agent: h("input", { type: "text", name: "agent", placeholder: "agent, agent" }),
    created_after: h("input", { type: "text", name: "created_after", placeholder: "2025-01-01" }),
    created_before: h("input", { type: "text", name: "created_before", placeholder: "2026-01-01" }),
    valid_at: h("input", { type: "text", name: "valid_at", placeholder: "ISO 8601" }),
    include_invalidated: h("input", { type: "checkbox", name: "include_invalidated" }),
    limit: h("input", { type: "number", name: "limit", value: "50", min: "1", max: "500" }),
  };
  const list = (text) => text.split(",").map((t) => t.trim()).filter((t) => t);
  const read = () => ({
    kind: inputs.kind.value,
    prefix: inputs.prefix.value.trim(),
    tags: list(inputs.tags.value),
    agent: list(inputs.agent.value),
    created_after: inputs.created_after.value.trim(),
    created_before: inputs.created_before.value.trim(),
    valid_at: inputs.valid_at.value.trim(),
    include_invalidated: inputs.include_invalidated.checked,
    limit: inputs.limit.value,
  });
  const submit = (event) => { event.preventDefault(); onSubmit(read()); };
  return h("form", { class: "filters", id: "browse", "on:submit": submit },
    field("kind", inputs.kind), field("search titles", inputs.prefix), field("tags", inputs.tags),
    field("agents", inputs.agent), field("created after", inputs.created_after),
    field("created before", inputs.created_before), field("valid at", inputs.valid_at),
    field("include ended and superseded", inputs.include_invalidated), field("page size", inputs.limit),
    h("button", { type: "submit" }, "Browse"));
}

function entityRow(user, entity) {
  const session = entity.record && entity.record.metadata && entity.record.metadata.session_id;
  return h("tr", { "data-id": entity.id },
    h("td", null, h("span", { class: `kind ${entity.kind}` }, entity.kind)),
    h("td", null, link(route("u", user, "e", entity.kind, entity.id), entity.title || entity.id)),
    h("td", { class: "mono" }, entity.id),
    h("td", null, fmt(entity.written_at)),
    h("td", { class: "mono" }, fmt(entity.written_by)),
    h("td", null, session ? link(route("u", user, "c", session), "conversation") : ""));
}

export async function memoryView(target, user) {
  const stats = await call("GET", paths.stats(user));
  const table = h("tbody", { id: "entities" });
  const note = h("p", { class: "note", "data-testid": "browse-note" });
  const more = h("div", { class: "more" });
  let filters = null;

  async function page(cursor) {
    show(more, "");
    try {
      const query = { ...filters, cursor };
      const found = await call("GET", paths.entities(user), { query });
      if (!cursor) show(table, "");
      table.append(...found.entities.map((e) => entityRow(user, e)));
      show(note, found.records_omitted
        ? "Ids and titles only: this key lacks the read scope for whole records."
        : `${table.childElementCount} entities shown`);
      if (found.next_cursor) {
        show(more, h("button", { type: "button", "on:click": () => page(found.next_cursor) }, "Next page"));
      }
    } catch (exc) {
      show(note, failure(exc));
    }
  }
  const form = filtersForm((chosen) => { filters = chosen; page(null); });
  const question = h("input", { type: "search", name: "meaning", placeholder: "what does it remember about…" });
  const ask = (event) => {
    event.preventDefault();
    if (question.value.trim()) window.location.hash = route("u", user, "retrieve", question.value.trim());
  };
  const meaning = h("form", { class: "inline", id: "meaning", "on:submit": ask }, question,
    h("button", { type: "submit" }, "Search by meaning"));
  show(target,
    h("h1", null, "Memory of ", h("span", { class: "mono", "data-testid": "user" }, user)),
    counts(stats),
    h("h2", null, "Search by meaning"),
    h("p", { class: "hint" }, "A retrieval with the question (the playground, filled in)."),
    meaning,
    h("h2", null, "Browse and search titles"),
    form,
    note,
    h("table", { class: "entities" },
      h("thead", null, h("tr", null, ["kind", "title", "id", "written", "by", ""].map((t) => h("th", null, t)))),
      table),
    more);
  filters = { limit: 50 };
  await page(null);
}
