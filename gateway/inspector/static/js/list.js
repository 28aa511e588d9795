// The tenant's conversations: search by name, last activity, events, branches, mind.

import { api } from "./api.js";
import { $, ago, h, replace, when } from "./dom.js";

let conversations = [];

export async function showList(open) {
  const body = await api("/v1/conversations");
  conversations = body.conversations.sort((a, b) => b.updated_at - a.updated_at);
  render(open);
}

function render(open) {
  const needle = $("#search").value.trim().toLowerCase();
  const shown = conversations.filter((c) => c.id.toLowerCase().includes(needle));
  $("#list-count").textContent = `${shown.length} of ${conversations.length}`;
  const rows = shown.map((c) => h("tr", { dataset: { conversation: c.id }, tabindex: 0,
    onclick: () => open(c.id), onkeydown: (e) => { if (e.key === "Enter") open(c.id); } },
  h("td", {}, h("a", { href: `?conversation=${encodeURIComponent(c.id)}`, onclick: (e) => { e.preventDefault(); open(c.id); } }, c.id)),
  h("td", {}, h("span", { class: `badge mind-${c.mind || "mirror"}` }, c.mind || "mirror")),
  h("td", { class: "number" }, c.turns ?? "–"),
  h("td", { class: "number" }, c.events),
  h("td", {}, c.branches.join(", ")),
  h("td", { title: when(c.updated_at) }, ago(c.updated_at))));
  if (!rows.length) {
    rows.push(h("tr", {}, h("td", { colspan: 6, class: "muted" },
      conversations.length ? "No conversation matches." : "This tenant has no conversation yet: send a turn (mirror chat).")));
  }
  replace($("#conversations tbody"), rows);
  const table = $("#conversations");
  table.dataset.loads = String(Number(table.dataset.loads || 0) + 1); // how many answers it has shown
}

export function bindList(open) {
  $("#search").addEventListener("input", () => render(open));
}
