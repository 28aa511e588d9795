// Start a recompute of this conversation with one prompt template edited (POST /v1/recompute),
// watch it (the job's status and the new branch's seq), and open the branch in Compare when done.

import { api, conversationPath } from "./api.js";
import { $, h, replace, showMessage } from "./dom.js";

let prompts = null;

function templates() {
  const all = [];
  for (const [name, text] of Object.entries(prompts.templates)) all.push({ field: "prompts", name, text });
  for (const [name, text] of Object.entries(prompts.persona?.templates || {})) all.push({ field: "persona_prompts", name, text });
  return all;
}

export async function openRecompute(conversation, { mind, fromSeq, onDone }) {
  const dialog = $("#recompute-dialog");
  try {
    prompts = prompts || await api("/v1/prompts");
  } catch (error) {
    showMessage(error.message);
    return;
  }
  const choices = templates().filter((t) => (mind === "persona") === (t.field === "persona_prompts"));
  const select = $("#recompute-template");
  replace(select, choices.map((t, index) => h("option", { value: index }, `${t.field === "persona_prompts" ? "persona/" : ""}${t.name}`)));
  const show = () => { $("#recompute-text").value = choices[Number(select.value)].text; };
  select.onchange = show;
  show();
  $("#recompute-from").value = fromSeq || 1;
  $("#recompute-progress").value = 0;
  $("#recompute-status").textContent = "";
  $("#recompute-start").disabled = false;
  $("#recompute-start").onclick = () => start(conversation, choices[Number(select.value)], onDone);
  dialog.showModal();
}

// A branch's last seq, read from where the previous round stopped: `events?branch=&after=` pages
// only the events written since (the cheapest route that gives a branch's seq; no state is folded).
// A branch with no event yet answers an empty page, not a 404.
async function branchSeq(conversation, branch, after, signal) {
  for (;;) {
    const page = await api(conversationPath(conversation, "events"), { params: { branch, after, limit: 1000 }, signal });
    if (page.events.length < 1000) return page.next_after;
    after = page.next_after;
  }
}

function pause(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => { clearTimeout(timer); resolve(); }, { once: true });
  });
}

async function start(conversation, template, onDone) {
  const text = $("#recompute-text").value;
  const status = $("#recompute-status");
  if (text === template.text) {
    status.textContent = "Edit the template first: an unchanged prompt set re-thinks to the same mind.";
    return;
  }
  $("#recompute-start").disabled = true;
  const dialog = $("#recompute-dialog");
  // Closing the dialog ends the watch (the job itself runs on; `GET /v1/recompute/{job}` still follows it).
  const watch = new AbortController();
  dialog.addEventListener("close", () => watch.abort(), { once: true });
  const { signal } = watch;
  const body = { [template.field]: { [template.name]: text }, conversations: [conversation],
    from_seq: Number($("#recompute-from").value) || 1, concurrency: 1 };
  let job;
  let mainHead;
  try {
    [job, { last_seq: mainHead }] = await Promise.all([api("/v1/recompute", { method: "POST", body, signal }),
      api(conversationPath(conversation), { signal })]);
  } catch (error) {
    if (!signal.aborted) status.textContent = error.message;
    $("#recompute-start").disabled = false;
    return;
  }
  dialog.dataset.watching = "true";
  try {
    await watchJob(conversation, job, mainHead, signal, onDone);
  } finally {
    delete dialog.dataset.watching;
  }
}

// Every 400 ms until the job ends or the dialog closes: the job's status, and how far its branch
// has come (its seq against main's head; a re-thought branch may end a little past main's).
async function watchJob(conversation, job, mainHead, signal, onDone) {
  const status = $("#recompute-status");
  const bar = $("#recompute-progress");
  bar.max = Math.max(1, mainHead);
  let seq = 0;
  while (!signal.aborted) {
    try {
      job = await api(`/v1/recompute/${job.job}`, { signal });
      if (job.branch) seq = await branchSeq(conversation, job.branch, seq, signal);
    } catch (error) {
      if (!signal.aborted) {
        status.textContent = error.message;
        $("#recompute-start").disabled = false;
      }
      return;
    }
    if (job.status === "done") {
      bar.value = bar.max;
      const failed = job.report?.failed ?? 0;
      if (failed) {
        status.textContent = `done, but it failed: ${JSON.stringify(job.report.failures ?? job.report.results)}`;
        return;
      }
      status.textContent = `done: branch ${job.branch} ends at seq ${seq} (main at seq ${mainHead})`;
      $("#recompute-dialog").close();
      onDone(job.branch);
      return;
    }
    if (job.status === "failed") {
      status.textContent = `failed: ${job.error}`;
      $("#recompute-start").disabled = false;
      return;
    }
    bar.value = Math.min(seq, bar.max);
    status.textContent = `${job.status}: branch ${job.branch ?? "(being made)"} at seq ${seq}` +
      (seq <= mainHead ? ` of about ${mainHead}` : ` (main ends at seq ${mainHead})`) +
      (job.total ? ` · ${job.done} of ${job.total} conversations` : "");
    await pause(400, signal);
  }
}
