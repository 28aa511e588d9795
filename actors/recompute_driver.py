"""Recompute at scale: conversations re-thought as Ray tasks, with bounded LLM concurrency.

The driver (the gateway serving ``POST /v1/recompute``, or a benchmark) deals the tenant's
conversations to ceil(C / MAX_PER_TASK) Ray generator tasks; each runs its share on an asyncio
loop with a fixed number in flight (the shares add up to at most ``concurrency``), starts the next
as one finishes, and yields each result as it is done; progress arrives per conversation. A
conversation may have two chat calls in flight at once (a turn's memory step runs beside its
thinking), so each task's chat client holds at most its share of calls in flight: at most
``concurrency`` chat calls are in flight across the cluster. (Embedding calls, to the embedding
model, go through the embedder's own client.) Tasks ask for no CPU: they wait on the model, not
on a core.

Interrupted runs resume: each conversation's branch is named from the plan, and
:func:`~mirror.replay.recompute.recompute_conversation` continues a half-done branch instead of
starting another. A run that dies with its driver is simply started again.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from string import Template
from typing import Any, NamedTuple, cast

import ray
from ray import ObjectRefGenerator

from mirror.actors.clients import memory_embedder
from mirror.actors.results import RecomputeFailure, RecomputeStatus
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.persona.prompting import PERSONA_TEMPLATES, default_persona_prompts
from mirror.cognition.prompts import TEMPLATES, PromptSet
from mirror.events.ids import StreamKey, validate_identifier
from mirror.replay import History, Recomputation, RecomputeError, RecomputePlan, recompute_conversation
from mirror.replay.diff import diff_lines

try:
    import uvloop
    HAVE_UVLOOP = True
except ImportError:  # a dependency on POSIX only (pyproject.toml)
    HAVE_UVLOOP = False

MAX_PER_TASK = 8
CALLS_PER_CONVERSATION = 2
"""The most chat calls one conversation has in flight: a turn's thinking and its memory step."""

ConversationResult = Recomputation | RecomputeFailure
"""What a recompute task yields per conversation."""


@dataclass(frozen=True)
class RecomputeJob:
    """What a recompute run covers; ``conversations`` empty means all of the tenant's."""

    tenant: str
    plan: RecomputePlan
    conversations: tuple[str, ...] = ()
    concurrency: int = 8

    def __post_init__(self) -> None:
        validate_identifier("tenant", self.tenant)
        for conversation in self.conversations:
            validate_identifier("conversation", conversation)
        if not 1 <= self.concurrency <= 1024:
            raise RecomputeError(f"concurrency must be 1..1024, got {self.concurrency}")


@dataclass
class RecomputeProgress:
    total: int = 0
    done: int = 0
    failed: int = 0
    results: list[ConversationResult] = field(default_factory=list)


async def _conversations(runtime: RuntimeSettings, job: RecomputeJob) -> list[StreamKey]:
    connections = await runtime.infrastructure.connect(name="mirror-recompute")
    try:
        known = {summary.conversation for summary in await connections.log(job.tenant).conversations(job.tenant)}
    finally:
        await connections.close()
    wanted = job.conversations or tuple(sorted(known))
    unknown = [conversation for conversation in wanted if conversation not in known]
    if unknown:
        raise RecomputeError(f"no conversation {', '.join(map(repr, unknown))} for tenant {job.tenant!r}")
    return [StreamKey(job.tenant, conversation) for conversation in wanted]


async def _recompute_slice(
    runtime: RuntimeSettings, plan: RecomputePlan, keys: Sequence[StreamKey], in_flight: int, calls: int,
    deliver: Callable[[ConversationResult], None],
) -> None:
    connections = await runtime.infrastructure.connect(name="mirror-recompute")
    bus = connections.bus
    llm = OpenAIChatClient(task_llm_settings(runtime.llm, calls))
    embedder = memory_embedder(runtime)

    async def acknowledged(key: StreamKey) -> int | None:
        return (await bus.head(key)).last_seq

    # Everything the bus acknowledged is re-thought, committed to the log yet or not.
    histories: dict[str, History] = {}

    def history_of(key: StreamKey) -> History:
        """The reader of the shard that holds the key's tenant."""
        shard = runtime.shard_of(key.tenant)
        if shard not in histories:
            shard_log = connections.log(key.tenant)
            histories[shard] = History(shard_log, snapshots=shard_log, stream_head=acknowledged)
        return histories[shard]

    slots = asyncio.Semaphore(in_flight)

    async def one(key: StreamKey) -> None:
        async with slots:
            result: ConversationResult
            try:
                result = await recompute_conversation(
                    key, plan, history=history_of(key), bus=bus, live=llm, embedder=embedder,
                )
            except Exception as exc:  # one conversation's failure is reported, the others go on
                result = RecomputeFailure(key.conversation, plan.branch_name, f"{type(exc).__name__}: {exc}")
        deliver(result)

    try:
        await asyncio.gather(*(one(key) for key in keys))
    finally:
        await llm.aclose()
        if embedder is not None:
            await embedder.aclose()
        await connections.close()


def task_llm_settings(llm: LLMSettings, calls: int) -> LLMSettings:
    """The chat client of a task allowed ``calls`` chat calls in flight. A conversation may have
    two (its thinking and its memory step), so the client, not the number of conversations going,
    keeps the task within its share of C."""
    return replace(llm, max_concurrency=min(llm.max_concurrency, calls))


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed (a dependency on POSIX): a task's loop carries up to MAX_PER_TASK
    conversations' model calls and appends, and is busy enough that it shows — efficiency at the
    default bench went from 0.78–0.81 to 0.82–0.84 (three interleaved pairs)."""
    if not HAVE_UVLOOP:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


@ray.remote(num_cpus=0, max_retries=0)
def recompute_slice(
    runtime: RuntimeSettings, plan: RecomputePlan, keys: list[StreamKey], in_flight: int, calls: int
) -> Iterator[ConversationResult]:
    """One Ray generator task: re-think ``keys``, ``in_flight`` at a time with at most ``calls``
    chat calls in flight, yielding each result when done.

    The conversations run on an asyncio loop in a thread, so they go on while Ray ships the
    results already yielded; the caller sees progress per conversation, not per task.
    """
    done: queue.Queue[ConversationResult | BaseException] = queue.Queue()

    def run() -> None:
        try:
            with asyncio.Runner(loop_factory=_new_loop) as runner:
                runner.run(_recompute_slice(runtime, plan, keys, in_flight, calls, done.put))
        except BaseException as exc:  # handed to the generator, which raises it to the caller
            done.put(exc)

    thread = threading.Thread(target=run, name="recompute-slice", daemon=True)
    thread.start()
    for _ in keys:
        item = done.get()
        if isinstance(item, BaseException):
            raise item
        yield item
    thread.join()
    while not done.empty():  # the loop's own failure after the last conversation (closing)
        item = done.get()
        if isinstance(item, BaseException):
            raise item


class Slice(NamedTuple):
    """One task's part of a job: its conversations, how many it keeps going at once, and how many
    chat calls it may have in flight (its share of C)."""

    keys: list[StreamKey]
    in_flight: int
    calls: int


def plan_slices(keys: Sequence[StreamKey], concurrency: int) -> list[Slice]:
    """``keys`` dealt round robin to ceil(C / MAX_PER_TASK) tasks (at most one per key), each with
    its share of C: as chat calls in flight, at most CALLS_PER_CONVERSATION per conversation it
    keeps going, and as conversations going, at most MAX_PER_TASK and as many as it has."""
    if not keys:
        return []
    tasks = min(len(keys), -(-concurrency // MAX_PER_TASK))
    slices = []
    for index in range(tasks):
        part = list(keys[index::tasks])
        share = concurrency // tasks + (1 if index < concurrency % tasks else 0)
        in_flight = min(share, MAX_PER_TASK, len(part))
        slices.append(Slice(part, in_flight, min(share, CALLS_PER_CONVERSATION * in_flight)))
    return slices


def start_slice(
    runtime: RuntimeSettings, plan: RecomputePlan, keys: list[StreamKey], in_flight: int, calls: int | None = None,
) -> ObjectRefGenerator:
    """``recompute_slice.remote(...)``: the stream of one generator task's results (``calls``:
    ``in_flight`` unless given).

    Ray hands a generator task's caller an :class:`ray.ObjectRefGenerator`, whose refs arrive
    as the task yields; its typed overloads say ``ObjectRef[Iterator[...]]`` instead.
    """
    stream = recompute_slice.remote(runtime, plan, keys, in_flight, in_flight if calls is None else calls)
    if not isinstance(stream, ObjectRefGenerator):
        raise TypeError(f"a Ray generator task returned {type(stream).__name__}, not an ObjectRefGenerator")
    return stream


def run_recompute(
    runtime: RuntimeSettings, job: RecomputeJob, *, on_progress: Callable[[RecomputeProgress], None] | None = None
) -> dict[str, Any]:
    """Run ``job`` on the Ray cluster this process is connected to; returns the report.

    A few long generator tasks (each keeping up to MAX_PER_TASK conversations in flight and
    starting the next as one finishes) rather than many short tasks: no task start-up or
    slowest-member wait per group, and progress still arrives conversation by conversation.
    """
    started = time.perf_counter()
    keys = asyncio.run(_conversations(runtime, job))
    progress = RecomputeProgress(total=len(keys))
    if on_progress:
        on_progress(progress)
    streams = [start_slice(runtime, job.plan, part.keys, part.in_flight, part.calls)
               for part in plan_slices(keys, job.concurrency)]
    while streams:
        ready, _ = ray.wait(streams, num_returns=1)
        for stream in cast(list[ObjectRefGenerator], ready):  # ray.wait hands back the waitables it was given
            try:
                result: ConversationResult = ray.get(next(stream))
            except StopIteration:
                streams.remove(stream)
                continue
            progress.results.append(result)
            progress.done += 1
            progress.failed += 1 if result.error else 0
            if on_progress:
                on_progress(progress)
    return report(job, progress, time.perf_counter() - started)


@ray.remote(num_cpus=0, max_restarts=0, max_concurrency=4)  # type: ignore[call-overload]  # Ray's typed overloads omit actor options such as max_concurrency
class RecomputeDriver:
    """One recompute job's driver, as a named Ray actor so any gateway can follow it.

    ``run`` drives the tasks; ``status`` answers meanwhile (a threaded actor). If the driver's
    process dies its tasks die with it, and the job is started again to resume.
    """

    def __init__(self, runtime: RuntimeSettings, job: RecomputeJob, job_id: str) -> None:
        self.runtime, self.job = runtime, job
        self.state = RecomputeStatus(
            job=job_id, status="running", branch=job.plan.branch_name, prompt_set=job.plan.prompts.version,
        )

    def _progress(self, progress: RecomputeProgress) -> None:
        self.state = replace(self.state, done=progress.done, total=progress.total, failed=progress.failed)

    def run(self) -> RecomputeStatus:
        try:
            report_data = run_recompute(self.runtime, self.job, on_progress=self._progress)
            self.state = replace(self.state, report=report_data, status="done")
        except Exception as exc:  # reported through the status, which is what callers read
            self.state = replace(self.state, status="failed", error=f"{type(exc).__name__}: {exc}")
        return self.state

    def status(self) -> RecomputeStatus:
        return self.state

    def pid(self) -> int:
        return os.getpid()


def driver_name(tenant: str, job_id: str) -> str:
    return f"recompute/{tenant}/{job_id}"


def report(job: RecomputeJob, progress: RecomputeProgress, seconds: float) -> dict[str, Any]:
    """The job's report, as the JSON document the API and ``mirror replay recompute`` show."""
    results = [result.as_dict() for result in sorted(progress.results, key=_conversation_of)]
    return {
        "tenant": job.tenant,
        "branch": job.plan.branch_name,
        "prompt_set": job.plan.prompts.version,
        "persona_prompt_set": None if job.plan.persona_prompts is None else job.plan.persona_prompts.version,
        "from_seq": job.plan.from_seq,
        "mode": job.plan.mode,
        "counterfactual": job.plan.counterfactual,
        "conversations": progress.total,
        "completed": progress.done - progress.failed,
        "failed": progress.failed,
        "model_calls": sum(result.get("model_calls", 0) for result in results),
        "recorded_answers": sum(result.get("recorded_answers", 0) for result in results),
        "events_written": sum(result.get("events_written", 0) for result in results),
        "seconds": round(seconds, 3),
        "results": results,
    }


def _conversation_of(result: ConversationResult) -> str:
    return result.conversation if isinstance(result, RecomputeFailure) else result.key.conversation


def summary(report_data: dict[str, Any]) -> str:
    """The report as a person reads it: one block per conversation."""
    sets = f"prompt set {report_data['prompt_set']}"
    if report_data.get("persona_prompt_set"):  # a persona conversation runs on the persona set
        sets += f", persona prompt set {report_data['persona_prompt_set']}"
    lines = [
        f"recompute of {report_data['conversations']} conversation(s) of {report_data['tenant']!r} on branch "
        f"{report_data['branch']} ({sets}): {report_data['completed']} done, "
        f"{report_data['failed']} failed, {report_data['model_calls']} model calls, "
        f"{report_data['recorded_answers']} answers reused, {report_data['seconds']} s",
    ]
    for result in report_data["results"]:
        if result.get("error"):
            lines.append(f"- {result['conversation']}: FAILED {result['error']}")
            continue
        lines.append(f"- {result['conversation']}: {rethought(result)}")
        change = result.get("diff")
        if change:  # the branch's head against its parent's, as `mirror replay diff --to-branch` shows it
            lines.extend(f"  {line}" for line in diff_lines(change, narrative_lines=SHOWN_NARRATIVE_LINES))
        for reply in result.get("replies") or ():
            if reply["recorded"] != reply["regenerated"]:
                lines.append(f"    reply at seq {reply['seq']}: {reply['recorded'][:80]!r} → {reply['regenerated'][:80]!r}")
    return "\n".join(lines)


SHOWN_NARRATIVE_LINES = 40
"""Lines of a conversation's narrative diff the report's summary shows (the diff has them all)."""


def rethought(result: dict[str, Any]) -> str:
    """What a conversation's recompute did: how many turns it re-thought now, and from where.

    A run that found its branch already complete wrote nothing: it says so, rather than counting
    the turns an earlier run re-thought. A resumed run counts the turns it re-thought itself."""
    turns, resumed, written = result["turns"], result["resumed_at_turn"], result["events_written"]
    if written == 0:
        return f"nothing re-thought: branch {result['branch']} was already complete ({turns} turn(s))"
    if resumed and resumed >= turns:
        return (f"no turn re-thought: all {turns} were on the branch; finished the thinking an earlier run left "
                f"({written} event(s) written)")
    if resumed:
        return (f"{turns - resumed} of {turns} turn(s) re-thought, resumed after the {resumed} an earlier run "
                f"did ({written} event(s) written)")
    return f"{turns} turn(s) re-thought ({written} event(s) written)"


def prompt_set_with(overrides: dict[str, str], base: PromptSet) -> PromptSet:
    """``base`` with some templates replaced (the API's way to send a changed prompt set)."""
    unknown = sorted(set(overrides) - set(TEMPLATES))
    if unknown:
        raise RecomputeError(f"unknown prompt template(s) {', '.join(unknown)}; templates are {', '.join(TEMPLATES)}")
    for name, text in overrides.items():
        if not isinstance(text, str) or not text.strip():
            raise RecomputeError(f"prompt template {name} is empty")
        if not Template(text).is_valid():
            raise RecomputeError(f"prompt template {name} has a malformed $placeholder")
    if not overrides:
        return base
    return PromptSet("custom", {**base.templates, **overrides})


def persona_prompt_set_with(overrides: dict[str, str], base: PromptSet | None = None) -> PromptSet | None:
    """The persona mind's prompt set with some templates replaced (``None`` when none is changed: the plan
    then keeps the built-in set, and the branch the name it always had). ``base``: the built-in
    persona set unless given. An unknown or empty template is a :class:`RecomputeError`."""
    if not overrides:
        return None
    unknown = sorted(set(overrides) - set(PERSONA_TEMPLATES))
    if unknown:
        raise RecomputeError(f"unknown persona template(s) {', '.join(unknown)}; persona templates are "
                             f"{', '.join(PERSONA_TEMPLATES)}")
    for name, text in overrides.items():
        if not isinstance(text, str) or not text.strip():
            raise RecomputeError(f"persona template {name} is empty")
        if not Template(text).is_valid():
            raise RecomputeError(f"persona template {name} has a malformed $placeholder")
    base = base or default_persona_prompts()
    templates = {**base.templates, **overrides}
    # The built-in texts sent back (a directory `mirror prompts export` wrote, persona/ untouched) change nothing.
    return None if templates == dict(base.templates) else PromptSet(base.name, templates)


__all__ = ["ConversationResult", "RecomputeDriver", "driver_name", "RecomputeJob", "RecomputeProgress", "prompt_set_with", "persona_prompt_set_with", "plan_slices", "rethought", "recompute_slice", "report", "start_slice", "run_recompute", "summary", "task_llm_settings", "CALLS_PER_CONVERSATION", "MAX_PER_TASK", "Slice"]
