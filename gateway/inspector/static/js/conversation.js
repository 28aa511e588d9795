// One conversation: the dialogue on the left, the mind at the selected event on the right, a
// timeline over seqs between them (each position is `state?at=`), and its events as they arrive.

import { allEvents, api, conversationPath, conversationSummary, serverEvents } from "./api.js";
import { $, clip, h, replace, showMessage, turnLabel, when } from "./dom.js";
import { renderMind } from "./mind.js";
import { FAILURE, summarize, THINKING } from "./summary.js";
import { showWhy } from "./why.js";

const view = {
  id: null, branch: "main", branches: ["main"], mind: "mirror", events: [], lastSeq: 0, seq: 0,
  states: new Map(), asked: 0, live: null, onChange: () => {},
};

export function current() {
  return { id: view.id, branch: view.branch, branches: view.branches, mind: view.mind, seq: view.seq, lastSeq: view.lastSeq };
}

// The states looked at, newest use last, at most KEPT_STATES of them: one state of a long
// conversation weighs tens to hundreds of kB (its beliefs, edges and last 20 turns), so a sweep of
// the timeline over thousands of seqs would otherwise keep tens of MB. 64 holds a stretch of the
// timeline stepped back and forth, with the previous narrative's and portrait's states each
// position also reads; a seq further away is asked for again (one `state?at=`, tens of ms).
export const KEPT_STATES = 64;

async function stateAt(seq) {
  const cacheKey = `${view.branch}@${seq}`;
  const kept = view.states.get(cacheKey);
  if (kept) {
    view.states.delete(cacheKey); // used now: the newest again
    view.states.set(cacheKey, kept);
    return kept;
  }
  const asked = api(conversationPath(view.id, "state"), { params: { at: seq, branch: view.branch } });
  view.states.set(cacheKey, asked);
  asked.catch(() => view.states.delete(cacheKey));
  while (view.states.size > KEPT_STATES) view.states.delete(view.states.keys().next().value); // the least recently used
  return asked;
}

// A branch's events: its parent's up to the fork, then its own. The parent may be a branch too
// (a regenerated reply on a regenerated branch), so the inherited part is the parent's, recursively.
async function eventsOf(branch, depth = 0) {
  if (branch === "main") return allEvents(view.id);
  const own = await allEvents(view.id, { branch });
  const fork = own.find((event) => event.type === "fork");
  const forkSeq = fork ? fork.payload.fork_seq : 0;
  const parent = fork ? fork.payload.parent_branch : "main";
  const inherited = forkSeq && depth < 16 ? (await eventsOf(parent, depth + 1)).filter((event) => event.seq <= forkSeq) : [];
  return [...inherited, ...own.filter((event) => event.seq > forkSeq)];
}

export async function openConversation(id, { branch = "main", at = null, onChange }) {
  stopLive();
  Object.assign(view, { id, branch, states: new Map(), onChange: onChange || (() => {}) });
  $("#conversation-title").textContent = id;
  $("#why").hidden = true;
  const summary = await conversationSummary(id);
  view.branches = summary.branches;
  view.mind = summary.mind || "mirror";
  if (!view.branches.includes(branch)) {
    throw new Error(`Not found: conversation ${id} has no branch ${JSON.stringify(branch)} (its branches: ${view.branches.join(", ")}).`);
  }
  $("#mind-badge").textContent = view.mind;
  $("#mind-badge").className = `badge mind-${view.mind}`;
  replace($("#branch"), view.branches.map((name) => h("option", { value: name, selected: name === branch }, name)));
  view.events = await eventsOf(branch);
  view.lastSeq = view.events.length ? view.events[view.events.length - 1].seq : 0;
  renderTimeline();
  renderDialogue();
  replace($("#live-feed"));
  $("#live-count").textContent = "";
  await select(at === null ? view.lastSeq : shownSeq(at, branch));
  if (branch === "main") startLive();
  else $("#live-status").textContent = "live events follow main only";
}

// The seq the address bar asked for (`at=`), or, when this branch has no such seq, the nearest
// one — said at the top, never swapped silently.
function shownSeq(at, branch) {
  if (Number.isInteger(at) && at >= 1 && at <= view.lastSeq) return at;
  const past = Number.isInteger(at) && at > view.lastSeq;
  const shown = past ? view.lastSeq : 1;
  showMessage(past ? `at=${at} is past the end: branch ${branch} ends at seq ${view.lastSeq}; showing seq ${shown}.`
    : `at=${at} is not a seq (seqs are whole numbers from 1); showing seq ${shown}.`, "warning");
  return shown;
}

function renderTimeline() {
  const range = $("#timeline");
  range.min = 1;
  range.max = Math.max(1, view.lastSeq);
  $("#seq-last").textContent = view.lastSeq;
  const strip = $("#strip");
  replace(strip, view.events.map((event) => h("span", {
    class: `tick type-${event.type}`, title: `seq ${event.seq}: ${event.type}`, dataset: { seq: event.seq },
  })));
}

function turnBlock(event) {
  return h("article", { class: "turn", dataset: { seq: event.seq, turn: event.turn } },
    h("p", { class: "user" }, h("span", { class: "who" }, `user · ${turnLabel(event.turn)}`), event.payload.user_message),
    h("button", { type: "button", class: "reply", dataset: { seq: event.seq }, title: "why: what produced this reply",
      onclick: () => why({ seq: event.seq }) }, h("span", { class: "who" }, `reply · seq ${event.seq}`), event.payload.reply));
}

// The client's instructions (its system text) where they changed, between the turns they came before.
function instructionsBlock(event) {
  return h("p", { class: "instructions muted", dataset: { seq: event.seq } },
    h("span", { class: "who" }, `instructions · seq ${event.seq}`), event.payload.text || "(cleared)");
}

function renderDialogue() {
  const said = view.events.filter((event) => event.type === "turn" || event.type === "instructions");
  const blocks = said.map((event) => (event.type === "turn" ? turnBlock(event) : instructionsBlock(event)));
  replace($("#dialogue"), said.some((event) => event.type === "turn") ? blocks : h("p", { class: "muted" }, "No turn yet."));
}

function markDialogue() {
  let reached = null; // the last turn at or before the selected event: kept in sight
  for (const turn of document.querySelectorAll("#dialogue .turn")) {
    const seq = Number(turn.dataset.seq);
    turn.classList.toggle("future", seq > view.seq);
    turn.classList.toggle("now", seq === view.seq);
    if (seq <= view.seq) reached = turn;
  }
  if (reached) {
    const box = $("#dialogue");
    const top = reached.offsetTop - box.offsetTop;
    if (top < box.scrollTop || top + reached.offsetHeight > box.scrollTop + box.clientHeight) {
      box.scrollTop = Math.max(0, top + reached.offsetHeight - box.clientHeight + 8);
    }
  }
  for (const tick of document.querySelectorAll("#strip .tick")) {
    tick.classList.toggle("future", Number(tick.dataset.seq) > view.seq);
    tick.classList.toggle("now", Number(tick.dataset.seq) === view.seq);
  }
}

export async function select(seq) {
  if (!view.lastSeq) {
    replace($("#mind"), h("p", { class: "muted" }, "This conversation has no events on this branch yet."));
    return;
  }
  seq = Math.min(Math.max(1, seq), view.lastSeq);
  view.seq = seq;
  const asked = ++view.asked;
  $("#timeline").value = seq;
  $("#seq").textContent = seq;
  const event = view.events.find((e) => e.seq === seq);
  $("#seq-event").textContent = event ? `${event.type} · ${turnLabel(event.turn)} · ${when(event.ts)} · ${clip(summarize(event), 90)}` : "";
  markDialogue();
  view.onChange(current());
  let state;
  try {
    state = await stateAt(seq);
  } catch (error) {
    if (asked === view.asked) showMessage(error.message);
    return;
  }
  const previous = {};
  const [narrativeBefore, portraitBefore] = await Promise.all([
    state.narrative_seq > 1 ? stateAt(state.narrative_seq - 1).catch(() => null) : null,
    state.portrait_seq > 1 ? stateAt(state.portrait_seq - 1).catch(() => null) : null,
  ]);
  if (asked !== view.asked) return; // the timeline moved on while we asked
  previous.narrative = narrativeBefore ? narrativeBefore.narrative : null;
  previous.portrait = portraitBefore ? portraitBefore.portrait : null;
  renderMind($("#mind"), state, previous, { onWhy: why });
  $("#mind").dataset.seq = seq;
}

export function why(question) {
  return showWhy(view.id, view.branch, question, { onSeq: (seq) => select(seq) });
}

// ---- live: the conversation's new events (server-sent events of main), thinking and failures

function stopLive() {
  if (view.live) view.live.abort();
  view.live = null;
}

function startLive() {
  const controller = new AbortController();
  view.live = controller;
  follow(controller).catch((error) => {
    if (controller.signal.aborted) return;
    $("#live-status").textContent = "live: disconnected";
    showMessage(`Live events stopped: ${error.message}`);
  });
}

async function follow(controller) {
  const { signal } = controller;
  for (let attempt = 0; !signal.aborted; attempt += 1) {
    $("#live-status").textContent = attempt ? "live: reconnecting…" : "live: connecting…";
    try {
      const stream = serverEvents(conversationPath(view.id, "stream"), { signal });
      $("#live-status").textContent = "live";
      $("#live-status").dataset.live = "true";
      for await (const message of stream) {
        if (message.data && typeof message.data === "object" && message.data.seq) arrived(message.data);
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error.status && error.status < 500) throw error; // a 4xx will not mend itself
    }
    delete $("#live-status").dataset.live;
    await new Promise((resolve) => setTimeout(resolve, Math.min(5000, 500 * 2 ** attempt)));
  }
}

let following = null;

function arrived(event) {
  if (event.seq <= view.lastSeq) return; // already known (the stream may replay the newest)
  view.events.push(event);
  view.lastSeq = event.seq;
  const feed = $("#live-feed");
  feed.prepend(h("li", { class: `live type-${event.type}${event.type === FAILURE ? " failure" : ""}`, dataset: { seq: event.seq } },
    h("button", { type: "button", class: "link", onclick: () => select(event.seq) }, `seq ${event.seq}`),
    ` ${event.type}: ${summarize(event)}`));
  $("#live-count").textContent = `(${feed.children.length} new)`;
  $("#live-box").open = true;
  $("#strip").append(h("span", { class: `tick type-${event.type}`, title: `seq ${event.seq}: ${event.type}`, dataset: { seq: event.seq } }));
  $("#timeline").max = view.lastSeq;
  $("#seq-last").textContent = view.lastSeq;
  if (event.type === "instructions") {
    const dialogue = $("#dialogue");
    dialogue.querySelector(":scope > p.muted:not(.instructions)")?.remove(); // "No turn yet."
    dialogue.append(instructionsBlock(event));
  } else if (event.type === "turn") {
    const dialogue = $("#dialogue");
    dialogue.querySelector(":scope > p.muted:not(.instructions)")?.remove(); // "No turn yet."
    dialogue.append(turnBlock(event));
    thinking(`thinking after ${turnLabel(event.turn)}…`);
  } else if (event.type === FAILURE) {
    thinking(`${event.payload.stage} failed: ${clip(event.payload.message, 80)}`, "failure");
    showMessage(`Thinking failed at seq ${event.seq}: ${event.payload.stage} (${event.payload.error_type}): ${event.payload.message}`, "warning");
  } else if (THINKING.has(event.type)) {
    thinking(`thinking: ${event.type} at seq ${event.seq}`);
  }
  if ($("#follow").checked) {
    clearTimeout(following);  // a turn's thinking arrives as a burst: look once it settles a little
    following = setTimeout(() => select(view.lastSeq), 100);
  } else {
    markDialogue();
  }
}

let quiet = null;
function thinking(text, kind = "thinking") {
  const status = $("#live-status");
  status.textContent = `live · ${text}`;
  status.dataset.kind = kind;
  clearTimeout(quiet);
  if (kind === "thinking") checkIdle();
}

// Quiet for a moment: ask the conversation whether it is still thinking (its summary says).
function checkIdle() {
  quiet = setTimeout(async () => {
    const status = $("#live-status");
    try {
      const summary = await api(conversationPath(view.id));
      status.textContent = summary.thinking ? "live · still thinking…" : "live · idle";
      status.dataset.kind = summary.thinking ? "thinking" : "idle";
      if (summary.thinking && view.live) checkIdle();
    } catch {
      // the summary is a nicety; the events are what count
    }
  }, 1500);
}

export function leaveConversation() {
  stopLive();
  view.id = null;
}
