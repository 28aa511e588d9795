// Why: what produced a reply, a belief or an edge — the recall the Talker answered from, the
// narrative it saw, the turn a belief came from, the reflection that decayed or rewrote it —
// with each model call's provenance (prompt set, model, tokens, milliseconds).

import { api, conversationPath } from "./api.js";
import { $, clip, h, replace, showMessage, when } from "./dom.js";
import { summarize } from "./summary.js";

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

function eventBlock(event, open) {
  return h("div", { class: "event" },
    h("p", {}, h("span", { class: `badge type-${event.type}` }, event.type), ` seq ${event.seq} · turn ${event.turn} · ${when(event.ts)}`),
    h("p", { class: "summary" }, summarize(event)),
    h("details", { open }, h("summary", {}, "the event as logged"), h("pre", {}, JSON.stringify(event.payload, readable, 2))));
}

export async function showWhy(conversation, branch, question, { onSeq }) {
  const panel = $("#why");
  const body = $("#why-body");
  panel.hidden = false;
  replace(body, h("p", { class: "muted" }, "Asking the log…"));
  let answer;
  try {
    answer = await api(conversationPath(conversation, "why"), { params: { ...question, branch } });
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
    eventBlock(cause.event, cause.role === "recall"),
    cause.provenance ? provenance(cause.provenance) : null))));
  if (answer.history.length) {
    parts.push(h("h3", {}, "Its history"), h("ol", { class: "history" }, answer.history.map((item) => h("li", { dataset: { seq: item.seq } },
      h("button", { type: "button", class: "link", onclick: () => onSeq(item.seq) }, `seq ${item.seq}`),
      ` ${item.type} (turn ${item.turn}): ${item.summary}`))));
  }
  replace(body, ...parts);
}

export function bindWhy() {
  $("#why-close").addEventListener("click", () => { $("#why").hidden = true; });
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") $("#why").hidden = true; });
}
