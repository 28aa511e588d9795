// The inspector's start: the token, the views and the address bar.
//   /inspector                                  the tenant's conversations
//   /inspector?conversation=ID[&branch=B][&at=SEQ]   one conversation at one event
//   /inspector?conversation=ID&compare=LEFT,RIGHT    two points side by side (each BRANCH@SEQ or BRANCH)
//   /inspector#token=…                          log in (the fragment never reaches the server)

import { conversationSummary, forgetToken, setToken, takeTokenFromFragment, token } from "./api.js";
import { $, clearMessage, h, replace, showMessage } from "./dom.js";
import { bindList, showList } from "./list.js";
import { current, leaveConversation, openConversation, select } from "./conversation.js";
import { compareChoice, runCompare, setupCompare } from "./compare.js";
import { openRecompute } from "./recompute.js";
import { showTombstone } from "./tombstone.js";
import { bindWhy } from "./why.js";

const VIEWS = ["#welcome", "#list-view", "#conversation-view", "#compare-view", "#tombstone-view"];

function show(view) {
  for (const id of VIEWS) $(id).hidden = id !== view;
  document.body.dataset.view = view.slice(1);
}

function params() {
  return new URLSearchParams(location.search);
}

function navigate(query, { replaceOnly = false } = {}) {
  const search = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== null && v !== undefined && v !== ""));
  const target = `${location.pathname}${search.toString() ? `?${search}` : ""}`;
  if (replaceOnly) history.replaceState(null, "", target);
  else history.pushState(null, "", target);
  return route();
}

function point(text) {
  const [branch, seq] = String(text || "main").split("@");
  return { branch: branch || "main", seq: seq ? Number(seq) : null, text: String(text || "main") };
}

// What is wrong with one side of `compare=` (a branch the conversation lacks, a seq that is no
// whole number), said rather than replaced by another side; a seq past the end is the API's 404.
function pointProblem(p, branches) {
  if (!branches.includes(p.branch)) return `the conversation has no branch ${JSON.stringify(p.branch)} (its branches: ${branches.join(", ")})`;
  if (p.seq !== null && !(Number.isInteger(p.seq) && p.seq >= 1)) return `${JSON.stringify(p.text)} has no valid seq (seqs are whole numbers from 1)`;
  return null;
}

function crumbs(conversation, extra) {
  const parts = [h("a", { href: "/inspector", onclick: (e) => { e.preventDefault(); navigate({}); } }, "conversations")];
  if (conversation) {
    parts.push(" / ", h("a", { href: `?conversation=${encodeURIComponent(conversation)}`,
      onclick: (e) => { e.preventDefault(); navigate({ conversation }); } }, conversation));
  }
  if (extra) parts.push(" / ", extra);
  replace($("#crumbs"), parts);
}

async function route() {
  clearMessage();
  const query = params();
  const conversation = query.get("conversation");
  $("#token").placeholder = token() ? "a token is kept for this tab" : "paste a tenant token";
  if (!token()) {
    leaveConversation();
    show("#welcome");
    crumbs(null);
    $("#token").focus();
    return;
  }
  try {
    if (!conversation) {
      leaveConversation();
      show("#list-view");
      crumbs(null);
      await showList((id) => navigate({ conversation: id }));
    } else if (query.has("compare")) {
      leaveConversation();
      const sides = query.get("compare").split(",");
      const [left, right] = [point(sides[0]), point(sides[1])];
      show("#compare-view");
      crumbs(conversation, "compare");
      const { branches } = await conversationSummary(conversation);
      setupCompare({ branches, left, right });
      const wrong = [left, right].map((p) => pointProblem(p, branches)).filter(Boolean);
      if (wrong.length) showMessage(`compare=${query.get("compare")}: ${wrong.join("; ")}. Choose both sides above and press Compare.`);
      else await runCompare(conversation);
    } else {
      show("#conversation-view");
      crumbs(conversation);
      const at = query.get("at");
      await openConversation(conversation, {
        branch: query.get("branch") || "main", at: at ? Number(at) : null,
        onChange: (now) => navigateQuietly(now),
      });
    }
  } catch (error) {
    if (error.status === 410 && error.tombstone) {  // forgotten: its tombstone is the page
      leaveConversation();
      show("#tombstone-view");
      showTombstone(conversation, error.tombstone);
      return;
    }
    showMessage(error.message);
    if (error.status === 401) {
      show("#welcome");
      $("#token").focus();
    }
  }
}

function navigateQuietly(now) {
  const query = { conversation: now.id, branch: now.branch === "main" ? null : now.branch, at: now.seq === now.lastSeq ? null : now.seq };
  const search = new URLSearchParams(Object.entries(query).filter(([, v]) => v !== null));
  history.replaceState(null, "", `${location.pathname}?${search}`);
}

function openCompare(left, right) {
  const text = (p) => `${p.branch}${p.seq ? `@${p.seq}` : ""}`;
  return navigate({ conversation: current().id || params().get("conversation"), compare: `${text(left)},${text(right)}` });
}

function bind() {
  $("#login").addEventListener("submit", (e) => {
    e.preventDefault();
    const value = $("#token").value.trim();
    if (!value) {
      showMessage("Enter a tenant token first.");
      return;
    }
    setToken(value);
    $("#token").value = "";
    route();
  });
  $("#token-forget").addEventListener("click", () => {
    forgetToken();
    route();
  });
  bindList((id) => navigate({ conversation: id }));
  $("#list-refresh").addEventListener("click", () => route());
  let moving = null;
  $("#timeline").addEventListener("input", (e) => {
    clearTimeout(moving);
    const seq = Number(e.target.value);
    $("#seq").textContent = seq;
    moving = setTimeout(() => select(seq), 120);
  });
  $("#seq-prev").addEventListener("click", () => select(current().seq - 1));
  $("#seq-next").addEventListener("click", () => select(current().seq + 1));
  $("#seq-first").addEventListener("click", () => select(1));
  $("#seq-last-button").addEventListener("click", () => select(current().lastSeq));
  $("#strip").addEventListener("click", (e) => { if (e.target.dataset.seq) select(Number(e.target.dataset.seq)); });
  $("#follow").addEventListener("change", (e) => { if (e.target.checked) select(current().lastSeq); });
  $("#branch").addEventListener("change", (e) => navigate({ conversation: current().id, branch: e.target.value === "main" ? null : e.target.value }));
  $("#compare-open").addEventListener("click", () => {
    const now = current();
    const other = now.branches.filter((b) => b !== "main").pop();
    if (now.branch !== "main") openCompare({ branch: "main", seq: null }, { branch: now.branch, seq: null });
    else if (other) openCompare({ branch: "main", seq: null }, { branch: other, seq: null });
    else openCompare({ branch: "main", seq: Math.max(1, now.seq - 1) }, { branch: "main", seq: now.seq });
  });
  $("#compare-run").addEventListener("click", () => {
    const { left, right } = compareChoice();
    openCompare(left, right);
  });
  $("#compare-back").addEventListener("click", () => navigate({ conversation: params().get("conversation") }));
  $("#recompute-open").addEventListener("click", () => {
    const now = current();
    openRecompute(now.id, { mind: now.mind, fromSeq: 1, onDone: (branch) => openCompare({ branch: "main", seq: null }, { branch, seq: null }) });
  });
  window.addEventListener("popstate", () => route());
  bindWhy();
}

takeTokenFromFragment();
bind();
route();
