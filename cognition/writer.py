"""The conversation writer: the one place that drives the pipeline over ports.

A conversation's facts are written in one way wherever they are written: events are built from
the current state, appended fenced to the bus, folded into the state; and after a turn the
Thinker runs step after step until the newest turn is thought through (a ``thinker_failed``
step is tried again, up to ``attempts`` times in a row for one turn). The live conversation
(:mod:`mirror.actors.conversation`) and recompute (:mod:`mirror.replay.recompute`) both write
through :class:`ConversationWriter`, so the think loop and the "is thinking behind" check
(:func:`~mirror.cognition.pipeline.thinking_behind`) exist once.

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
from collections.abc import Callable, Sequence

from mirror.cognition.embeddings.port import Embedder
from mirror.cognition.errors import ReflectionFailed, ReflectionRefused
from mirror.cognition.llm import LLM
from mirror.cognition.memory.stage import memory_behind, remember, same_memory_inputs
from mirror.cognition.persona.background import persona_stage_behind, persona_step
from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.pipeline import MirrorConfig, Thinking, think, thinking_behind
from mirror.cognition.prompts import PromptSet
from mirror.cognition.reflection.insight import draw_insight, insight_behind
from mirror.cognition.reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from mirror.cognition.reflection.step import reflect
from mirror.cognition.reflection.triggers import due, forced_triggers, refusal
from mirror.events.bus import EventBus, Head
from mirror.events.envelope import Event, make_event
from mirror.events.errors import AppendConflict
from mirror.events.ids import StreamKey, event_id
from mirror.events.payloads import Provenance, Recall, ThinkerFailed, Turn
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState

Build = Callable[[ConversationState], Sequence[Event]]
"""Events to append, built from the state they will follow (their first seq: ``last_seq + 1``)."""


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

    async def append(self, build: Build) -> list[Event]:
        """Append what ``build`` makes of the current state; returns the events."""
        if self.pipelined:
            return self._append_pipelined(build)
        async with self.lock:
            self.check()
            events = list(build(self.state))
            try:
                self.head = await self.bus.append(self.key, events, self.head)
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

    async def append_turn(
        self, turn: Turn, provenance: Provenance | None, *, causation: str | None = None,
        recall: Recall | None = None, recall_causation: str | None = None, timestamp: float | None = None,
    ) -> Event:
        """The ``turn`` event, next after the current state; with ``recall``, the ``recall`` event
        the Talker answered from goes first, in the same fenced append (a turn and its recall land
        together or not at all). ``recall_causation`` names the last event of the state the recall
        was made from; ``timestamp`` (both events) is the ``now`` the recall used.

        "Together" is as far as the bus goes: JetStream publishes each event fenced on the one
        before, so a writer that dies between the two leaves a ``recall`` with no ``turn``
        after it (a retry recognises a half-landed batch; a crash cannot). Such a recall counts
        once more in its beliefs' recall counts and replays like any other; nothing reads a
        turn from it."""

        def build(state: ConversationState) -> list[Event]:
            events = []
            if recall is not None:
                events.append(make_event(self.key, state.last_seq + 1, recall, turn=state.turn_count,
                                         causation=recall_causation, timestamp=timestamp))
            events.append(make_event(
                self.key, state.last_seq + 1 + len(events), turn, turn=state.turn_count, provenance=provenance,
                causation=causation, timestamp=timestamp,
            ))
            return events

        events = await self.append(build)
        return events[-1]

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

    def behind(self, mode: str) -> bool:
        """Is the newest turn not thought through yet (in ``mode``)?"""
        return thinking_behind(self.state, mode)

    def memory_behind(self) -> bool:
        """Has the newest turn no completed memory step yet?"""
        return memory_behind(self.state)

    async def think_until_current(
        self, llm: LLM, prompts: PromptSet, config: MirrorConfig, *, attempts: int, embedder: Embedder | None = None,
        overlap_memory: bool = False, policy: ReflectionPolicy = DEFAULT_POLICY, persona_prompts: PromptSet | None = None,
    ) -> None:
        """Think about the newest turn until it is thought through, then (``config.memory``, with
        an ``embedder``) remember it, then (``config.reflection``) draw its insight and reflect
        when a reflection is due (:func:`~mirror.cognition.reflection.triggers.due`); each stage
        is given up for that turn once ``attempts`` steps in a row failed (then the next turn, a
        re-activation or a resumed run tries again).

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
        """
        async with self.stages:
            await self._think_until_current(llm, prompts, config, attempts=attempts, embedder=embedder,
                                            overlap_memory=overlap_memory, policy=policy,
                                            persona_prompts=persona_prompts)

    async def _think_until_current(
        self, llm: LLM, prompts: PromptSet, config: MirrorConfig, *, attempts: int, embedder: Embedder | None,
        overlap_memory: bool, policy: ReflectionPolicy, persona_prompts: PromptSet | None = None,
    ) -> None:
        remembering = config.memory and embedder is not None
        attempt = memory_attempt = insight_attempt = reflection_attempt = 0
        persona_attempts: dict[str, int] = {}
        gave_up: dict[str, int] = {}  # stage -> the turn count it was given up at
        early: _EarlyStep | None = None  # the memory step started beside the thinking
        try:
            while True:
                self.check()
                target = self.state.turn_count
                basis = self.state
                # causation = the last event the step saw: replay rebuilds exactly that state.
                cause = event_id(self.key.tenant, self.key.conversation, self.key.branch, basis.last_seq)
                wants_memory = remembering and self.memory_behind() and gave_up.get("memory") != target
                given_up = [name for name, turn in gave_up.items() if turn == target]
                stage = persona_stage_behind(basis, skip=given_up)  # a persona conversation's background steps
                if stage is not None:
                    tried = persona_attempts[stage] = persona_attempts.get(stage, 0) + 1
                    step = await persona_step(basis, stage, llm, embedder, persona_prompts or default_persona_prompts(),
                                              config, attempt=tried)
                    await self.append(_after(step, self.key, cause))
                    if step.ok:
                        persona_attempts[stage] = 0
                    elif tried >= attempts and self.state.turn_count == target:
                        gave_up[stage], persona_attempts[stage] = target, 0
                    continue
                if self.behind(config.mode) and gave_up.get("thinking") != target:
                    if overlap_memory and wants_memory and (early is None or not early.serves(basis, memory_attempt + 1)):
                        assert embedder is not None  # remembering says so
                        if early is not None:
                            await early.drop()
                        early = _EarlyStep(basis, memory_attempt + 1, asyncio.ensure_future(
                            remember(basis, llm, embedder, prompts, config, attempt=memory_attempt + 1)))
                    attempt += 1
                    thinking = await think(basis, llm, prompts, config, attempt=attempt)
                    await self.append(_after(thinking, self.key, cause))
                    if thinking.ok:
                        attempt = 0
                    elif attempt >= attempts and self.state.turn_count == target:
                        gave_up["thinking"], attempt = target, 0
                    continue
                if wants_memory:
                    assert embedder is not None  # remembering says so
                    memory_attempt += 1
                    if early is not None and early.serves(basis, memory_attempt):
                        step = await early.task
                    else:
                        if early is not None:
                            await early.drop()
                        step = await remember(basis, llm, embedder, prompts, config, attempt=memory_attempt)
                    early = None
                    await self.append(_after(step, self.key, cause))
                    if step.ok:
                        memory_attempt = 0
                    elif memory_attempt >= attempts and self.state.turn_count == target:
                        gave_up["memory"], memory_attempt = target, 0
                    continue
                if config.reflection and insight_behind(basis) and gave_up.get("insight") != target:
                    insight_attempt += 1
                    step = await draw_insight(basis, llm, prompts, config, attempt=insight_attempt)
                    await self.append(_after(step, self.key, cause))
                    if step.ok:
                        insight_attempt = 0
                    elif insight_attempt >= attempts and self.state.turn_count == target:
                        gave_up["insight"], insight_attempt = target, 0
                    continue
                triggers = due(basis, policy) if config.reflection and gave_up.get("reflection") != target else ()
                if triggers:
                    reflection_attempt += 1
                    step = await reflect(basis, llm, prompts, config, policy, triggers=triggers,
                                         attempt=reflection_attempt)
                    await self.append(_after(step, self.key, cause))
                    if step.ok:
                        reflection_attempt = 0
                    elif reflection_attempt >= attempts and self.state.turn_count == target:
                        gave_up["reflection"], reflection_attempt = target, 0
                    continue
                return
        finally:
            if early is not None:
                await early.drop()

    async def reflect_now(
        self, llm: LLM, prompts: PromptSet, config: MirrorConfig, *, attempts: int, embedder: Embedder | None = None,
        policy: ReflectionPolicy = DEFAULT_POLICY,
    ) -> Event:
        """Force a reflection now; returns its ``reflection`` event.

        The thinker is brought up to date first (thinking, memory, insight, and any reflection
        already due, which may itself start the cooldown), under :attr:`stages`, so this never
        races the think loop. The policy's gates hold for a forced reflection too: within the
        cooldown or at the hourly cap it raises :class:`ReflectionRefused` (``turns_left`` /
        ``next_slot``) and writes nothing; with reflection off, too. A reflection that fails is
        recorded (``thinker_failed``) and tried again, up to ``attempts`` in all; then
        :class:`ReflectionFailed`."""
        async with self.stages:
            await self._think_until_current(llm, prompts, config, attempts=attempts, embedder=embedder,
                                            overlap_memory=False, policy=policy)
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
                step = await reflect(basis, llm, prompts, config, policy, triggers=forced_triggers(basis, policy),
                                     attempt=attempt)
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


def _after(thinking: Thinking, key: StreamKey, cause: str) -> Build:
    """The step's events, placed after whatever the state holds when they are appended."""
    return lambda state: thinking.events(key, state.last_seq + 1, causation=cause)


__all__ = ["Build", "ConversationWriter"]
