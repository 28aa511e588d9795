// The mind at the selected event: narrative and portrait (with their change since the previous
// one), the three threads, beliefs and edges (a list and a graph), review items, and a persona's
// emotions, relationship and goals. Pure rendering of one `state?at=` answer.

import { clip, h, number } from "./dom.js";
import { memoryGraph } from "./graph.js";
import { changed, renderDiff } from "./textdiff.js";

function card(title, id, ...body) {
  return h("section", { class: "card", id }, h("h2", {}, title), ...body);
}

function since(label, before, after, id) {
  if (before === null || before === undefined) return h("p", { class: "muted", id }, `The first ${label}.`);
  if (!changed(before, after)) return h("p", { class: "muted", id }, `Unchanged since the previous ${label}.`);
  return h("details", { class: "since", id, open: true }, h("summary", {}, `Change since the previous ${label}`),
    renderDiff(before, after));
}

function bar(value, { max = 1, min = 0 } = {}) {
  const meter = h("meter", { min, max, value: Number(value) || 0 });
  return meter;
}

function threads(state) {
  if (!state.threads) return h("p", { class: "muted" }, "No monologue yet.");
  return h("dl", { class: "threads" },
    ["reasoning", "memory", "goal"].flatMap((name) => [h("dt", {}, name), h("dd", { dataset: { thread: name } }, state.threads[name])]));
}

function beliefs(state, onWhy) {
  if (!state.beliefs.length) return h("p", { class: "muted" }, "No beliefs.");
  const sorted = [...state.beliefs].sort((a, b) => (b.strength ?? b.confidence) - (a.strength ?? a.confidence));
  return h("ul", { class: "items", id: "beliefs" }, sorted.map((belief) => h("li", {},
    h("button", { type: "button", class: "link belief", dataset: { belief: belief.belief_id },
      title: "why: what produced this belief", onclick: () => onWhy({ belief: belief.belief_id }) }, belief.statement),
    h("span", { class: "muted" }, ` ${belief.kind}${belief.about ? ` · about ${belief.about}` : ""} · confidence `,
      number(belief.confidence), " · strength ", number(belief.strength)),
    bar(belief.strength ?? belief.confidence))));
}

function edges(state, onWhy) {
  if (!state.edges.length) return h("p", { class: "muted" }, "No edges.");
  return h("ul", { class: "items", id: "edges" }, state.edges.map((edge) => h("li", {},
    h("button", { type: "button", class: "link edge", dataset: { edge: `${edge.src}|${edge.relation}|${edge.dst}` },
      title: "why: what produced this edge",
      onclick: () => onWhy({ src: edge.src, relation: edge.relation, dst: edge.dst }) },
    `${edge.src} —${edge.relation}→ ${edge.dst}`),
    h("span", { class: "muted" }, ` ${edge.origin} · confidence ${number(edge.confidence)}`),
    edge.contradicted_by.length ? h("span", { class: "warn" }, ` contradicted by ${edge.contradicted_by.map((k) => k.join(" ")).join("; ")}`) : null)));
}

function reviews(state) {
  if (!state.review_items.length) return null;
  const statement = new Map(state.beliefs.map((b) => [b.belief_id, b.statement]));
  return card("Review items", "reviews", h("ul", { class: "items" }, state.review_items.map((item) => h("li", {},
    `${item.kind}: “${clip(statement.get(item.belief_id) ?? item.belief_id, 80)}” opposes “${clip(statement.get(item.opposed_id) ?? item.opposed_id, 80)}” (seq ${item.seq})`))));
}

function scores(title, values, id) {
  const entries = Object.entries(values || {});
  if (!entries.length) return null;
  return h("div", { class: "scores", id }, h("h3", {}, title), h("table", {}, entries.map(([name, value]) =>
    h("tr", { dataset: { name } }, h("th", {}, name), h("td", {}, bar(value)),
      h("td", { class: "number" }, number(value))))));
}

function persona(view) {
  const goals = view.hard_goals.length === 0 ? null : h("ol", { class: "goals" }, view.hard_goals.map((goal, index) => h("li", {
    class: index < view.hard_met ? "met" : index === view.active_hard_goal ? "active" : "" },
  goal, index < view.hard_met ? " ✓" : index === view.active_hard_goal ? " (working on it)" : "")));
  const steps = ["interpretation", "appraisal", "plan"].map((name) => view[name]
    ? h("p", {}, h("strong", {}, `${name}: `), view[name].text) : null);
  return card(`Persona: ${view.name}`, "persona",
    h("p", { class: "muted" }, `version ${String(view.version).slice(0, 12)} · ${view.order.replace("_", " ")}`),
    scores("Emotion", view.emotions, "emotions"),
    view.emotion_reason ? h("p", { class: "muted" }, clip(view.emotion_reason, 200)) : null,
    scores("Relationship", view.relationship, "relationship"),
    goals ? h("h3", {}, "Hard goals, in order") : null, goals,
    scores("Soft goals", view.soft_goals, "soft-goals"),
    ...steps,
    h("p", { class: "muted" }, `${view.episodes.length} episodes remembered`));
}

export function renderMind(target, state, previous, { onWhy }) {
  const parts = [];
  if (state.persona) parts.push(persona(state.persona));
  if (!state.persona || state.narrative) parts.push(card("Narrative", "narrative-card",
    state.narrative ? h("p", { id: "narrative", class: "prose" }, state.narrative)
      : h("p", { id: "narrative", class: "muted", dataset: { empty: "true" } }, "No narrative yet."),
    state.narrative ? h("p", { class: "muted" }, `written at seq ${state.narrative_seq}`) : null,
    state.narrative ? since("narrative", previous.narrative, state.narrative, "narrative-diff") : null));
  if (!state.persona) parts.push(card("Threads", "threads-card", threads(state)));
  if (state.reflection || state.portrait) {
    parts.push(card("Portrait", "portrait-card",
      state.portrait ? h("p", { id: "portrait", class: "prose" }, state.portrait) : h("p", { id: "portrait", class: "muted" }, "No portrait yet."),
      state.portrait ? h("p", { class: "muted" }, `reflection ${state.reflections} at seq ${state.portrait_seq}`) : null,
      state.portrait ? since("portrait", previous.portrait, state.portrait, "portrait-diff") : null,
      state.pending_insights.length ? h("p", { class: "muted" }, `${state.pending_insights.length} insights waiting for the next reflection`) : null));
  }
  if (state.memory || state.beliefs.length || state.edges.length) {
    parts.push(card("Memory", "memory-card",
      memoryGraph(state, { onBelief: (b) => onWhy({ belief: b.belief_id }), onEdge: (e) => onWhy({ src: e.src, relation: e.relation, dst: e.dst }) }),
      h("h3", {}, `Beliefs (${state.beliefs.length})`), beliefs(state, onWhy),
      h("h3", {}, `Edges (${state.edges.length})`), edges(state, onWhy)));
    parts.push(reviews(state));
  }
  if (state.last_failure) {
    const failure = state.last_failure;
    parts.push(card("Last failure", "failure", h("p", { class: "warn" },
      `${failure.stage} failed at seq ${failure.seq} (${failure.error_type}, attempt ${failure.attempt}): ${failure.message}`),
    h("p", { class: "muted" }, "The state before it stays in force.")));
  }
  target.replaceChildren(...parts.filter(Boolean));
}
