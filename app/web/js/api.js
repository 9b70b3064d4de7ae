// The console's only door to the server: bearer-authenticated JSON calls and ticketed sockets.

const TOKEN_KEY = "shellgate.token";

// The console is served at <root>/console/ and this file at <root>/console/js/api.js, so the API
// root follows whatever prefix a gateway put in front of the service.
const API_ROOT = new URL("../../", import.meta.url);

// Fires "unauthenticated" when the server refuses the stored token.
export const session = new EventTarget();

export class ApiError extends Error {
  constructor(status, code, message, details = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details;
  }
}

export function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function storeToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

function describeValidation(body) {
  // FastAPI's own 422 shape: {"detail": [{"loc": [...], "msg": "..."}]}.
  if (body && Array.isArray(body.detail)) {
    return body.detail.map((item) => item.msg).join("; ");
  }
  return null;
}

export async function api(path, { method = "GET", body } = {}) {
  const headers = { Accept: "application/json" };
  const token = storedToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(new URL(path, API_ROOT), init);
  } catch (error) {
    throw new ApiError(0, "network", `The server cannot be reached (${error.message}).`);
  }
  const text = await response.text();
  let data = null;
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    const envelope = data && data.error;
    const error = new ApiError(
      response.status,
      envelope?.code ?? `http_${response.status}`,
      envelope?.message ?? describeValidation(data) ?? `${response.status} ${response.statusText}`,
      envelope?.details ?? {},
    );
    if (response.status === 401) session.dispatchEvent(new Event("unauthenticated"));
    throw error;
  }
  return data;
}

// Browsers cannot set headers on a WebSocket, so each connection spends a fresh single-use ticket.
export async function openSocket(path, params = {}) {
  const { ticket } = await api("v1/ws-tickets", { method: "POST" });
  const url = new URL(path, API_ROOT);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  for (const [key, value] of Object.entries(params)) url.searchParams.set(key, String(value));
  url.searchParams.set("ticket", ticket);
  return new WebSocket(url);
}

// The server closes a socket it refuses with 4000 + the HTTP status (4401, 4403, 4404, 4422):
// retrying cannot help, so the caller stops and shows the reason instead.
export function refusal(event) {
  if (event.code < 4400 || event.code > 4499) return null;
  return event.reason || `Refused by the server (${event.code}).`;
}

export function backoff(previousMs) {
  return Math.min(previousMs * 2, 5000);
}

// Raw log bytes of an execution, read page by page until the log is final or `maxBytes` is
// reached (docs/streaming.md, "Reading raw output"). Returns the bytes and whether it stopped
// short.
export async function readLog(executionId, { maxBytes = 64 * 1024 * 1024 } = {}) {
  const pieces = [];
  let offset = 0;
  let read = 0;
  for (;;) {
    const url = new URL(`v1/executions/${encodeURIComponent(executionId)}/output`, API_ROOT);
    url.searchParams.set("offset", String(offset));
    const headers = { Authorization: `Bearer ${storedToken()}` };
    const response = await fetch(url, { headers, cache: "no-store", credentials: "omit" });
    if (!response.ok) {
      if (response.status === 401) session.dispatchEvent(new Event("unauthenticated"));
      throw new ApiError(response.status, `http_${response.status}`, `${response.status} reading the log`);
    }
    const bytes = new Uint8Array(await response.arrayBuffer());
    pieces.push(bytes);
    read += bytes.length;
    const next = Number(response.headers.get("X-Next-Offset"));
    const total = Number(response.headers.get("X-Total-Bytes"));
    const complete = response.headers.get("X-Complete") === "true";
    // A running execution's log is read as far as it goes now; a capped log skips its middle.
    if (next >= total || bytes.length === 0 && next === offset) {
      return { bytes: concat(pieces, read), partial: !complete };
    }
    if (read >= maxBytes) return { bytes: concat(pieces, read), partial: true };
    offset = next;
  }
}

function concat(pieces, length) {
  const all = new Uint8Array(length);
  let at = 0;
  for (const piece of pieces) {
    all.set(piece, at);
    at += piece.length;
  }
  return all;
}
