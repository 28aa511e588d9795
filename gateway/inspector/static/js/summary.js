// One line about an event, by its type: what the dialogue, the live feed and Why show of it.

import { clip, turnLabel } from "./dom.js";

const SAY = {
  turn: (p) => `“${clip(p.user_message, 60)}” → “${clip(p.reply, 80)}”`,
  monologue: (p) => `reasoning: ${clip(p.reasoning, 60)} · memory: ${clip(p.memory, 40)} · goal: ${clip(p.goal, 40)}`,
  narrative: (p) => clip(p.text, 140),
  belief: (p) => `${p.operation} ${p.belief_id}${p.statement ? `: ${clip(p.statement, 100)}` : ""}` +
    (typeof p.confidence === "number" ? ` (confidence ${p.confidence.toFixed(2)})` : ""),
  recall: (p) => `recalled ${(p.belief_ids || []).length} beliefs, ${(p.edges || []).length} edges for “${clip(p.query, 60)}”`,
  edge: (p) => `${p.operation || "assert"} ${p.src} —${p.relation}→ ${p.dst}`,
  memory_step: (p) => `memory for ${turnLabel(p.for_turn)}: ${p.candidates} candidates, ${p.beliefs} beliefs, ${p.edges} edges`,
  insight: (p) => clip(p.text, 140),
  reflection: (p) => `${p.accepted ? "accepted" : "rejected"} portrait${p.reason ? ` (${clip(p.reason, 60)})` : ""}: ` +
    clip(p.portrait, 90),
  thinker_failed: (p) => `${p.stage} failed (${p.error_type}, attempt ${p.attempt}): ${clip(p.message, 100)}`,
  fork: (p) => `branched from ${p.parent_branch}@${p.fork_seq}${p.reason ? `: ${clip(p.reason, 60)}` : ""}`,
  persona: (p) => `persona ${p.name} (${String(p.version).slice(0, 12)}), ${p.order}` +
    (p.user_name ? `, talking to ${p.user_name}` : ""),
  greeting: (p) => `greeting: ${clip(p.text, 130)}`,
  interpretation: (p) => clip(p.text, 140),
  retrieval: (p) => `retrieved ${(p.episode_turns || []).length} episodes` +
    `${(p.episode_turns || []).length ? ` (of ${(p.episode_turns).map((t) => turnLabel(t)).join(", ")})` : ""}` +
    `, ${(p.biography_entries || []).length} biography entries`,
  plan: (p) => clip(p.text, 140),
  appraisal: (p) => clip(p.text, 140),
  emotion: (p) => Object.entries(p.intensities || {}).map(([k, v]) => `${k} ${Number(v).toFixed(2)}`).join(", "),
  relationship: (p) => Object.entries(p.dimensions || {}).map(([k, v]) => `${k} ${Number(v).toFixed(2)}`).join(", "),
  goal: (p) => `hard goal ${p.active_hard_goal}${p.hard_goal_met ? " met" : ""}; ` +
    Object.entries(p.soft_goals || {}).map(([k, v]) => `${clip(k, 30)} ${Number(v).toFixed(2)}`).join(", "),
  episode: (p) => `importance ${Number(p.importance).toFixed(2)}: ${clip(p.text, 100)}`,
  instructions: (p) => (p.text ? `the client's instructions: “${clip(p.text, 120)}”` : "the client's instructions cleared"),
};

export function summarize(event) {
  const say = SAY[event.type];
  try {
    return say ? say(event.payload || {}) : clip(JSON.stringify(event.payload), 140);
  } catch {
    return clip(JSON.stringify(event.payload), 140);
  }
}

export const THINKING = new Set(["monologue", "narrative", "memory_step", "belief", "edge", "insight", "reflection",
  "emotion", "relationship", "goal", "episode"]);
export const FAILURE = "thinker_failed";
