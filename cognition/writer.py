"""The conversation writer: the one place that drives the pipeline over ports.

A conversation's facts are written in one way wherever they are written: events are built from
the current state, appended fenced to the bus, folded into the state; and after a turn the
Thinker runs step after step until the newest turn is thought through (a ``thinker_failed``
step is tried again, up to ``attempts`` times in a row for one turn; a step the fair share shed
— :class:`~mirror.cognition.errors.ThinkingShed`, its backlog full — is recorded as such and the
turn's remaining stages are skipped at once: retrying into a full backlog would only add load). The live conversation
(:mod:`mirror.actors.conversation`) and recompute (:mod:`mirror.replay.recompute`) both write
through :class:`ConversationWriter`, so the think loop and the "is thinking behind" check
(:data:`~mirror.cognition.stages.STAGES`) exist once.

It lives in ``cognition/`` because it needs nothing above it: the bus port (``events``), the
fold (``projections``) and the pipeline, memory and reflection stages (here) are all it touches, and its ports (bus, LLM,
prompts, config) come in as arguments. In ``replay/`` the live actor would depend on the
replay layer for every write; in ``actors/`` replay could not reach it.

Two ways to append, one per caller:

- **serial** (live): build, append and fold under one lock, because a turn and the thinker
  write concurrently; the state moves only once the bus acknowledged. An
  :class:`AppendConflict` stops the writer for good (another writer owns the conversation):
  every later append raises it again.
- **pipelined** (recompute, where one task writes): fold at once and send in the background,
  each send behind the previous one (the fence), so the next model call does not wait for
  the acknowledgement. A failed send fails every later one: nothing is written past a failure,
  which the next append, :meth:`ConversationWriter.flush` or the think loop raises.

The stages of a turn run in one order: thinking, memory, the insight, and a reflection when one
is due (:mod:`mirror.cognition.reflection`). A forced reflection
(:meth:`ConversationWriter.reflect_now`) takes the same lock as the think loop
(:attr:`ConversationWriter.stages`), so the two never run at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from mirror import metrics, tracing
from mirror.cognition.embeddings.port import Embedder
from mirror.cognition.errors import ReflectionFailed, ReflectionRefused, ThinkingShed
from mirror.cognition.llm import LLM, TokenSink
from mirror.cognition.memory.stage import memory_behind, same_memory_inputs
from mirror.cognition.pipeline import MirrorConfig, Thinking
from mirror.cognition.prompts import PromptSet
from mirror.cognition.reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from mirror.cognition.reflection.triggers import forced_triggers, refusal
from mirror.cognition.stages import STAGE, STAGES, StageContext, stages_behind
from mirror.cognition.talker_first import no_wait
from mirror.cognition.turn import (
    ComposedPersonaTurn,
    ComposedTurn,
    KeptReply,
    Recaller,
    compose_mirror_turn,
    compose_persona_turn,
)
from mirror.events.bus import EventBus, Head
from mirror.events.envelope import Event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey, event_id
from mirror.events.payloads import PersonaChosen, ThinkerFailed
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState

Build = Callable[[ConversationState], Sequence[Event]]
"""Events to append, built from the state they will follow (their first seq: ``last_seq + 1``)."""
YieldTo = Callable[[], Awaitable[None]]
"""Awaited by the think loop before each step and each append: the live conversation's
:meth:`~mirror.cognition.talker_first.TalkerFirst.quiet` (turns first), else nothing."""


class ConversationWriter:
    """Fenced appends to one conversation branch, the state they lead to, and the think loop."""

    def __init__(
        self, bus: EventBus, key: StreamKey, state: ConversationState, head: Head, *, pipelined: bool = False,
        on_appended: Callable[[Sequence[Event]], None] | None = None,
    ) -> None:
        """``head``: the bus head at ``state.last_seq``. ``on_appended`` (serial only) runs after
        each acknowledged and folded append, under the lock: state and head agree there."""
        if pipelined and on_appended is not None:
            raise ValueError("on_appended needs serial appends: a pipelined state runs ahead of the head")
        self.bus, self.key, self.state, self.head = bus, key, state, head
        self.pipelined = pipelined
        self.written = 0
        self.failure: AppendConflict | None = None
        """(serial) The conflict that stopped this writer for good, if one did."""
        self.lock = asyncio.Lock()
        """(serial) Held while an append is built, sent and folded: hold it to read a state and
        head that agree (e.g. for a snapshot)."""
        self._on_appended = on_appended
        self._sending: asyncio.Future[None] | None = None
        self.stages = asyncio.Lock()
        """Held while the think loop or a forced reflection runs: one at a time, never racing."""

    # ------------------------------------------------------------------------ appending

    def rebase(self, state: ConversationState, head: Head) -> None:
        """(a new branch) Start from ``state``, inherited from the parent at the fork, with the
        branch's ``head`` moved to it: the branch's first append (its ``fork`` event) follows it.
        Only a writer that has appended nothing may be rebased."""
        if self.state.last_seq or self.written:
            raise ValueError(f"{self.key} already holds events: only an empty branch takes an inherited state")
        self.state, self.head = replace(state, key=self.key), head

    async def append(self, build: Build) -> list[Event]:
        """Append what ``build`` makes of the current state; returns the events."""
        if self.pipelined:
            return self._append_pipelined(build)
        async with self.lock:
            self.check()
            events = list(build(self.state))
            started = time.perf_counter()
            try:
                with tracing.span("append", {"mirror.events": len(events)}):  # fenced, until acknowledged
                    self.head = await self.bus.append(self.key, events, self.head)
                metrics.append_done(time.perf_counter() - started)
            except AppendConflict as conflict:
                self.failure = conflict
                raise
            self._folded(events)
            if self._on_appended is not None:
                self._on_appended(events)
            return events

    def _append_pipelined(self, build: Build) -> list[Event]:
        previous = self._sending
        self.check()
        events = list(build(self.state))
        self._folded(events)
        self._sending = asyncio.ensure_future(self._send(previous, events))
        return events

    def _folded(self, events: list[Event]) -> None:
        self.state = fold(events, self.state)
        self.written += len(events)

    async def _send(self, previous: asyncio.Future[None] | None, events: list[Event]) -> None:
        if previous is not None:
            await previous
        self.head = await self.bus.append(self.key, events, self.head)

    async def take_turn(
        self, message: str, *, llm: LLM, prompts: PromptSet, config: MirrorConfig, recaller: Recaller,
        now: float | None = None, kept: KeptReply | None = None, on_token: TokenSink | None = None,
        basis: ConversationState | None = None, recall_landed: bool = False, idempotency_key: str | None = None,
        instructions: str | None = None,
    ) -> tuple[ComposedTurn, Event]:
        """A MIRROR turn (:func:`~mirror.cognition.turn.compose_mirror_turn`) from the current state
        (or ``basis``), appended: the ``recall`` the Talker answered from and the ``turn`` in one
        fenced append (together or not at all). Returns the composition and the ``turn`` event.

        "Together" is as far as the bus goes: JetStream publishes each event fenced on the one
        before, so a writer that dies between the two leaves a ``recall`` with no ``turn``
        after it (a retry recognises a half-landed batch; a crash cannot). Such a recall counts
        once more in its beliefs' recall counts and replays like any other; nothing reads a
        turn from it.

        ``basis`` and ``recall_landed`` (a resumed recompute): the turn is made from the state
        before a ``recall`` an interrupted run already appended, and only its ``turn`` is appended.
        ``instructions``: the client's (an ``instructions`` event first when they changed)."""
        composed = await compose_mirror_turn(
            self.state if basis is None else basis, message, llm=llm, prompts=prompts, config=config,
            now=time.time() if now is None else now, recaller=recaller, kept=kept, on_token=on_token,
            idempotency_key=idempotency_key, instructions=instructions)
        events = await self.append((replace(composed, recall=None) if recall_landed else composed).build(self.key))
        return composed, events[-1]

    async def take_persona_turn(
        self, message: str, *, llm: LLM, embedder: Embedder | None, prompts: PromptSet, config: MirrorConfig,
        chosen: PersonaChosen | None = None, kept: KeptReply | None = None, on_token: TokenSink | None = None,
        idempotency_key: str | None = None, instructions: str | None = None,
    ) -> tuple[ComposedPersonaTurn, Event]:
        """A persona turn (:func:`~mirror.cognition.turn.compose_persona_turn`) from the current
        state, appended in one fenced append (a first turn's ``persona`` event first). Returns the
        composition and the ``turn`` event."""
        composed = await compose_persona_turn(self.state, message, llm=llm, embedder=embedder, prompts=prompts,
                                              config=config, now=time.time(), chosen=chosen, kept=kept,
                                              on_token=on_token, idempotency_key=idempotency_key,
                                              instructions=instructions)
        events = await self.append(composed.build(self.key))
        return composed, events[-1]

    def check(self) -> None:
        """Raise what stopped this writer, if anything did (a conflict; a failed pipelined send)."""
        if self.failure is not None:
            raise self.failure
        sending = self._sending
        if sending is not None and sending.done():
            sending.result()

    async def flush(self) -> None:
        """(pipelined) Wait until everything appended is acknowledged (raises the first failure)."""
        if self._sending is not None:
            await self._sending

    async def abandon(self) -> None:
        """(pipelined) After a failure elsewhere: let what was sent finish, without raising its own failure."""
        if self._sending is not None:
            await asyncio.gather(self._sending, return_exceptions=True)

    # ------------------------------------------------------------------------ thinking

    def memory_behind(self) -> bool:
        """Has the newest turn no completed memory step yet?"""
        return memory_behind(self.state)

    async def think_until_current(
        self, llm: LLM, prompts: PromptSet, config: MirrorConfig, *, attempts: int, embedder: Embedder | None = None,
        overlap_memory: bool = False, policy: ReflectionPolicy = DEFAULT_POLICY, persona_prompts: PromptSet | None = None,
        yield_to: YieldTo = no_wait,
    ) -> None:
        """Run the thinking stages (:data:`~mirror.cognition.stages.STAGES`, in the table's order)
        for the newest turn until none is behind: a persona's background steps; or thinking, then
        (``config.memory``, with an ``embedder``) remembering, then (``config.reflection``) the
        insight and a reflection when one is due (:func:`~mirror.cognition.reflection.triggers.due`).
        Each stage is given up for that turn once ``attempts`` steps of it in a row failed (then the
        next turn, a re-activation or a resumed run tries again).

        Each stage's events follow the previous stage's and each is retried on its own: a failed
        memory step, insight or reflection never re-runs a monologue or controller that
        succeeded. A turn appended meanwhile (live) is thought about by the next step. Raises
        what stops the writer (see :meth:`check`); LLM failures do not raise, they are
        ``thinker_failed``. One loop at a time (:attr:`stages`), a forced reflection included.

        ``overlap_memory``: the memory step for the turn starts beside its thinking instead of
        after it, since it reads nothing a thinking step writes
        (:func:`~mirror.cognition.memory.stage.memory_inputs`); its events are still appended
        after the thinking's, with the same causation, so the log is the one the serial loop writes. If the state it started from no longer gives the same
        step when its turn comes (a turn appended meanwhile), it is dropped and run again.
        Recompute overlaps (one writer, the model's calls are its critical path); the live
        conversation does not: a turn arriving mid-thought would waste the early step's calls,
        and the calls reach the model in the one order a scripted simulator expects.

        ``yield_to`` is awaited before each step and each append (the live conversation's: let
        the process's busy turns go first, :mod:`~mirror.cognition.talker_first`); it moves when
        a step starts, never what it writes.
        """
        context = StageContext(llm, prompts, config, embedder, policy, persona_prompts)
        async with self.stages:
            await self._think_until_current(context, attempts=attempts, overlap_memory=overlap_memory, yield_to=yield_to)

    async def _think_until_current(self, context: StageContext, *, attempts: int, overlap_memory: bool,
                                   yield_to: YieldTo = no_wait) -> None:
        tried: dict[str, int] = {}  # stage -> failed steps in a row
        gave_up: dict[str, int] = {}  # stage -> the turn count it was given up at
        early: _EarlyStep | None = None  # the memory step started beside the thinking
        memory = STAGE["memory"]
        try:
            yielded = False
            while True:
                self.check()
                target = self.state.turn_count
                basis = self.state
                # causation = the last event the step saw: replay rebuilds exactly that state.
                cause = event_id(self.key.tenant, self.key.conversation, self.key.branch, basis.last_seq)
                stage = next((stage for stage in STAGES
                              if gave_up.get(stage.name) != target and stage.behind(basis, context)), None)
                if stage is None:
                    return
                if not yielded:  # the busy turns first; then look again, the state may have moved meanwhile
                    await yield_to()
                    yielded = True
                    continue
                yielded = False
                attempt = tried[stage.name] = tried.get(stage.name, 0) + 1
                if stage is memory and early is not None and early.serves(basis, attempt):
                    step = await early.task
                    early = None
                else:
                    if early is not None and (stage is memory or not early.serves(basis, tried.get("memory", 0) + 1)):
                        await early.drop()
                        early = None
                    if (overlap_memory and stage.name == "thinking" and early is None
                            and gave_up.get("memory") != target and memory.behind(basis, context)):
                        next_attempt = tried.get("memory", 0) + 1
                        early = _EarlyStep(basis, next_attempt, asyncio.ensure_future(
                            memory.run(basis, context, next_attempt)))
                    with tracing.span(f"think {stage.name}", {"mirror.stage": stage.name, "mirror.attempt": attempt}):
                        step = await stage.run(basis, context, attempt)
                await yield_to()
                await self.append(_after(step, self.key, cause))
                if step.ok:
                    tried[stage.name] = 0
                elif _shed(step) and self.state.turn_count == target:
                    # The fair share's backlog is full: this turn's remaining stages are skipped, not retried.
                    gave_up.update(dict.fromkeys(STAGE, target))
                elif attempt >= attempts and self.state.turn_count == target:
                    gave_up[stage.name], tried[stage.name] = target, 0
        finally:
            if early is not None:
                await early.drop()

    def stages_behind(self, context: StageContext) -> list[str]:
        """The stages the newest turn still needs (:func:`~mirror.cognition.stages.stages_behind`)."""
        return stages_behind(self.state, context)

    async def reflect_now(
        self, llm: LLM, prompts: PromptSet, config: MirrorConfig, *, attempts: int, embedder: Embedder | None = None,
        policy: ReflectionPolicy = DEFAULT_POLICY, yield_to: YieldTo = no_wait,
    ) -> Event:
        """Force a reflection now; returns its ``reflection`` event.

        The thinker is brought up to date first (thinking, memory, insight, and any reflection
        already due, which may itself start the cooldown), under :attr:`stages`, so this never
        races the think loop. The policy's gates hold for a forced reflection too: within the
        cooldown or at the hourly cap it raises :class:`ReflectionRefused` (``turns_left`` /
        ``next_slot``) and writes nothing; with reflection off, too. A reflection that fails is
        recorded (``thinker_failed``) and tried again, up to ``attempts`` in all; then
        :class:`ReflectionFailed`."""
        context = StageContext(llm, prompts, config, embedder, policy)
        async with self.stages:
            await self._think_until_current(context, attempts=attempts, overlap_memory=False, yield_to=yield_to)
            conversation = str(self.key)
            if not config.reflection:
                raise ReflectionRefused(conversation, "off", "reflection is off for this conversation")
            refused = refusal(self.state, policy)
            if refused is not None:
                raise ReflectionRefused(conversation, refused.reason, refused.detail, turns_left=refused.turns_left,
                                        next_slot=refused.next_slot)
            failure: Event | None = None
            for attempt in range(1, attempts + 1):
                self.check()
                basis = self.state
                cause = event_id(self.key.tenant, self.key.conversation, self.key.branch, basis.last_seq)
                forced = replace(context, triggers=forced_triggers(basis, policy))
                step = await STAGE["reflection"].run(basis, forced, attempt)
                events = await self.append(_after(step, self.key, cause))
                if step.ok:
                    return events[-1]
                failure = events[-1]
            assert failure is not None and isinstance(failure.payload, ThinkerFailed)  # attempts >= 1, all failed
            raise ReflectionFailed(conversation, failure.seq, failure.payload.error_type, failure.payload.message)


class _EarlyStep:
    """A memory step started from ``basis`` before its turn's thinking was done."""

    def __init__(self, basis: ConversationState, attempt: int, task: asyncio.Future[Thinking]) -> None:
        self.basis, self.attempt, self.task = basis, attempt, task

    def serves(self, basis: ConversationState, attempt: int) -> bool:
        """Is this the step the serial loop would make from ``basis`` at ``attempt``?"""
        return attempt == self.attempt and same_memory_inputs(basis, self.basis)

    async def drop(self) -> None:
        """Cancel it and wait until it stopped; what it raised or made is discarded."""
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def _shed(thinking: Thinking) -> bool:
    """Was the step shed by the fair share (:class:`~mirror.cognition.errors.ThinkingShed`), not failed?"""
    return any(isinstance(thought.payload, ThinkerFailed) and thought.payload.error_type == ThinkingShed.__name__
               for thought in thinking.thoughts)


def _after(thinking: Thinking, key: StreamKey, cause: str) -> Build:
    """The step's events, placed after whatever the state holds when they are appended."""
    return lambda state: thinking.events(key, state.last_seq + 1, causation=cause)


__all__ = ["Build", "ConversationWriter", "YieldTo"]
