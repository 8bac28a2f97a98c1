// What the views share: their links (the hash route) and how an error reads.

import { ApiError } from "./api.js";
import { h } from "./dom.js";

export function route(...parts) {
  return "#/" + parts.map((p) => encodeURIComponent(p)).join("/");
}

export function failure(exc) {
  const text = exc instanceof ApiError ? exc.describe() : `error: ${exc && exc.message}`;
  return h("div", { class: "error", role: "alert", "data-testid": "error" }, text);
}
