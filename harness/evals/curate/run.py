"""A whole CuRaTe run: every dialogue × mode × scenario through the gateway, judged, stored, reported.

Where the stack comes from: ``settings.url`` (a running ``mirror up``, with its token) or, with
none, an :class:`~mirror.stack.embedded.EmbeddedStack` started here on free ports in
``settings.stack_data`` with the Talker's ``max_tokens`` set to ``settings.max_tokens`` for every
mode, and stopped at the end. Against a running stack the stack's own setting applies (the
report says so). The judge is ``settings.judge``'s model, or a loopback simulator for ``sim``.

Each unit is its own conversation, ``<run>-<dialogue>-<mode>-s<scenario>`` (``-a2``, ``-a3``…
for later attempts): a unit already rated in ``<out>/curate.duckdb`` is skipped, one driven whose judge failed is
only judged again, any other is driven from its first turn under a fresh id (see :mod:`.store`). A conversation id the gateway
already knows (a run with another ``--out`` against the same stack) is not reused either.
``concurrency`` units run at once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import httpx

from mirror.cognition.errors import LLMError
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.harness.evals.curate.assembly import assemble
from mirror.harness.evals.curate.data import CurateData, CurateRow, load_data
from mirror.harness.evals.curate.drive import drive_dialogue
from mirror.harness.evals.curate.errors import CurateDriveError, CurateError
from mirror.harness.evals.curate.judge import rate
from mirror.harness.evals.curate.report import (
    accuracy_table,
    mode_totals,
    report_markdown,
    with_changes,
    write_plots,
)
from mirror.harness.evals.curate.settings import CurateSettings
from mirror.harness.evals.curate.store import LIVE_PROMPT_SET, ResultsStore
from mirror.harness.evals.curate.timing import HumanPacing

__all__ = ["Progress", "Target", "check_gateway", "judge_llm", "run_curate", "run_notes", "stack_target", "units"]

MAX_ATTEMPTS = 20
REQUEST_TIMEOUT_S = 60.0
Progress = Callable[[str, int, int], None]
"""``(event, done, total)``: ``start`` once (units already rated count as done), then ``unit`` per unit finished."""


@dataclass(frozen=True)
class Target:
    url: str
    token: str
    embedded: bool
    note: str


def units(data: CurateData, settings: CurateSettings) -> list[tuple[CurateRow, str, int]]:
    """The run's (dialogue, mode, scenario) units, dialogue by dialogue."""
    rows = data.dialogues[:settings.limit] if settings.limit else data.dialogues
    return [(row, mode, scenario) for row in rows for mode in settings.modes for scenario in settings.scenarios]


@contextmanager
def stack_target(settings: CurateSettings) -> Iterator[Target]:
    """The gateway to drive: the given one, or an embedded stack started (and stopped) here."""
    if settings.url is not None:
        yield Target(settings.url.rstrip("/"), settings.token or "", False,
                     f"a running stack at {settings.url}: its own Talker max_tokens applies; --max-tokens "
                     f"{settings.max_tokens} is only recorded")
        return
    from mirror.processes import free_port
    from mirror.stack.embedded import EmbeddedStack, StackSettings

    stack_data = settings.stack_data or settings.out_dir / "stack"
    stack = EmbeddedStack(StackSettings(data_dir=stack_data, llm=settings.llm, llm_model=settings.llm_model,
                                        llm_api_key=settings.llm_api_key, gateway_port=free_port(),
                                        nats_port=free_port(), sim_latency=settings.sim_latency,
                                        talker_max_tokens=settings.max_tokens)).start()
    try:
        yield Target(stack.url, stack.token, True, f"an embedded stack in {stack_data} (--llm {settings.llm}), "
                                                   f"the Talker's max_tokens {settings.max_tokens} in every mode")
    finally:
        stack.stop()


@contextmanager
def judge_llm(settings: CurateSettings) -> Iterator[LLMSettings]:
    """The judge's model: a loopback simulator for ``sim``, else the given URL."""
    if settings.judge != "sim":
        yield LLMSettings(base_url=settings.judge, model=settings.judge_model or "default", api_key=settings.judge_api_key,
                          timeout_s=300, structured_output=settings.judge_structured_output)  # type: ignore[arg-type]  # checked by CurateSettings
        return
    from mirror.sim.server import SimLLMServer, SimSettings

    with SimLLMServer(SimSettings()) as server:
        yield LLMSettings(base_url=server.base_url, model="mirror-sim")


def http_client(target: Target, concurrency: int) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4)
    return httpx.AsyncClient(base_url=target.url, headers={"Authorization": f"Bearer {target.token}"},
                             timeout=REQUEST_TIMEOUT_S, limits=limits)


async def check_gateway(client: httpx.AsyncClient, target: Target) -> None:
    """The gateway answers ``/healthz`` and takes the token, or a :class:`CurateError` saying which is wrong."""
    try:
        (await client.get("/healthz")).raise_for_status()
        (await client.get("/v1/conversations")).raise_for_status()
    except httpx.HTTPStatusError as exc:
        raise CurateError(f"the gateway at {target.url} answered HTTP {exc.response.status_code} to "
                          f"{exc.request.url.path}; check --token (or --stack-data)") from exc
    except httpx.HTTPError as exc:
        raise CurateError(f"the gateway at {target.url} did not answer ({type(exc).__name__}: {exc}); check --url "
                          "(or that `mirror up` runs for --stack-data)") from exc


async def is_known(client: httpx.AsyncClient, conversation: str) -> bool:
    """Whether the gateway already holds events of ``conversation`` (404: it does not)."""
    response = await client.get(f"/v1/conversations/{conversation}/events", params={"limit": 1})
    if response.status_code == 404:
        return False
    response.raise_for_status()
    return True


async def _unit(client: httpx.AsyncClient, judge: OpenAIChatClient, store: ResultsStore, data: CurateData,
                settings: CurateSettings, run_id: str, row: CurateRow, mode: str, scenario: int) -> str:
    assembled = assemble(row, data, scenario, settings.seed)
    base = f"{settings.run_name}-{row.dialogue_id}-{mode}-s{scenario}"
    key: dict[str, Any] = {"run_name": settings.run_name, "dialogue": row.dialogue_id, "mode": mode, "scenario": scenario,
           "prompt_set": LIVE_PROMPT_SET}
    previous = store.get(**key)
    if previous is not None and previous["status"] == "driven":  # driven before, the judge failed: judge it only
        return await _judge(judge, store, key, row.constraint, assembled.final_question, previous["final_answer"])
    for _ in range(MAX_ATTEMPTS):
        conversation = store.begin(**key, run_id=run_id, conversation_base=base, category=row.category,
                                   constraint=row.constraint, turns=assembled.turns, choices=assembled.choices())
        try:
            known = await is_known(client, conversation)
        except httpx.HTTPError as exc:
            store.finish(**key, status="failed", error=f"{type(exc).__name__}: {exc}")
            return "failed"
        if not known:
            break
        store.finish(**key, status="failed", error="the gateway already holds this conversation (a run with another "
                                                   "--out against the same stack?)")
    else:
        raise CurateError(f"{base}: {MAX_ATTEMPTS} conversation ids in a row are taken at the gateway; use another --run")
    try:
        pacing = HumanPacing(settings.seed, conversation, settings.time_scale) if settings.timing == "human" else None
        driven = await drive_dialogue(client, conversation, assembled.turns, mode, timing=settings.timing, pacing=pacing,
                                      memory=settings.memory)
    except (CurateDriveError, httpx.HTTPError) as exc:
        store.finish(**key, status="failed", error=f"{type(exc).__name__}: {exc}")
        return "failed"
    store.finish(**key, status="driven", final_answer=driven.final_answer, tokens_in=driven.tokens_in,
                 tokens_out=driven.tokens_out, talker_tokens_in=driven.talker_tokens_in,
                 talker_tokens_out=driven.talker_tokens_out, talker_llm_ms=round(driven.talker_llm_ms, 3),
                 model_ms=round(driven.model_ms, 3), talker_model=driven.talker_model,
                 paused_s=round(driven.paused_s, 3), error=None)
    return await _judge(judge, store, key, row.constraint, assembled.final_question, driven.final_answer)


async def _judge(judge: OpenAIChatClient, store: ResultsStore, key: dict[str, Any], constraint: str, question: str,
                 answer: str) -> str:
    """Rate a driven unit's final answer; a failed judge leaves it ``driven`` (a re-run judges it again)."""
    try:
        rating = await rate(judge, constraint, question, answer)
    except LLMError as exc:  # StructuredOutputError included: an answer that is not the rating
        store.finish(**key, error=f"the judge failed: {type(exc).__name__}: {exc}")
        return "failed"
    store.finish(**key, status="rated", rating=rating.rating, rationale=rating.rationale,
                 judge_provenance=rating.provenance, error=None)
    return "rated"


async def _drive_all(settings: CurateSettings, data: CurateData, store: ResultsStore, target: Target,
                     judge_settings: LLMSettings, run_id: str, progress: Progress) -> dict[str, int]:
    todo = units(data, settings)
    rated = {row.unit for row in store.rows(settings.run_name) if row["status"] == "rated"}
    pending = [unit for unit in todo if (unit[0].dialogue_id, unit[1], unit[2]) not in rated]
    counts = {"units": len(todo), "skipped": len(todo) - len(pending), "rated": 0, "failed": 0}
    done = counts["skipped"]
    progress("start", done, len(todo))
    slots = asyncio.Semaphore(settings.concurrency)
    judge = OpenAIChatClient(replace(judge_settings, max_concurrency=max(1, settings.concurrency)))

    async def one(row: CurateRow, mode: str, scenario: int) -> None:
        nonlocal done
        async with slots:
            outcome = await _unit(client, judge, store, data, settings, run_id, row, mode, scenario)
        counts[outcome] += 1
        done += 1
        progress("unit", done, len(todo))

    async with http_client(target, settings.concurrency) as client:
        try:
            await check_gateway(client, target)
            await asyncio.gather(*(one(*unit) for unit in pending))
        finally:
            await judge.aclose()
    return counts


def summarise(store: ResultsStore, settings: CurateSettings, notes: list[str]) -> dict[str, Any]:
    """Read the run's rated rows back, write ``report.md`` and the plots, and return the JSON summary."""
    rows = [row.values for row in store.rows(settings.run_name)]
    table = accuracy_table(rows)
    totals = mode_totals(rows)
    recorded = settings.recorded()
    (settings.out_dir / "report.md").write_text(report_markdown(table, totals, recorded, notes), encoding="utf-8")
    plots = [str(path) for path in write_plots(table, settings.out_dir)] if table else []
    return {
        "run_name": settings.run_name,
        "results": str(store.path),
        "report": str(settings.out_dir / "report.md"),
        "plots": plots,
        "accuracy": with_changes(table),
        "per_mode": totals,
        "rows": len(rows),
        "rated": sum(row["status"] == "rated" for row in rows),
        "failed": [{"conversation": row["conversation"], "error": row["error"]} for row in rows if row["status"] == "failed"],
        "abandoned": len(store.abandoned(settings.run_name)),
        "notes": notes,
    }


def run_notes(settings: CurateSettings, target: Target, judge_settings: LLMSettings, store: ResultsStore) -> list[str]:
    """What the report says about where the figures come from."""
    models = sorted({str(row["talker_model"]) for row in store.rows(settings.run_name) if row["talker_model"]})
    notes = [f"Stack: {target.note}.", f"Judge: {settings.judge} (model {judge_settings.model}).",
             f"Talker model(s), from the turns' provenance: {', '.join(models) or 'none yet'}."]
    if "mirror-sim" in models or settings.judge == "sim":
        notes.append("The simulator writes random prose and its judge is a word-overlap rule: these figures check the "
                     "pipeline and mean nothing as accuracy.")
    return notes


def run_curate(settings: CurateSettings, progress: Progress = lambda event, done, total: None) -> dict[str, Any]:
    """Run it (see the module docstring) and return the JSON summary; the report and plots are written to ``out_dir``."""
    data = load_data(settings.data_dir)
    store = ResultsStore(settings.out_dir).create()
    run_id = uuid.uuid4().hex[:12]
    started = time.monotonic()
    with judge_llm(settings) as judge_settings, stack_target(settings) as target:
        store.start_run(run_id, settings.run_name, settings.recorded() | {"stack": target.note,
                                                                           "judge_model": judge_settings.model})
        counts = asyncio.run(_drive_all(settings, data, store, target, judge_settings, run_id, progress))
        store.finish_run(run_id)
    summary = summarise(store, settings, run_notes(settings, target, judge_settings, store))
    return {**summary, "run_id": run_id, "this_run": counts, "seconds": round(time.monotonic() - started, 2),
            "stack_url": target.url}
