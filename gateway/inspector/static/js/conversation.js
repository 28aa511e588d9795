// One conversation: the dialogue on the left, the mind at the selected event on the right, a
// timeline over seqs between them (each position is `state?at=`), and its events as they arrive.
// The timeline is drawn from the conversation's index (seq, type, turn, time of every event, no
// payloads); the dialogue shows the turns around the selected event, fetched when it comes into
// view, and the texts the diffs compare with are read from their events: so opening costs the
// same at 10 turns or 10,000.

import { api, conversationPath, conversationSummary, eventsBetween, serverEvents, timeline } from "./api.js";
import { $, clip, h, replace, showMessage, turnLabel, when } from "./dom.js";
import { renderMind } from "./mind.js";
import { FAILURE, summarize, THINKING } from "./summary.js";
import { showWhy } from "./why.js";

const view = {
  id: null, branch: "main", branches: ["main"], mind: "mirror", entries: [], bySeq: new Map(), seqsOf: new Map(),
  read: new Map(), forkSeq: null, ancestry: [], lastSeq: 0, seq: 0, earlier: 0, states: new Map(), asked: 0, live: null,
  onChange: () => {},
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

// The dialogue shows the TURNS_BEFORE turns up to the selected event and TURNS_AFTER after it;
// "earlier turns" adds TURNS_BEFORE more at a time.
export const TURNS_BEFORE = 20;
export const TURNS_AFTER = 5;
// The reflections read at once when looking for the portrait before the one in force (most are accepted).
export const REFLECTIONS_AT_ONCE = 4;

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

// This branch's events in (after, until] (of `type`, if given): each branch it inherits from up to
// the seq it was forked after (a regenerated reply on a regenerated branch: the chain back to
// main, `view.ancestry`), then its own.
async function eventsOf(after, until, type = null) {
  const segments = [{ branch: view.branch, from: view.branch === "main" ? 0 : view.forkSeq || 0, to: until }];
  view.ancestry.forEach((link, i) => segments.push({ branch: link.branch, from: view.ancestry[i + 1]?.until || 0, to: link.until }));
  const parts = segments.map((segment) => ({ branch: segment.branch, after: Math.max(after, segment.from), until: Math.min(until, segment.to) }))
    .filter((part) => part.until > part.after).reverse();
  const read = await Promise.all(parts.map((part) => eventsBetween(view.id, { ...part, type })));
  return read.flat();
}

function indexed(entries) {
  Object.assign(view, { entries: [], bySeq: new Map(), seqsOf: new Map(), lastSeq: 0 });
  entries.forEach(addEntry);
}

function addEntry(entry) {
  view.entries.push(entry);
  view.bySeq.set(entry.seq, entry);
  if (!view.seqsOf.has(entry.type)) view.seqsOf.set(entry.type, []);
  view.seqsOf.get(entry.type).push(entry.seq);
  view.lastSeq = entry.seq;
}

// The seqs of this branch's events of `type` at or before `seq`, ascending.
function seqsUpTo(type, seq) {
  const seqs = view.seqsOf.get(type) || [];
  return seqs.slice(0, countUpTo(seqs, seq));
}

function countUpTo(seqs, seq) {
  let low = 0;
  for (let high = seqs.length; low < high;) {
    const middle = (low + high) >> 1;
    if (seqs[middle] <= seq) low = middle + 1;
    else high = middle;
  }
  return low;
}

// Events in (after, until] of `type`, read once: kept in view.read by seq.
async function readEvents(after, until, type = null) {
  const events = await eventsOf(after, until, type);
  for (const event of events) view.read.set(event.seq, event);
  return events;
}

export async function openConversation(id, { branch = "main", at = null, onChange }) {
  stopLive();
  Object.assign(view, { id, branch, states: new Map(), onChange: onChange || (() => {}) });
  $("#conversation-title").textContent = id;
  $("#why").hidden = true;
  const indexAsked = timeline(id, branch); // asked with the summary; its failure said only once the branch is known
  indexAsked.catch(() => {});
  const summary = await conversationSummary(id);
  view.branches = summary.branches;
  view.mind = summary.mind || "mirror";
  if (!view.branches.includes(branch)) {
    throw new Error(`Not found: conversation ${id} has no branch ${JSON.stringify(branch)} (its branches: ${view.branches.join(", ")}).`);
  }
  $("#mind-badge").textContent = view.mind;
  $("#mind-badge").className = `badge mind-${view.mind}`;
  replace($("#branch"), view.branches.map((name) => h("option", { value: name, selected: name === branch }, name)));
  const index = await indexAsked;
  Object.assign(view, { forkSeq: index.forkSeq, ancestry: index.ancestry, read: new Map(), earlier: 0 });
  indexed(index.entries);
  renderTimeline();
  replace($("#dialogue"));
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
  replace(strip, view.entries.map(tick));
}

function tick(entry) {
  return h("span", { class: `tick type-${entry.type}`, title: `seq ${entry.seq}: ${entry.type}`, dataset: { seq: entry.seq } });
}

function turnBlock(event) {
  return h("article", { class: "turn", dataset: { seq: event.seq, turn: event.turn } },
    h("p", { class: "user" }, h("span", { class: "who" }, `user · ${turnLabel(event.turn)}`), event.payload.user_message),
    h("button", { type: "button", class: "reply", dataset: { seq: event.seq }, title: "why: what produced this reply",
      onclick: () => why({ seq: event.seq }) }, h("span", { class: "who" }, `reply · seq ${event.seq}`), event.payload.reply));
}

// The seqs of the turns the dialogue shows around `seq`, and how many earlier ones it leaves out.
function dialogueWindow(seq) {
  const seqs = view.seqsOf.get("turn") || [];
  const reached = countUpTo(seqs, seq);
  const from = Math.max(0, reached - TURNS_BEFORE - view.earlier);
  return { seqs: seqs.slice(from, Math.min(seqs.length, reached + TURNS_AFTER)), hidden: from };
}

// The client's instructions (its system text) where they changed, between the turns they came before.
function instructionsBlock(event) {
  return h("p", { class: "instructions muted", dataset: { seq: event.seq } },
    h("span", { class: "who" }, `instructions · seq ${event.seq}`), event.payload.text || "(cleared)");
}

// The turns around `seq` and the instructions among them, fetched (type=turn,instructions, one
// range) for those not seen yet, then drawn.
async function showDialogue(seq) {
  const { seqs, hidden } = dialogueWindow(seq);
  const turnSeqs = view.seqsOf.get("turn") || [];
  const low = hidden ? turnSeqs[hidden - 1] : 0;
  const high = seqs.length && seqs[seqs.length - 1] !== turnSeqs[turnSeqs.length - 1] ? seqs[seqs.length - 1] : view.lastSeq;
  const told = (view.seqsOf.get("instructions") || []).filter((told) => told > low && told <= high);
  const wanted = [...seqs, ...told].sort((a, b) => a - b);
  const missing = wanted.filter((wantedSeq) => !view.read.has(wantedSeq));
  if (missing.length) await readEvents(missing[0] - 1, missing[missing.length - 1], "turn,instructions");
  if (seq !== view.seq) return; // the timeline moved on while we asked
  const box = $("#dialogue");
  const shown = [...box.querySelectorAll(".turn, .instructions")].map((block) => Number(block.dataset.seq));
  if (shown.join() !== wanted.join() || !box.firstChild) {
    const earlier = hidden ? h("button", { type: "button", class: "link earlier",
      onclick: () => { view.earlier += TURNS_BEFORE; showDialogue(view.seq); } },
    `${hidden} earlier turn${hidden === 1 ? "" : "s"}…`) : null;
    const blocks = wanted.map((wantedSeq) => view.read.get(wantedSeq)).filter(Boolean)
      .map((event) => (event.type === "turn" ? turnBlock(event) : instructionsBlock(event)));
    replace(box, seqs.length ? [earlier, ...blocks] : [...blocks, h("p", { class: "muted" }, "No turn yet.")]);
  }
  markDialogue();
}

// The line under the timeline: the selected event's place from the index at once, its summary
// once the event is read (a turn in view is already at hand).
async function describeSelected(seq) {
  const entry = view.bySeq.get(seq);
  const line = $("#seq-event");
  if (!entry) {
    line.textContent = "";
    return;
  }
  const place = `${entry.type} · ${turnLabel(entry.turn)} · ${when(entry.ts)}`;
  line.textContent = place;
  const event = view.read.get(seq) || (await readEvents(seq - 1, seq))[0];
  if (event && seq === view.seq) line.textContent = `${place} · ${clip(summarize(event), 90)}`;
}

// The narrative and the portrait before the ones in force at `seq`: what the diffs compare with.
// Read from their events by the projection's own rules — the narrative in force is the last
// narrative event's text, the portrait the last accepted reflection's — so that two texts cost
// two small reads, asked at once with the state, rather than two more states folded after it.
async function previousTexts(seq) {
  const narratives = seqsUpTo("narrative", seq);
  const before = narratives.length > 1 ? narratives[narratives.length - 2] : null;
  const [narrative, portrait] = await Promise.all([
    before === null ? null : (view.read.has(before) ? Promise.resolve([view.read.get(before)]) : readEvents(before - 1, before))
      .then(([event]) => (event ? event.payload.text : null)),
    previousPortrait(seqsUpTo("reflection", seq)),
  ]);
  return { narrative, portrait };
}

async function previousPortrait(reflections) {
  let accepted = 0; // the first accepted one, from the newest back, is the portrait in force
  for (let end = reflections.length; end > 0; end -= REFLECTIONS_AT_ONCE) {
    const chunk = reflections.slice(Math.max(0, end - REFLECTIONS_AT_ONCE), end);
    if (chunk.some((seq) => !view.read.has(seq))) await readEvents(chunk[0] - 1, chunk[chunk.length - 1], "reflection");
    for (const seq of chunk.reverse()) {
      const event = view.read.get(seq);
      if (event && event.payload.accepted && ++accepted === 2) return event.payload.portrait;
    }
  }
  return null;
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
  markDialogue();
  view.onChange(current());
  let state;
  let previous;
  try {
    [state, previous] = await Promise.all([stateAt(seq), previousTexts(seq), showDialogue(seq), describeSelected(seq)]);
  } catch (error) {
    if (asked === view.asked) showMessage(error.message);
    return;
  }
  if (asked !== view.asked) return; // the timeline moved on while we asked
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
  const entry = { seq: event.seq, type: event.type, turn: event.turn, ts: event.ts };
  addEntry(entry);
  view.read.set(event.seq, event);
  const feed = $("#live-feed");
  feed.prepend(h("li", { class: `live type-${event.type}${event.type === FAILURE ? " failure" : ""}`, dataset: { seq: event.seq } },
    h("button", { type: "button", class: "link", onclick: () => select(event.seq) }, `seq ${event.seq}`),
    ` ${event.type}: ${summarize(event)}`));
  $("#live-count").textContent = `(${feed.children.length} new)`;
  $("#live-box").open = true;
  $("#strip").append(tick(entry));
  $("#timeline").max = view.lastSeq;
  $("#seq-last").textContent = view.lastSeq;
  if (event.type === "instructions") {
    if (!$("#follow").checked) showDialogue(view.seq).catch(() => {});
  } else if (event.type === "turn") {
    if (!$("#follow").checked) showDialogue(view.seq).catch(() => {}); // within TURNS_AFTER of the selected one: shown
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
