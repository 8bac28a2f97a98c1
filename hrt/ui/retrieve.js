// The retrieval playground: a request built from a form, then what HRT answered: each item with
// its score breakdown as bars and its provenance as a small graph (phrase -> seed -> hops -> item),
// what was set aside and why, and the rendered prompt text with its token count.

import { call, paths } from "./api.js";
import { bar, fmt, h, link, show, svg } from "./dom.js";
import { failure, route } from "./view.js";

const PRESETS = ["", "balanced", "semantic", "recent", "salient", "personal", "relevance", "tuned-depth1"];
const TERMS = [
  ["semantic", "alpha_semantic_similarity"], ["recency", "beta_recency"],
  ["salience", "gamma_salience"], ["preference", "delta_user_preference"],
];

function field(label, input) {
  return h("label", { class: "field" }, h("span", null, label), input);
}

function form(onSubmit) {
  const inputs = {
    phrases: h("textarea", { name: "phrases", rows: "3", placeholder: "one key phrase a line", spellcheck: "false" }),
    query: h("input", { type: "text", name: "query", placeholder: "or a question" }),
    preset: h("select", { name: "preset" }, PRESETS.map((p) => h("option", { value: p }, p || "the server's"))),
    as_of: h("input", { type: "text", name: "as_of", placeholder: "now (ISO 8601)" }),
    valid_at: h("input", { type: "text", name: "valid_at", placeholder: "as_of (ISO 8601)" }),
    depth: h("select", { name: "depth" }, ["", "0", "1", "2", "3"].map((d) => h("option", { value: d }, d || "default"))),
    include_invalidated: h("input", { type: "checkbox", name: "include_invalidated" }),
    memory_units: h("input", { type: "number", name: "memory_units", value: "5", min: "0", max: "50" }),
    concepts: h("input", { type: "number", name: "concepts", value: "5", min: "0", max: "50" }),
    artifacts: h("input", { type: "number", name: "artifacts", value: "3", min: "0", max: "50" }),
    format: h("select", { name: "format" }, ["markdown", "compact", "text"].map((f) => h("option", { value: f }, f))),
    max_tokens: h("input", { type: "number", name: "max_tokens", value: "1500", min: "50", max: "100000" }),
  };
  const submit = (event) => { event.preventDefault(); onSubmit(inputs); };
  return h("form", { class: "filters playground", id: "retrieve", "on:submit": submit },
    field("key phrases", inputs.phrases), field("question", inputs.query), field("preset", inputs.preset),
    field("as of", inputs.as_of), field("valid at", inputs.valid_at), field("depth", inputs.depth),
    field("include what is no longer true", inputs.include_invalidated),
    field("memory units", inputs.memory_units), field("concepts", inputs.concepts), field("artifacts", inputs.artifacts),
    field("render as", inputs.format), field("token budget", inputs.max_tokens),
    h("button", { type: "submit" }, "Retrieve"));
}

export function requestFrom(user, inputs) {
  const body = {
    user_id: user,
    limits: {
      memory_units: Number(inputs.memory_units.value), concepts: Number(inputs.concepts.value),
      artifacts: Number(inputs.artifacts.value),
    },
    render: { format: inputs.format.value, max_tokens: Number(inputs.max_tokens.value), tokenizer: "cl100k_base" },
  };
  const phrases = inputs.phrases.value.split("\n").map((p) => p.trim()).filter((p) => p);
  if (phrases.length) body.key_phrases = phrases;
  if (inputs.query.value.trim()) body.query = inputs.query.value.trim();
  if (inputs.preset.value) body.preset = inputs.preset.value;
  if (inputs.as_of.value.trim()) body.as_of = inputs.as_of.value.trim();
  if (inputs.valid_at.value.trim()) body.valid_at = inputs.valid_at.value.trim();
  if (inputs.depth.value) body.max_depth = Number(inputs.depth.value);
  if (inputs.include_invalidated.checked) body.include_invalidated = true;
  return body;
}

function breakdown(item, weights) {
  const rows = TERMS.map(([term, weight]) => {
    const value = item.score_breakdown[term];
    const w = weights[weight];
    return h("div", { class: "term", "data-term": term },
      h("span", { class: "term-name" }, term),
      bar(value, term),
      h("span", { class: "term-value" }, `${fmt(value)} × ${fmt(w)} = ${fmt(value * w)}`));
  });
  if (item.score_breakdown.rerank !== null && item.score_breakdown.rerank !== undefined) {
    rows.push(h("div", { class: "term" }, h("span", { class: "term-name" }, "rerank"), bar(item.score_breakdown.rerank, "rerank"),
      h("span", { class: "term-value" }, fmt(item.score_breakdown.rerank))));
  }
  return h("div", { class: "breakdown", "data-testid": "breakdown" }, rows);
}

// phrase(s) -> seed -> hop -> ... -> item, drawn left to right
function provenanceGraph(user, itemId, title, prov, titles) {
  if (!prov) return "";
  const nodes = [];
  const phrases = prov.seed_phrases.length ? prov.seed_phrases : prov.phrases;
  nodes.push({ label: phrases.length ? phrases.map((p) => `“${p}”`).join(", ") : "named seed", cls: "phrase" });
  const chain = [prov.seed_id, ...prov.hops.map((hop) => hop.node_id)];
  chain.forEach((id, i) => nodes.push({
    label: id === itemId ? title : titles.get(id) || id, cls: i === 0 ? "seed" : id === itemId ? "item" : "hop",
    edge: i === 0 ? "search" : `${prov.hops[i - 1].direction === "out" ? "" : "← "}${prov.hops[i - 1].edge}${prov.hops[i - 1].direction === "out" ? " →" : ""}`,
  }));
  const width = 170; const gap = 60; const height = 64;
  const graph = svg("svg", { class: "provenance", width: String(nodes.length * (width + gap)), height: String(height),
    viewBox: `0 0 ${nodes.length * (width + gap)} ${height}`, role: "img", "aria-label": "how it was found" });
  nodes.forEach((node, i) => {
    const x = i * (width + gap);
    if (i > 0) {
      graph.append(svg("line", { x1: String(x - gap), y1: "36", x2: String(x), y2: "36", class: "edge" }));
      graph.append(svg("text", { x: String(x - gap / 2), y: "22", "text-anchor": "middle", class: "edge-label" }, node.edge));
    }
    const label = node.label.length > 26 ? `${node.label.slice(0, 25)}…` : node.label;
    graph.append(svg("rect", { x: String(x), y: "24", width: String(width), height: "24", rx: "6", class: `node ${node.cls}` }));
    graph.append(svg("text", { x: String(x + width / 2), y: "40", "text-anchor": "middle", class: "node-label" }, label));
  });
  const evidence = `${prov.evidence} evidence · path score ${fmt(prov.path_score)}` +
    (prov.search_evidence !== null ? ` · search ${fmt(prov.search_evidence)}` : "");
  return h("div", { class: "found", "data-testid": "provenance" }, graph, h("p", { class: "hint" }, evidence));
}

// every id the response names with a title: its items, their concepts and related memories
function titlesOf(doc) {
  const titles = new Map();
  for (const m of doc.retrieved_memory_units) {
    titles.set(m.muid, m.title);
    for (const c of m.connected_concept_ids_and_names) titles.set(c.id, c.name);
  }
  for (const c of doc.retrieved_concepts) {
    titles.set(c.id, c.name);
    for (const m of c.related_top_memory_unit_ids_and_titles) titles.set(m.id, m.title);
  }
  for (const a of doc.retrieved_artifacts) titles.set(a.id, a.title);
  return titles;
}

function itemCard(user, kind, item, rank, doc, titles) {
  const id = item.muid || item.id;
  const title = item.title || item.name || id;
  const meta = doc.retrieval_metadata;
  const interval = meta.validity.intervals[id];
  const text = item.content_snippet || item.description_snippet || "";
  return h("article", { class: "item", "data-id": id, "data-testid": "item" },
    h("header", null,
      h("span", { class: "rank" }, `#${rank}`), h("span", { class: `kind ${kind}` }, kind), " ",
      link(route("u", user, "e", kind, id), title),
      h("span", { class: "score" }, fmt(item.final_retrieval_score)),
      interval && !interval.valid ? h("span", { class: "ended" }, "no longer true") : ""),
    h("p", { class: "snippet" }, text),
    interval ? h("p", { class: "hint" }, `valid ${fmt(interval.valid_from)} → ${fmt(interval.valid_to)}`,
      interval.superseded_by.length ? ` · superseded by ${interval.superseded_by.join(", ")}` : "") : "",
    breakdown(item, doc.scoring_details.weights_used),
    provenanceGraph(user, id, title, meta.provenance[id], titles));
}

function setAside(doc) {
  const meta = doc.retrieval_metadata;
  const rows = [];
  for (const [kind, n] of Object.entries(meta.validity.suppressed)) {
    if (n) rows.push(`${n} ${kind} set aside: not true at ${meta.validity.valid_at}`);
  }
  if (meta.near_duplicates_removed) rows.push(`${meta.near_duplicates_removed} near-duplicates removed`);
  for (const [kind, ids] of Object.entries(meta.missing_records)) {
    if (ids.length) rows.push(`${ids.length} ${kind} found by an index but missing from the record store: ${ids.join(", ")}`);
  }
  rows.push(`relevance gate ${fmt(meta.relevance_gate.threshold)}: items below it on their semantic term are not returned`);
  for (const phrase of doc.unmatched_key_phrases) rows.push(`phrase “${phrase}” matched nothing`);
  const rendered = meta.rendered;
  if (rendered) {
    if (rendered.left_out.length) rows.push(`left out of the text by the budget: ${rendered.left_out.join(", ")}`);
    if (rendered.truncated) rows.push(`cut to fit the budget: ${rendered.truncated}`);
    if (rendered.redundant && rendered.redundant.length) rows.push(`left out as named by a memory shown: ${rendered.redundant.join(", ")}`);
  }
  for (const reason of meta.degraded_reasons) rows.push(`degraded: ${reason}`);
  return h("ul", { class: "aside", "data-testid": "set-aside" }, rows.map((r) => h("li", null, r)));
}

function grounding(doc) {
  return h("table", { class: "grounding" },
    h("thead", null, h("tr", null, ["phrase", "matched", "best similarity", "threshold", "seeds"].map((t) => h("th", null, t)))),
    h("tbody", null, doc.retrieval_metadata.phrase_grounding.map((p) => h("tr", null,
      h("td", null, p.key_phrase), h("td", null, p.matched ? "yes" : "no"), h("td", null, fmt(p.best_similarity)),
      h("td", null, fmt(p.threshold)), h("td", { class: "mono" }, p.seed_ids.join(", "))))));
}

function renderedText(rendered) {
  if (!rendered) return "";
  const b = rendered.budget;
  const count = `${b.used} ${b.unit}${b.tokenizer ? ` (${b.tokenizer})` : ""} of ${b.limit} · ${rendered.included.length} items included`;
  return [h("h2", null, "The prompt text"), h("p", { class: "note", "data-testid": "token-count" }, count),
    h("pre", { class: "rendered", "data-testid": "rendered" }, rendered.text)];
}

function answer(user, doc) {
  const sections = [
    ["memory_unit", doc.retrieved_memory_units], ["concept", doc.retrieved_concepts], ["artifact", doc.retrieved_artifacts],
  ];
  const meta = doc.retrieval_metadata;
  const titles = titlesOf(doc);
  return [
    h("p", { class: "summary", "data-testid": "summary" }, doc.retrieval_summary),
    h("p", { class: "hint" }, `as of ${meta.as_of} · valid at ${meta.validity.valid_at} · config ${meta.config_hash} · `,
      `stages ${Object.entries(meta.stages).map(([k, v]) => `${k} ${v}`).join(", ")}`),
    grounding(doc),
    sections.map(([kind, items]) => items.length ? [h("h2", null, `${kind.replace("_", " ")}s (${items.length})`),
      items.map((item, i) => itemCard(user, kind, item, i + 1, doc, titles))] : ""),
    h("h2", null, "Set aside, and why"), setAside(doc),
    renderedText(meta.rendered),
  ];
}

export async function retrieveView(target, user, question) {
  const out = h("div", { id: "answer" });
  async function run(inputs) {
    show(out, h("p", { class: "loading" }, "retrieving…"));
    try {
      const doc = await call("POST", paths.retrieve(), { body: requestFrom(user, inputs) });
      show(out, answer(user, doc));
    } catch (exc) {
      show(out, failure(exc));
    }
  }
  const built = form(run);
  show(target, h("h1", null, "Retrieve for ", h("span", { class: "mono" }, user)), built, out);
  if (question) {
    built.elements.namedItem("query").value = question;
    built.requestSubmit();
  }
}
