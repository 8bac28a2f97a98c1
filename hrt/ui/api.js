// The API as the inspector calls it: the key from the tab's session storage, sent only as
// Authorization (never in a URL); every error the API's JSON error, thrown as an ApiError.

const KEY = "hrt.inspector.key";
const USER = "hrt.inspector.user";

export function getKey() { return sessionStorage.getItem(KEY); }
export function setKey(key) { sessionStorage.setItem(KEY, key); }
export function getUser() { return sessionStorage.getItem(USER) || ""; }
export function setUser(user) { sessionStorage.setItem(USER, user); }
export function forget() { sessionStorage.removeItem(KEY); sessionStorage.removeItem(USER); }

export class ApiError extends Error {
  constructor(status, code, message, field) {
    super(message);
    this.status = status;
    this.code = code || "";
    this.field = field || "";
  }
  describe() {
    const field = this.field ? ` (field ${this.field})` : "";
    return `${this.status} ${this.code}: ${this.message}${field}`;
  }
}

function url(path, query) {
  const u = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value === undefined || value === null || value === "" || value === false) continue;
    for (const one of Array.isArray(value) ? value : [value]) u.searchParams.append(name, String(one));
  }
  return u;
}

export async function call(method, path, { query, body, raw } = {}) {
  const headers = { authorization: `Bearer ${getKey() || ""}`, accept: "application/json" };
  const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(url(path, query), init);
  } catch (exc) {
    throw new ApiError(0, "network", "the server could not be reached");
  }
  if (!response.ok) {
    let error = {};
    try { error = (await response.json()).error || {}; } catch (exc) { error = {}; }
    throw new ApiError(response.status, error.code, error.message || response.statusText, error.field);
  }
  return raw ? response : response.json();
}

const enc = encodeURIComponent;
export const paths = {
  stats: (u) => `/v1/users/${enc(u)}/stats`,
  entities: (u) => `/v1/users/${enc(u)}/entities`,
  entity: (u, kind, id) => `/v1/users/${enc(u)}/entities/${enc(kind)}/${enc(id)}`,
  exportUser: (u) => `/v1/users/${enc(u)}/export`,
  retrieve: () => "/v1/retrieve",
};
