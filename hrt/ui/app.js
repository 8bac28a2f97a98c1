// The inspector: a hash router over the views, the key form and the navigation. The URL holds the
// user and what is shown (never the key), so a view can be reloaded or linked within the tab.

import { ApiError, call, forget, getKey, getUser, paths, setKey, setUser } from "./api.js";
import { h, link, show } from "./dom.js";
import { conversationView } from "./conversation.js";
import { entityView } from "./entity.js";
import { memoryView } from "./memory.js";
import { retrieveView } from "./retrieve.js";
import { failure, route } from "./view.js";

const main = () => document.getElementById("main");
const status = () => document.getElementById("status");

function notify(text) {
  show(status(), text ? h("span", { class: "note" }, text) : "");
}

function loginView(message) {
  const key = h("input", { type: "password", name: "key", id: "key", autocomplete: "off", placeholder: "hrt_…" });
  const user = h("input", { type: "text", name: "user", id: "user", value: getUser(), placeholder: "u-maya" });
  const problem = h("div", { "data-testid": "login-problem" }, message ? failure(message) : "");
  async function submit(event) {
    event.preventDefault();
    const chosen = user.value.trim();
    if (!key.value.trim() || !chosen) return;
    setKey(key.value.trim());
    setUser(chosen);
    key.value = "";
    try {
      await call("GET", paths.stats(chosen));
    } catch (exc) {
      if (exc instanceof ApiError && exc.status === 401) {
        forget();
        show(problem, failure(exc));
        return;
      }
    }
    window.location.hash = route("u", chosen);
  }
  return h("section", { class: "login" },
    h("h1", null, "Open a user's memory"),
    h("p", null, "Paste an API key. It stays in this tab's session storage and goes only to this server, as a header."),
    h("form", { "on:submit": submit, id: "login" },
      h("label", { for: "key" }, "API key"), key,
      h("label", { for: "user" }, "User id"), user,
      h("button", { type: "submit" }, "Open")),
    problem);
}

async function exportUser(user) {
  notify(`exporting ${user}…`);
  try {
    const response = await call("GET", paths.exportUser(user), { raw: true });
    const blob = await response.blob();
    const text = await blob.text();
    const lines = text ? text.split("\n").filter((l) => l).length : 0;
    const href = URL.createObjectURL(new Blob([text], { type: "application/x-ndjson" }));
    const save = h("a", { href, download: `${user}.jsonl`, "data-testid": "export-link" }, `save ${user}.jsonl`);
    show(status(), h("span", { class: "note", "data-testid": "export-done" }, `exported ${lines} records · `), save);
    save.click();
  } catch (exc) {
    show(status(), failure(exc));
  }
}

function navigation(user) {
  const nav = document.getElementById("nav");
  if (!getKey()) return show(nav, "");
  const field = h("input", { type: "text", name: "nav-user", value: user || getUser(), "aria-label": "user id" });
  const go = (event) => {
    event.preventDefault();
    if (field.value.trim()) window.location.hash = route("u", field.value.trim());
  };
  const current = user || getUser();
  show(nav,
    h("form", { class: "inline", "on:submit": go }, field, h("button", { type: "submit" }, "Open")),
    current ? link(route("u", current), "Memory") : "",
    current ? link(route("u", current, "retrieve"), "Retrieve") : "",
    current ? link(route("u", current, "c"), "Conversations") : "",
    current ? h("button", { type: "button", "on:click": () => exportUser(current), "data-testid": "export" }, "Export") : "",
    h("button", { type: "button", "on:click": () => { forget(); window.location.hash = "#/login"; } }, "Forget key"));
}

async function render() {
  const parts = window.location.hash.replace(/^#\/?/, "").split("/").filter((p) => p).map(decodeURIComponent);
  notify("");
  if (!getKey() || parts[0] === "login" || parts[0] !== "u" || !parts[1]) {
    navigation(null);
    if (getKey() && getUser() && parts[0] !== "login") {
      window.location.hash = route("u", getUser());
      return;
    }
    show(main(), loginView(null));
    return;
  }
  const user = parts[1];
  setUser(user);
  navigation(user);
  const target = main();
  show(target, h("p", { class: "loading" }, "loading…"));
  try {
    if (parts[2] === "e") await entityView(target, user, parts[3], parts.slice(4).join("/"));
    else if (parts[2] === "retrieve") await retrieveView(target, user, parts.slice(3).join("/"));
    else if (parts[2] === "c") await conversationView(target, user, parts.slice(3).join("/"));
    else await memoryView(target, user);
  } catch (exc) {
    show(target, failure(exc));
  }
}

window.addEventListener("hashchange", render);
render();
