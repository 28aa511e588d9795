// The gateway's JSON API, asked with the tenant's token; every failure becomes an ApiError whose
// message a person can read (a wrong token, an unknown conversation, a service that is down).

const TOKEN_KEY = "mirror.inspector.token";

export class ApiError extends Error {
  constructor(status, message, retryAfter = null, tombstone = null) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
    this.tombstone = tombstone; // a 410's: what is left of a forgotten conversation
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

export function setToken(value) {
  sessionStorage.setItem(TOKEN_KEY, value.trim());
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

// `/inspector#token=…`: keep the token in session storage and take it out of the address bar
// (the fragment never reached the server; it should not stay in the history either).
export function takeTokenFromFragment() {
  const found = location.hash.match(/(?:^#|&)token=([^&]*)/);
  if (!found) return false;
  setToken(decodeURIComponent(found[1]));
  history.replaceState(history.state, "", location.pathname + location.search);
  return true;
}

function url(path, params) {
  const target = new URL(path, location.origin);
  for (const [name, value] of Object.entries(params || {})) {
    if (value !== null && value !== undefined && value !== "") target.searchParams.set(name, value);
  }
  return target;
}

function headers(body) {
  const sent = { Authorization: `Bearer ${token()}` };
  if (body !== undefined) sent["Content-Type"] = "application/json";
  return sent;
}

async function failure(response) {
  let detail = response.statusText || "no detail";
  let tombstone = null;
  try {
    const body = await response.json();
    const said = body.detail ?? body.error?.message ?? body;
    detail = typeof said === "string" ? said : JSON.stringify(said);
    if (response.status === 410) tombstone = body.tombstone ?? null;
  } catch {
    // not JSON: keep the status text
  }
  const retryAfter = response.headers.get("Retry-After");
  return new ApiError(response.status, describe(response.status, detail, retryAfter), retryAfter, tombstone);
}

function describe(status, detail, retryAfter) {
  if (status === 401) return `The token was refused (401): ${detail}. Enter a valid tenant token above.`;
  if (status === 404) return `Not found (404): ${detail}`;
  if (status === 410) return `Forgotten (410): ${detail}`;
  if (status === 503) {
    const wait = retryAfter ? `${retryAfter} s` : "a few seconds";
    return `A service behind the gateway is down (503): ${detail}. Try again in ${wait}.`;
  }
  if (status === 504) return `The conversation did not answer in time (504): ${detail}`;
  return `The gateway answered ${status}: ${detail}`;
}

export async function api(path, { method = "GET", params, body, signal } = {}) {
  let response;
  try {
    response = await fetch(url(path, params), {
      method, headers: headers(body), body: body === undefined ? undefined : JSON.stringify(body), signal,
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, `The gateway cannot be reached (${error.message}). Is mirror up running?`);
  }
  if (!response.ok) throw await failure(response);
  return response.json();
}

// Server-sent events read with fetch (EventSource cannot send a token): yields
// {event, id, data} with `data` parsed as JSON; comments (keep-alives) are skipped.
export async function* serverEvents(path, { params, signal } = {}) {
  let response;
  try {
    response = await fetch(url(path, params), { headers: headers(), signal });
  } catch (error) {
    if (error.name === "AbortError") return;
    throw new ApiError(0, `The gateway cannot be reached (${error.message}).`);
  }
  if (!response.ok) throw await failure(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const message = parseBlock(block);
        if (message) yield message;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

function parseBlock(block) {
  const message = { event: "message", id: null, data: "" };
  let any = false;
  for (const line of block.split("\n")) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") message.event = value;
    else if (field === "id") message.id = value;
    else if (field === "data") message.data += (message.data ? "\n" : "") + value;
    else continue;
    any = true;
  }
  if (!any) return null;
  try {
    message.data = JSON.parse(message.data);
  } catch {
    // leave it as text
  }
  return message;
}

// A branch's own events in (after, until], of the given types if any (e.g. "turn"), paged (the
// log gives at most 1,000 a page); vectors are left out (the page shows none).
export async function eventsBetween(conversation, { branch = "main", after = 0, until = null, type = null, signal } = {}) {
  const events = [];
  for (;;) {
    const page = await api(conversationPath(conversation, "events"),
      { params: { after, until, type, limit: 1000, branch: branch === "main" ? null : branch }, signal });
    events.push(...page.events);
    if (page.events.length < 1000) return events;
    after = page.next_after;
  }
}

// A branch's timeline: every event's seq, type, turn and time (inherited ones included), as
// [{seq, type, turn, ts}], and the seq it was forked after (null for main). No payloads: a
// conversation of any length opens with this and the events of the part in view.
export async function timeline(conversation, branch = "main") {
  const index = await api(conversationPath(conversation, "timeline"), { params: { branch: branch === "main" ? null : branch } });
  const entries = index.seq.map((seq, i) => ({ seq, type: index.types[index.type[i]], turn: index.turn[i], ts: index.ts[i] }));
  return { entries, forkSeq: index.fork_seq, ancestry: index.ancestry || [] };
}

// One conversation's summary, looked up by its id (branches, mind, last seq, thinking…); the
// gateway's 404 says when the tenant has no such conversation. The tenant's list is never loaded for it.
export function conversationSummary(id) {
  return api(conversationPath(id));
}

export function conversationPath(conversation, what = "") {
  return `/v1/conversations/${encodeURIComponent(conversation)}${what ? `/${what}` : ""}`;
}
