"""``--compare-prompts DIR``: the same conversations recomputed with a changed prompt set, judged again.

The ``.md`` files of DIR replace the served prompt set's templates of the same name (the rest
stay; see ``cognition/prompt_sets/default/`` for the names). One ``POST /v1/recompute?wait=true``
covers the run's rated conversations with ``counterfactual: true``, so the Talker answers every
turn again with the changed prompts on a branch (``main`` is never written); each conversation's
final answer is then read from that branch (``GET …/state?branch=…``, its last recent turn),
judged like the originals and stored under the recompute's prompt-set version. The comparison
is the accuracy before → after per scenario and mode, and how many ratings changed.

Resumable as the run is: a conversation already rated under that prompt-set version is not
judged again, and recompute itself continues half-done branches.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from mirror.cognition.errors import LLMError
from mirror.cognition.openai_client import OpenAIChatClient
from mirror.harness.evals.curate.errors import CurateError, CurateOptionError
from mirror.harness.evals.curate.judge import rate
from mirror.harness.evals.curate.report import accuracy_table, comparison_markdown, with_changes
from mirror.harness.evals.curate.run import (
    Target,
    check_gateway,
    http_client,
    judge_llm,
    run_notes,
    stack_target,
    summarise,
)
from mirror.harness.evals.curate.settings import CurateSettings
from mirror.harness.evals.curate.store import LIVE_PROMPT_SET, ResultsStore

__all__ = ["prompt_files", "run_compare"]

RECOMPUTE_TIMEOUT_S = 3600.0


def prompt_files(directory: Path) -> dict[str, str]:
    """``{file name: text}`` of the ``.md`` files in ``directory``; checked against the template names."""
    from mirror.cognition.prompts import TEMPLATES

    directory = Path(directory)
    if not directory.is_dir():
        raise CurateOptionError(f"--compare-prompts {directory}: no such directory")
    prompts = {path.name: path.read_text(encoding="utf-8") for path in sorted(directory.glob("*.md"))}
    if not prompts:
        raise CurateOptionError(f"--compare-prompts {directory}: no .md file in it; name them as the templates are "
                                f"({', '.join(TEMPLATES)})")
    unknown = sorted(set(prompts) - set(TEMPLATES))
    if unknown:
        raise CurateOptionError(f"--compare-prompts {directory}: {', '.join(unknown)} is not a prompt template; "
                                f"the templates are {', '.join(TEMPLATES)}")
    return prompts


async def _recompute(client: httpx.AsyncClient, prompts: dict[str, str], conversations: list[str]) -> dict[str, Any]:
    response = await client.post("/v1/recompute", params={"wait": "true"}, timeout=RECOMPUTE_TIMEOUT_S,
                                 json={"prompts": prompts, "conversations": conversations, "counterfactual": True})
    if response.status_code not in (200, 202):
        raise CurateError(f"POST /v1/recompute answered HTTP {response.status_code}: {response.text[:300]}")
    return response.json()


async def _final_reply(client: httpx.AsyncClient, conversation: str, branch: str) -> str:
    response = await client.get(f"/v1/conversations/{conversation}/state", params={"branch": branch})
    response.raise_for_status()
    recent = response.json()["recent_turns"]
    if not recent:
        raise CurateError(f"conversation {conversation} has no turn on branch {branch}")
    return str(recent[-1]["reply"])


async def _compare(settings: CurateSettings, store: ResultsStore, target: Target, judge_settings: Any,
                   prompts: dict[str, str]) -> dict[str, Any]:
    originals = [row.values for row in store.rows(settings.run_name, LIVE_PROMPT_SET) if row["status"] == "rated"]
    if not originals:
        raise CurateError(f"run {settings.run_name!r} in {store.path} has no rated dialogue to compare; run it first")
    judge = OpenAIChatClient(judge_settings)
    async with http_client(target, settings.concurrency) as client:
        try:
            await check_gateway(client, target)
            status = await _recompute(client, prompts, [row["conversation"] for row in originals])
            report = status.get("report") or {}
            branch, version = status["branch"], status["prompt_set"]
            failed = {result["conversation"]: result.get("error") for result in report.get("results", ()) if result.get("error")}
            done = {row.unit for row in store.rows(settings.run_name, version) if row["status"] == "rated"}
            slots = asyncio.Semaphore(settings.concurrency)

            async def one(row: dict[str, Any]) -> None:
                key: dict[str, Any] = {"run_name": settings.run_name, "dialogue": row["dialogue"], "mode": row["mode"],
                       "scenario": row["scenario"], "prompt_set": version}
                if (row["dialogue"], row["mode"], int(row["scenario"])) in done:
                    return
                async with slots:
                    store.begin(**key, run_id=status["job"], conversation_base=row["conversation"], branch=branch,
                                category=row["category"], constraint=row["constraint_text"], turns=row["turns"],
                                choices=row["choices"])
                    if row["conversation"] in failed:
                        store.finish(**key, status="failed", error=f"recompute failed: {failed[row['conversation']]}")
                        return
                    try:
                        answer = await _final_reply(client, row["conversation"], branch)
                        rating = await rate(judge, row["constraint_text"], row["final_question"], answer)
                    except (CurateError, LLMError, httpx.HTTPError) as exc:
                        store.finish(**key, status="failed", error=f"{type(exc).__name__}: {exc}")
                        return
                    store.finish(**key, status="rated", final_answer=answer, rating=rating.rating,
                                 rationale=rating.rationale, judge_provenance=rating.provenance)

            await asyncio.gather(*(one(row) for row in originals))
        finally:
            await judge.aclose()
    return {"branch": branch, "prompt_set": version, "job": status["job"], "recompute_seconds": report.get("seconds"),
            "recompute_failed": len(failed)}


def run_compare(settings: CurateSettings, prompts_dir: Path) -> dict[str, Any]:
    """Recompute the run's conversations with ``prompts_dir``'s templates, judge, store, and report the difference."""
    prompts = prompt_files(prompts_dir)
    store = ResultsStore(settings.out_dir).create()
    with judge_llm(settings) as judge_settings, stack_target(settings) as target:
        recompute = asyncio.run(_compare(settings, store, target, judge_settings, prompts))
        notes = run_notes(settings, target, judge_settings, store)
    before_rows = {row.unit: row.values for row in store.rows(settings.run_name, LIVE_PROMPT_SET) if row["status"] == "rated"}
    after_rows = {row.unit: row.values for row in store.rows(settings.run_name, recompute["prompt_set"])
                  if row["status"] == "rated"}
    compared = sorted(set(before_rows) & set(after_rows))
    changed = [{"dialogue": unit[0], "mode": unit[1], "scenario": unit[2], "conversation": before_rows[unit]["conversation"],
                "before": before_rows[unit]["rating"], "after": after_rows[unit]["rating"]}
               for unit in compared if before_rows[unit]["rating"] != after_rows[unit]["rating"]]
    before = accuracy_table(before_rows[unit] for unit in compared)
    after = accuracy_table(after_rows[unit] for unit in compared)
    section = comparison_markdown(before, after, recompute["prompt_set"], len(changed), len(compared), sorted(prompts))
    summary = summarise(store, settings, notes)
    report_path = settings.out_dir / "report.md"
    report_path.write_text(report_path.read_text(encoding="utf-8") + "\n" + section, encoding="utf-8")
    (settings.out_dir / f"comparison-{recompute['prompt_set']}.md").write_text(section, encoding="utf-8")
    return {**summary, "comparison": {**recompute, "prompt_files": sorted(prompts), "compared": len(compared),
                                      "ratings_changed": len(changed), "changed": changed,
                                      "accuracy_before": with_changes(before), "accuracy_after": with_changes(after)}}
