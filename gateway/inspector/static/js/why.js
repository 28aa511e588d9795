// Why: what produced a reply, a belief or an edge — the recall the Talker answered from, the
// narrative it saw, the turn a belief came from, the reflection that decayed or rewrote it —
// with each model call's provenance (prompt set, model, tokens, milliseconds). A belief's or an
// edge's recalls come RECALLS_PAGE at a time ("more recalls" asks for the next page).

import { api, conversationPath } from "./api.js";
import { $, clip, h, replace, showMessage, turnLabel, when } from "./dom.js";
import { summarize } from "./summary.js";

export const RECALLS_PAGE = 50;

const ROLES = {
  recall: "the recall it answered from", narrative: "the narrative it saw", portrait: "the portrait it read",
  interpretation: "the think step", retrieval: "what it retrieved", appraisal: "the appraisal", plan: "the plan",
  monologue: "the monologue", turn: "the turn it came after", source_turn: "the turn it came from",
  memory_step: "the memory step", reflection: "a reflection that touched it", insight: "an insight it used",
  belief: "a belief recalled", contradiction: "what contradicts it", causation: "the event it was computed from",
  related: "a belief it opposes or supports",
};

function provenance(record) {
  if (!record) return h("p", { class: "muted" }, "No model call.");
  const rows = [["model", record.model], ["prompt set", record.prompt_set],
    ["tokens", `${record.prompt_tokens} in, ${record.completion_tokens} out`],
    ["latency", `${Number(record.latency_ms).toFixed(1)} ms`], ["request", String(record.request_fingerprint).slice(0, 16)],
    ["parameters", Object.entries(record.parameters || {}).map(([k, v]) => `${k}=${v}`).join(", ")]];
  return h("table", { class: "provenance" }, rows.map(([name, value]) => h("tr", {}, h("th", {}, name), h("td", {}, value))));
}

// A vector is base64 of little-endian float32s: shown by its size, not as a wall of text.
function readable(key, value) {
  if (/embedding/.test(key) && typeof value === "string" && value.length > 40) return `‹a vector of ${Math.floor((value.length * 3) / 16)} floats›`;
  if (/embeddings$/.test(key) && Array.isArray(value)) return `‹${value.length} vectors›`;
  return value;
}

function eventBlock(event, open, extra = null) {
  return h("div", { class: "event" },
    h("p", {}, h("span", { class: `badge type-${event.type}` }, event.type), ` seq ${event.seq} · ${turnLabel(event.turn)} · ${when(event.ts)}`),
    h("p", { class: "summary" }, summarize(event)),
    extra,
    h("details", { open }, h("summary", {}, "the event as logged"), h("pre", {}, JSON.stringify(event.payload, readable, 2))));
}

// A retrieval event names what it retrieved by position only (episodes by the turn they record,
// biography entries by index): their texts are the persona's at that seq, asked once and filled in.
function retrieved(conversation, branch, event) {
  const list = h("ul", { class: "items retrieved" }, h("li", { class: "muted" }, "reading what it retrieved…"));
  const turns = event.payload.episode_turns || [];
  const entries = event.payload.biography_entries || [];
  if (!turns.length && !entries.length) return null;
  api(conversationPath(conversation, "state"), { params: { at: event.seq, branch } }).then((state) => {
    const persona = state.persona || { episodes: [], biography: [] };
    const episode = new Map(persona.episodes.map((e) => [e.turn, e.text]));
    replace(list,
      turns.map((turn) => h("li", { class: "episode", dataset: { turn } }, h("strong", {}, `episode of ${turnLabel(turn)}: `),
        episode.get(turn) ?? h("span", { class: "muted" }, "no longer kept"))),
      entries.map((index) => h("li", { class: "biography", dataset: { entry: index } }, h("strong", {}, `biography ${index + 1}: `),
        persona.biography[index] ?? h("span", { class: "muted" }, "not in the card"))));
  }).catch((error) => replace(list, h("li", { class: "warn" }, `The texts could not be read: ${error.message}`)));
  return list;
}

export async function showWhy(conversation, branch, question, { onSeq }) {
  const panel = $("#why");
  const body = $("#why-body");
  panel.hidden = false;
  replace(body, h("p", { class: "muted" }, "Asking the log…"));
  let answer;
  try {
    answer = await api(conversationPath(conversation, "why"), { params: { ...question, branch, limit: RECALLS_PAGE } });
  } catch (error) {
    replace(body, h("p", { class: "warn", role: "alert" }, error.message));
    showMessage(error.message);
    return;
  }
  const subject = answer.subject;
  const parts = [
    h("p", { class: "subject" }, h("strong", {}, subject.kind), ": ", clip(subject.text, 300)),
  ];
  if (answer.event) {
    parts.push(h("p", {}, h("button", { type: "button", class: "link", onclick: () => onSeq(answer.event.seq) },
      `Move the timeline to seq ${answer.event.seq}`)));
    parts.push(h("h3", {}, "Its model call"), provenance(answer.provenance));
  }
  parts.push(h("h3", {}, "What produced it"));
  if (!answer.causes.length) parts.push(h("p", { class: "muted" }, "Nothing before it: it is where this begins."));
  parts.push(h("ol", { class: "causes" }, answer.causes.map((cause) => h("li", { class: "cause", dataset: { role: cause.role, seq: cause.event.seq } },
    h("p", {}, h("strong", {}, ROLES[cause.role] || cause.role), cause.label ? ` — ${cause.label}` : ""),
    eventBlock(cause.event, cause.role === "recall",
      cause.event.type === "retrieval" ? retrieved(conversation, branch, cause.event) : null),
    cause.provenance ? provenance(cause.provenance) : null))));
  if (answer.history.length) {
    parts.push(h("h3", {}, "Its history"), h("ol", { class: "history" }, answer.history.map((item) => h("li", { dataset: { seq: item.seq } },
      h("button", { type: "button", class: "link", onclick: () => onSeq(item.seq) }, `seq ${item.seq}`),
      ` ${item.type} (${turnLabel(item.turn)}): ${item.summary}`))));
  }
  if (answer.recalls && answer.recalls.total) parts.push(...recalls(conversation, branch, question, answer.recalls, onSeq));
  replace(body, ...parts);
}

function recallItem(item, onSeq) {
  return h("li", { dataset: { seq: item.seq } },
    h("button", { type: "button", class: "link", onclick: () => onSeq(item.seq) }, `seq ${item.seq}`),
    ` recall (${turnLabel(item.turn)}): ${item.summary}`);
}

// The recalls that gave it to the Talker, a page at a time.
function recalls(conversation, branch, question, page, onSeq) {
  const list = h("ol", { class: "recalls" }, page.items.map((item) => recallItem(item, onSeq)));
  const more = h("button", { type: "button", class: "link more-recalls", hidden: page.next_after === null });
  let after = page.next_after;
  const label = () => { more.textContent = `more recalls (${page.total - list.children.length} left)`; };
  label();
  more.addEventListener("click", async () => {
    more.disabled = true;
    try {
      const next = await api(conversationPath(conversation, "why"), { params: { ...question, branch, after, limit: RECALLS_PAGE } });
      list.append(...next.recalls.items.map((item) => recallItem(item, onSeq)));
      after = next.recalls.next_after;
      more.hidden = after === null;
      label();
    } catch (error) {
      showMessage(error.message);
    } finally {
      more.disabled = false;
    }
  });
  return [h("h3", {}, `Its recalls (${page.total})`), list, more];
}

export function bindWhy() {
  $("#why-close").addEventListener("click", () => { $("#why").hidden = true; });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") $("#why").hidden = true; });
}
