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

async function start(conversation, template, onDone) {
  const text = $("#recompute-text").value;
  const status = $("#recompute-status");
  if (text === template.text) {
    status.textContent = "Edit the template first: an unchanged prompt set re-thinks to the same mind.";
    return;
  }
  $("#recompute-start").disabled = true;
  const body = { [template.field]: { [template.name]: text }, conversations: [conversation],
    from_seq: Number($("#recompute-from").value) || 1, concurrency: 1 };
  let job;
  try {
    job = await api("/v1/recompute", { method: "POST", body });
  } catch (error) {
    status.textContent = error.message;
    $("#recompute-start").disabled = false;
    return;
  }
  const mainHead = (await api(conversationPath(conversation, "state"))).seq;
  const bar = $("#recompute-progress");
  bar.max = mainHead;
  for (;;) {
    try {
      job = await api(`/v1/recompute/${job.job}`);
    } catch (error) {
      status.textContent = error.message;
      $("#recompute-start").disabled = false;
      return;
    }
    let seq = 0;
    try {
      seq = (await api(conversationPath(conversation, "state"), { params: { branch: job.branch } })).seq;
    } catch {
      // the branch has no event yet
    }
    bar.value = Math.min(seq, mainHead);
    status.textContent = `${job.status}: branch ${job.branch} at seq ${seq} of ${mainHead}` +
      (job.total ? ` · ${job.done} of ${job.total} conversations` : "");
    if (job.status === "done") {
      bar.value = bar.max;
      const failed = job.report?.failed ?? 0;
      if (failed) {
        status.textContent = `done, but it failed: ${JSON.stringify(job.report.failures ?? job.report.results)}`;
        return;
      }
      $("#recompute-dialog").close();
      onDone(job.branch);
      return;
    }
    if (job.status === "failed") {
      status.textContent = `failed: ${job.error}`;
      $("#recompute-start").disabled = false;
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
}
