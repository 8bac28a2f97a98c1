// Building the page from data, safely: every value goes in as text (a text node, textContent or
// an attribute of a fixed, harmless name), never as HTML. Nothing here parses markup.

const SAFE_ATTRIBUTES = new Set([
  "class", "id", "href", "title", "type", "name", "value", "placeholder", "for", "role", "colspan",
  "aria-label", "aria-live", "min", "max", "step", "rows", "cols", "autocomplete", "data-kind",
  "data-id", "data-testid", "data-field", "data-term", "download", "spellcheck",
]);
const SVG_NS = "http://www.w3.org/2000/svg";
const SVG_ATTRIBUTES = new Set([
  "viewBox", "width", "height", "x", "y", "x1", "y1", "x2", "y2", "rx", "ry", "class", "d",
  "text-anchor", "dominant-baseline", "marker-end", "points", "role", "aria-label", "refX", "refY",
  "markerWidth", "markerHeight", "orient", "id",
]);

function setAttributes(node, attrs, allowed) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on:")) {
      node.addEventListener(name.slice(3), value);
    } else if (name === "checked" || name === "disabled" || name === "selected" || name === "required") {
      node[name] = Boolean(value);
    } else if (allowed.has(name)) {
      if (name === "href" && !/^(#|\/ui\b|\/v1\/|blob:)/.test(String(value))) continue; // no javascript: URLs
      node.setAttribute(name, String(value));
    } else {
      throw new Error(`attribute ${name} is not allowed`);
    }
  }
}

function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttributes(node, attrs, SAFE_ATTRIBUTES);
  return append(node, children);
}

export function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttributes(node, attrs, SVG_ATTRIBUTES);
  return append(node, children);
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

export function show(target, ...children) {
  return append(clear(target), children);
}

export function link(href, ...children) {
  return h("a", { href }, ...children);
}

export function fmt(value) {
  if (value === null || value === undefined) return "—";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(4);
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

// a bar of width fraction (0 to 1), set through the CSSOM (no inline style attribute)
export function bar(fraction, className) {
  const fill = h("span", { class: `fill ${className || ""}` });
  fill.style.width = `${Math.max(0, Math.min(1, fraction)) * 100}%`;
  return h("span", { class: "bar" }, fill);
}
