// Compare any two points — two seqs, or main and a recompute branch — side by side, with the
// differences marked: narratives, portraits, beliefs, edges and replies (from `diff` and two states).

import { api, conversationPath } from "./api.js";
import { $, clip, h, replace, showMessage, turnLabel } from "./dom.js";
import { changed, renderSide } from "./textdiff.js";

function side(value) {
  return value === "" || value === null || value === undefined ? null : Number(value);
}

export function setupCompare({ branches, left, right }) {
  for (const [id, chosen] of [["#left-branch", left.branch], ["#right-branch", right.branch]]) {
    replace($(id), branches.map((name) => h("option", { value: name, selected: name === chosen }, name)));
  }
  $("#left-seq").value = left.seq ?? "";
  $("#right-seq").value = right.seq ?? "";
}

export function compareChoice() {
  return { left: { branch: $("#left-branch").value, seq: side($("#left-seq").value) },
    right: { branch: $("#right-branch").value, seq: side($("#right-seq").value) } };
}

function pair(title, id, before, after) {
  if (!before && !after) return null; // neither side has one (no portrait yet, no persona)
  const differs = changed(before, after);
  return h("section", { class: `card pair${differs ? " differs" : ""}`, id, dataset: { changed: String(differs) } },
    h("h2", {}, title, differs ? h("span", { class: "badge changed" }, "changed") : h("span", { class: "badge" }, "same")),
    h("div", { class: "two" }, h("div", { class: "left" }, renderSide(before, after, "left")),
      h("div", { class: "right" }, renderSide(before, after, "right"))));
}

function listOf(title, id, added, removed, changes, text) {
  if (!added.length && !removed.length && !changes.length) {
    return h("section", { class: "card", id, dataset: { changed: "false" } }, h("h2", {}, title, h("span", { class: "badge" }, "same")));
  }
  return h("section", { class: "card differs", id, dataset: { changed: "true" } },
    h("h2", {}, title, h("span", { class: "badge changed" }, `${added.length} added, ${removed.length} removed, ${changes.length} changed`)),
    h("ul", { class: "items" },
      removed.map((item) => h("li", { class: "removed" }, h("del", {}, text(item)))),
      added.map((item) => h("li", { class: "added" }, h("ins", {}, text(item)))),
      changes.map((item) => h("li", { class: "changed" }, clip(item.text, 120), " — ",
        Object.entries(item.fields).map(([field, values]) => h("span", { class: "field" },
          `${field}: `, h("del", {}, JSON.stringify(values.before)), " → ", h("ins", {}, JSON.stringify(values.after)), " "))))));
}

function replies(leftState, rightState) {
  // recent_turns are the state's last turns, oldest first: the last one is turn `state.turns - 1`.
  const byTurn = (state) => new Map(state.recent_turns.map((turn, index) =>
    [state.turns - state.recent_turns.length + index, turn])); // turns count from 0, as events do
  const left = byTurn(leftState);
  const right = byTurn(rightState);
  const turns = [...new Set([...left.keys(), ...right.keys()])].sort((a, b) => a - b);
  const rows = turns.map((turn) => {
    const a = left.get(turn);
    const b = right.get(turn);
    const differs = changed(a?.reply, b?.reply);
    return h("tr", { class: differs ? "differs" : "", dataset: { turn, changed: String(differs) } },
      h("th", {}, turnLabel(turn)),
      h("td", {}, a ? renderSide(a.reply, b?.reply ?? "", "left") : h("span", { class: "muted" }, "—")),
      h("td", {}, b ? renderSide(a?.reply ?? "", b.reply, "right") : h("span", { class: "muted" }, "—")));
  });
  const count = rows.filter((row) => row.dataset.changed === "true").length;
  return h("section", { class: `card${count ? " differs" : ""}`, id: "compare-replies", dataset: { changed: String(count > 0) } },
    h("h2", {}, "Replies (the last 20 turns each side keeps)", h("span", { class: `badge${count ? " changed" : ""}` }, count ? `${count} differ` : "same")),
    h("table", { class: "grid replies" }, rows));
}

export async function runCompare(conversation) {
  const { left, right } = compareChoice();
  const at = (point) => ({ at: point.seq, branch: point.branch });
  $("#compare-summary").textContent = "Comparing…";
  replace($("#compare-body"));
  let states;
  let difference;
  try {
    [states, difference] = await Promise.all([
      Promise.all([api(conversationPath(conversation, "state"), { params: at(left) }),
        api(conversationPath(conversation, "state"), { params: at(right) })]),
      api(conversationPath(conversation, "diff"), { params: {
        from: left.seq, to: right.seq, from_branch: left.branch, to_branch: right.branch } }),
    ]);
  } catch (error) {
    $("#compare-summary").textContent = "";
    showMessage(error.message);
    return;
  }
  const [a, b] = states;
  $("#compare-summary").textContent = `${difference.source} against ${difference.target}: ` +
    (difference.changed ? "they differ." : "nothing differs.");
  $("#compare-summary").dataset.changed = String(difference.changed);
  const beliefText = (belief) => `${belief.statement} (${Number(belief.confidence).toFixed(2)})`;
  const edgeText = (edge) => `${edge.src} —${edge.relation}→ ${edge.dst} (${Number(edge.confidence).toFixed(2)})`;
  replace($("#compare-body"),
    h("div", { class: "two heads" }, h("h3", {}, `${difference.source}`), h("h3", {}, `${difference.target}`)),
    pair("Narrative", "compare-narrative", difference.narrative_before ?? a.narrative ?? "", difference.narrative_after ?? b.narrative ?? ""),
    pair("Portrait", "compare-portrait", difference.portrait_before ?? a.portrait ?? "", difference.portrait_after ?? b.portrait ?? ""),
    persona(a, b),
    a.persona || b.persona ? episodes(difference.persona_changed?.episodes) : null,
    listOf("Beliefs", "compare-beliefs", difference.beliefs_added, difference.beliefs_removed, difference.beliefs_changed, beliefText),
    listOf("Edges", "compare-edges", difference.edges_added, difference.edges_removed, difference.edges_changed, edgeText),
    replies(a, b));
}

function persona(a, b) {
  if (!a.persona && !b.persona) return null;
  const scores = (values) => Object.entries(values || {}).map(([k, v]) => `${k} ${Number(v).toFixed(2)}`).join(", ");
  const text = (state) => state.persona ? ["interpretation", "appraisal", "plan"].map((name) =>
    `${name}: ${state.persona[name]?.text ?? "–"}`).join("\n") +
    `\nemotions: ${scores(state.persona.emotions)}\nrelationship: ${scores(state.persona.relationship)}` +
    `\nworking on: ${state.persona.active_hard_goal ?? "–"}\nsoft goals: ${scores(state.persona.soft_goals)}` : "";
  return pair("Persona", "compare-persona", text(a), text(b));
}

// The persona's episodes (what it remembers of each turn) added and removed between the two sides,
// from the diff's `persona_changed.episodes`; equal counts can still hold other episodes.
function episodes(change) {
  const text = (episode) => `${turnLabel(episode.turn)} (importance ${Number(episode.importance).toFixed(2)}): ${episode.text}`;
  if (!change) return listOf("Persona's episodes", "compare-episodes", [], [], [], text);
  return listOf(`Persona's episodes (${change.before} → ${change.after})`, "compare-episodes",
    change.added || [], change.removed || [], [], text);
}
