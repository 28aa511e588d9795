// A forgotten conversation: what its tombstone says (who, which, when, how many events), shown as
// the conversation's page rather than as an error, since being forgotten is what it is now.

import { $, h, replace } from "./dom.js";

function when(seconds) {
  return seconds === null || seconds === undefined ? "not yet" : new Date(seconds * 1000).toISOString().replace(".000Z", "Z");
}

export function showTombstone(conversation, tombstone) {
  $("#tombstone-title").textContent = conversation;
  const rows = [
    ["tenant", tombstone.tenant],
    ["conversation", tombstone.conversation ?? conversation],
    ["status", tombstone.status ?? "forgotten"],
    ["forget asked", when(tombstone.requested_at)],
    ["erasure finished", when(tombstone.finished_at)],
    ["events erased", tombstone.events ?? "unknown"],
  ];
  replace($("#tombstone"), rows.flatMap(([name, value]) => [h("dt", {}, name), h("dd", { dataset: { field: name } }, String(value))]));
}
