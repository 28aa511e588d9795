"""Recompute after a prompt change: re-think a conversation's history on a new branch.

``recompute_conversation`` forks the conversation after ``from_seq - 1`` into a branch named
from the prompt set's version (so a second run finds the branch and continues it), then replays
the recorded user turns after the fork point one by one, thinking after each with the new
prompt set until the turn is thought through (the papers' synchronous setting). By default each
recorded reply is kept as it was; ``counterfactual`` regenerates the Talker's replies too.
The parent branch is only read, never written. The branch's ``fork`` event records the prompt
set (:func:`~mirror.replay.prompt_record.recorded_fork`: its version, every template's digest,
the texts that differ from the built-in set), so the branch can be verified without it at hand.

Every request goes through :class:`RecordedLLM` with the live model behind it: a request the
prompt change did not touch (same fingerprint) is answered from the recording, so the branch
differs from its parent exactly where the changed prompts were used. The memory stage re-runs
too, its embeddings through a :class:`RecordedEmbedder`: a statement the log already holds a
vector for is not embedded again, only new ones go to the live ``embedder`` (and with none,
the memory stage runs only when the log holds vectors, failing a step that needs a new one).

The branch is written through the :class:`~mirror.cognition.writer.ConversationWriter` the live
conversation uses (pipelined appends): the same think loop, the same "is thinking behind" check.
Here the loop runs each turn's memory step beside its thinking, and the next turn's message is
embedded meanwhile (:func:`_rethink`): the log is the one written one call after another, in
less time (a turn's longest chain of calls instead of all of them).

Each recorded turn recalls again on the branch before its ``turn`` event, as the live
conversation does (a ``recall`` event first, in the same append): the branch's beliefs may
differ from the parent's, so what is recalled may too. The message's vector comes from the log
(the parent's ``recall`` recorded it): no embedding call. A kept reply is kept whatever the
branch recalls; ``counterfactual`` gives the branch's block to the Talker, which is asked again
only when that changed its request.

Reflection re-runs on the branch when the conversation reflects (its turns recorded it): the
insight after each turn and a reflection wherever the branch's own state makes one due, so a
changed ``reflect.md`` or ``decay.md`` gives the branch other portraits and decisions while its
kept turns stay the parent's. The hourly cap counts the branch's own event timestamps (a
recompute runs faster than the conversation did, so a cap the parent never met can hold a
branch's reflection back). A reflection the user **forced** in the parent is a user action,
like a turn: the branch forces one after the same turn (``for_turn``), if the branch's
policy allows it there (within the branch's cooldown or cap it is skipped, and the diff shows
the difference). An unchanged prompt set reproduces the parent's reflections exactly.

Resumable: the branch is written with fenced appends, and a run that finds a half-done branch
rebuilds its state and carries on from the first recorded turn it does not hold yet — nothing
is duplicated, nothing skipped; an append it finds cut short (the previous run killed between
its publishes) is finished, not made again (:mod:`.interrupted`). Two runs on one branch at once cannot fork it: the second
writer gets ``AppendConflict``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from mirror.cognition.embeddings.port import Embedder, Embeddings
from mirror.cognition.errors import ReflectionFailed, ReflectionRefused
from mirror.cognition.llm import LLM
from mirror.cognition.memory.turn import TurnRecall, recall_for_turn, wants_vector
from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.reflection.triggers import FORCED
from mirror.cognition.turn import KeptReply, opening_events
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import EventBus, Head
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey, validate_identifier
from mirror.events.payloads import Instructions, Monologue, Narrative, PersonaChosen, Recall, Reflection, Turn
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState, initial_state

from .diff import diff
from .errors import RecomputeError, UnknownBranch
from .history import History
from .interrupted import CutMemoryStep, Orphan, cut_memory_step, finish_memory_step, orphan_recall
from .persona import BACKGROUND_STAGES, rethink_persona
from .prompt_record import recorded_fork
from .recorded import RecordedLLM
from .recorded_vectors import RecordedEmbedder, RecordedVectors, recorded_embedding_model
from .verify import config_from

SETTLE_TIMEOUT_S = 30.0
FOLD_AT_HAND = 400
"""Up to this many events, folding the events already read beats asking for a snapshot."""


@dataclass(frozen=True)
class RecomputePlan:
    """What to recompute with. ``branch`` defaults to a name derived from everything else."""

    prompts: PromptSet
    from_seq: int = 1
    mode: str | None = None
    counterfactual: bool = False
    branch: str | None = None
    thinking_attempts: int = 3
    persona_prompts: PromptSet | None = None
    """The persona mind's prompt set for persona conversations (``None``: the built-in one)."""

    def __post_init__(self) -> None:
        if type(self.from_seq) is not int or self.from_seq < 1:
            raise RecomputeError(f"from_seq must be a whole number >= 1, got {self.from_seq!r}")
        if self.mode is not None:
            MirrorConfig(model="-", mode=self.mode)  # type: ignore[arg-type]  # raises on an unknown mode
        if self.branch is not None:
            validate_identifier("branch", self.branch)
            if self.branch == "main":
                raise RecomputeError("recompute never writes main; name another branch")
        if self.thinking_attempts < 1:
            raise RecomputeError("thinking_attempts must be at least 1")

    @property
    def branch_name(self) -> str:
        if self.branch is not None:
            return self.branch
        what = f"{self.prompts.version}|{self.from_seq}|{self.mode}|{self.counterfactual}"
        if self.persona_prompts is not None:  # a MIRROR-only plan keeps the name it always had
            what += f"|{self.persona_prompts.version}"
        return f"rc-{hashlib.sha256(what.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Recomputation:
    """One conversation's recompute, as a report can show it."""

    key: StreamKey
    branch: str
    fork_seq: int
    turns: int = 0
    resumed_at_turn: int = 0
    events_written: int = 0
    model_calls: int = 0
    embedding_calls: int = 0
    recorded_answers: int = 0
    diff: dict[str, Any] | None = None
    replies: list[dict[str, Any]] | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "conversation": self.key.conversation, "parent_branch": self.key.branch, "branch": self.branch,
            "fork_seq": self.fork_seq, "turns": self.turns, "resumed_at_turn": self.resumed_at_turn,
            "events_written": self.events_written, "model_calls": self.model_calls,
            "embedding_calls": self.embedding_calls,
            "recorded_answers": self.recorded_answers, "diff": self.diff, "replies": self.replies,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class _Rethought:
    """What re-thinking the recorded turns did (the part of the result :func:`_rethink` knows)."""

    turns: int
    resumed_at_turn: int
    model_calls: int
    embedding_calls: int
    recorded_answers: int
    replies: list[dict[str, Any]] | None


async def recompute_conversation(
    parent: StreamKey, plan: RecomputePlan, *, history: History, bus: EventBus, live: LLM,
    embedder: Embedder | None = None,
) -> Recomputation:
    """Recompute ``parent`` on ``plan.branch_name`` (created, or continued if half done)."""
    branch = replace(parent, branch=plan.branch_name)
    if branch == parent:
        raise RecomputeError(f"{parent}: the branch to write is the branch being recomputed")
    fork_seq = plan.from_seq - 1
    # The opening reads go to the log and the bus at once: a conversation's start is otherwise
    # five round trips in a row, to a log that is busy committing the other conversations.
    parent_last, recorded_events, branch_head = await _together(
        history.last_seq(parent), history.events(parent), _settled_head(branch, history, bus)
    )
    if parent_last == 0:
        raise UnknownBranch(parent, "no such conversation (it has no events)")
    if fork_seq > parent_last:
        raise RecomputeError(f"{parent} ends at seq {parent_last}; from_seq {plan.from_seq} is past its end")
    if (recorded_events[-1].seq if recorded_events else 0) < parent_last:
        recorded_events = await history.events(parent)  # read before the log caught up: again
    writer = await _open_branch(branch, branch_head, parent, fork_seq, plan, history, bus, recorded_events)
    orphan, cut = (None, None) if branch_head.last_seq is None else await _together(
        orphan_recall(branch, writer.state, history), cut_memory_step(branch, writer.state, history))

    async def not_forgotten() -> None:
        # The log raises ConversationForgotten once the parent's tombstone stands: the job stops
        # there (its branch's late events are dropped at ingest) instead of reporting a branch the
        # log will never hold.
        await history.log.last_seq(parent)

    try:
        rethought = await _rethink(writer, recorded_events, fork_seq, plan, live=live, embedder=embedder,
                                   orphan=orphan, cut=cut, not_forgotten=not_forgotten)
    except BaseException:
        await writer.abandon()
        raise
    await writer.flush()
    await not_forgotten()
    changed = diff(await _state_of(parent, parent_last, history, recorded_events), writer.state).as_dict()
    return Recomputation(
        parent, branch.branch, fork_seq, turns=rethought.turns, resumed_at_turn=rethought.resumed_at_turn,
        events_written=writer.written, model_calls=rethought.model_calls, embedding_calls=rethought.embedding_calls,
        recorded_answers=rethought.recorded_answers, diff=changed, replies=rethought.replies,
    )


async def _rethink(
    writer: ConversationWriter, recorded_events: list[Event], fork_seq: int, plan: RecomputePlan, *, live: LLM,
    embedder: Embedder | None = None, orphan: Orphan | None = None, cut: CutMemoryStep | None = None,
    not_forgotten: Callable[[], Awaitable[None]] | None = None,
) -> _Rethought:
    """The recorded turns after the fork, re-thought one by one (appended through ``writer``).

    A resumed run whose branch ends in an ``orphan`` recall finishes that turn from it: the turn
    is appended after the recall already there (made again from the state before it, at its
    timestamp, for the Talker's block), so a resumed branch equals one recomputed in one go. One
    that ends in a ``cut`` memory step appends the rest of that step first
    (:func:`~mirror.replay.interrupted.finish_memory_step`).

    While a turn is thought about, its memory step runs beside its thinking (``overlap_memory``)
    and the next turn's message is embedded for that turn's recall (:class:`_VectorsAhead`): the
    three depend on nothing of each other, so a turn costs the longest of them, not their sum."""
    llm = RecordedLLM(recorded_events, live=live, replay_failures=False)
    embedding_model = embedder.model if embedder is not None else recorded_embedding_model(recorded_events)
    vectors = None if embedding_model is None else RecordedEmbedder(
        RecordedVectors(recorded_events), embedding_model, live=embedder
    )
    ahead = None if vectors is None else _VectorsAhead(vectors)
    talker_provenance = next((e.provenance for e in recorded_events if isinstance(e.payload, Turn) and e.provenance), None)
    thinker_provenance = next(
        (e.provenance for e in recorded_events if isinstance(e.payload, (Monologue, Narrative)) and e.provenance), None
    )
    turns = [event for event in recorded_events if isinstance(event.payload, Turn) and event.seq > fork_seq]
    instructed = recorded_instructions(recorded_events, fork_seq)
    messages = [event.payload.user_message for event in turns]  # type: ignore[attr-defined]  # Turn events alone (above)
    inherited_turns = sum(1 for event in recorded_events if isinstance(event.payload, Turn) and event.seq <= fork_seq)
    done = writer.state.turn_count - inherited_turns
    replies: list[dict[str, Any]] = []
    forced = {event.payload.for_turn for event in recorded_events
              if isinstance(event.payload, Reflection) and FORCED in event.payload.triggers and event.seq > fork_seq}
    if writer.state.persona is not None:  # the persona mind: its own turn path and background steps
        thinker = next((e.provenance for e in recorded_events if type(e.payload) in BACKGROUND_STAGES and e.provenance),
                       talker_provenance)
        replies = await rethink_persona(writer, turns, done, llm, vectors, plan.prompts,
                                        plan.persona_prompts or default_persona_prompts(), thinker,
                                        plan.thinking_attempts, counterfactual=plan.counterfactual,
                                        instructions=instructed)
        return _Rethought(len(turns), done, llm.live_calls, 0 if vectors is None else vectors.calls, llm.recorded_calls,
                          replies if plan.counterfactual else None)

    def thinking_config() -> MirrorConfig:
        return replace(config_from(thinker_provenance, plan.mode or writer.state.mode or "full", talker=False),
                       reflection=bool(writer.state.reflection))

    async def think_until_current(upcoming: int) -> None:
        """Think about the newest turn; meanwhile embed the message of turn ``upcoming`` for its
        recall, when there will be a vector to compare it with (one now, or a memory step to come)."""
        if ahead is not None and upcoming < len(turns) and (wants_vector(writer.state) or writer.memory_behind()):
            ahead.start(messages[upcoming])
        config = thinking_config()
        await writer.think_until_current(llm, plan.prompts, config, attempts=plan.thinking_attempts, embedder=vectors,
                                         overlap_memory=True)
        turn = writer.state.turn_count - 1
        last = writer.state.last_reflection
        if turn in forced and config.reflection and not (last is not None and last.for_turn == turn
                                                         and FORCED in last.triggers):
            try:  # the parent's user forced one after this turn: so does the branch, if its policy allows
                await writer.reflect_now(llm, plan.prompts, config, attempts=plan.thinking_attempts, embedder=vectors)
            except (ReflectionRefused, ReflectionFailed):
                pass  # refused: nothing written; failed: each attempt is on the branch as a thinker_failed

    recall_vectors: Embedder | None = ahead if ahead is not None else vectors

    async def recaller(state: ConversationState, message: str, now: float) -> TurnRecall | None:
        return await recall_for_turn(state, message, recall_vectors, now)

    try:
        if cut is not None:  # the previous run stopped inside a memory step: its rest first
            await finish_memory_step(writer, cut, llm, plan.prompts, thinking_config(), vectors)
        await think_until_current(done)
        for index in range(done, len(turns)):
            if not_forgotten is not None:  # before each turn: a forget mid-way ends the job there
                await not_forgotten()
            recorded = turns[index]
            payload: Turn = recorded.payload  # type: ignore[assignment]  # turns holds Turn events alone (filtered above)
            provenance = recorded.provenance
            config = config_from(talker_provenance, plan.mode or payload.mode, talker=True)
            # Recall again on the branch (its beliefs may differ), the message's vector from the log.
            now, basis = time.time(), None
            landed = orphan is not None and isinstance(orphan.event.payload, Recall) \
                and orphan.event.payload.query == payload.user_message
            if landed and orphan is not None:  # the recall of this turn is on the branch already
                now, basis = orphan.event.timestamp, orphan.state_before
            orphan = None
            kept = None
            if not plan.counterfactual:  # a kept reply names the recorded turn it copies (causation)
                kept = KeptReply(payload if plan.mode is None else replace(payload, mode=plan.mode), provenance,
                                 recorded.id)
            first_seq = writer.state.last_seq + 1
            composed, _ = await writer.take_turn(payload.user_message, llm=llm, prompts=plan.prompts, config=config,
                                                 recaller=recaller, now=now, kept=kept, basis=basis,
                                                 recall_landed=landed, idempotency_key=payload.idempotency_key,
                                                 instructions=instructed.get(recorded.seq))
            if plan.counterfactual:
                replies.append({"seq": first_seq, "user_message": payload.user_message,
                                "recorded": payload.reply, "regenerated": composed.turn.reply})
            await think_until_current(index + 1)
    finally:
        if ahead is not None:
            await ahead.drop()
    embedding_calls = 0 if vectors is None else vectors.calls
    return _Rethought(len(turns), done, llm.live_calls, embedding_calls, llm.recorded_calls,
                      replies if plan.counterfactual else None)


def recorded_instructions(events: Sequence[Event], fork_seq: int) -> dict[int, str]:
    """The client's instructions each recorded turn after ``fork_seq`` came with, by the turn's seq:
    an ``instructions`` event belongs to the next ``turn`` (it is appended with it). The branch
    records them again only where they differ from its own state, exactly as the live turn did."""
    instructed: dict[int, str] = {}
    pending: str | None = None
    for event in events:
        if event.seq <= fork_seq:
            continue
        if isinstance(event.payload, Instructions):
            pending = event.payload.text
        elif isinstance(event.payload, Turn) and pending is not None:
            instructed[event.seq], pending = pending, None
    return instructed


class _VectorsAhead:
    """The recall's embedder, with messages embedded ahead: :meth:`start` asks ``vectors`` for a
    message's vector before its turn, and :meth:`embed` of that message alone answers with that
    request's result (the same call, made earlier: the same vector and fingerprint, or the same
    failure, which the recall turns into a keyword-only recall as it would have). A message the
    log holds a vector for costs no call either way; one that is not recalled after all (no belief
    with a vector by its turn) cost one embedding call for nothing."""

    def __init__(self, vectors: RecordedEmbedder) -> None:
        self.vectors = vectors
        self._started: dict[str, asyncio.Future[Embeddings]] = {}

    @property
    def model(self) -> str:
        return self.vectors.model

    @property
    def calls(self) -> int:
        return self.vectors.calls

    def start(self, text: str) -> None:
        if text not in self._started:
            self._started[text] = asyncio.ensure_future(self.vectors.embed([text]))

    async def embed(self, texts: Sequence[str]) -> Embeddings:
        texts = list(texts)
        if len(texts) == 1 and texts[0] in self._started:
            return await self._started.pop(texts[0])
        return await self.vectors.embed(texts)

    async def drop(self) -> None:
        """Cancel what is still being embedded and forget what was not asked for."""
        started, self._started = list(self._started.values()), {}
        for future in started:
            future.cancel()
        await asyncio.gather(*started, return_exceptions=True)

    async def aclose(self) -> None:
        await self.drop()


async def _together(*steps: Any) -> list[Any]:
    """``asyncio.gather``, but the first failure cancels the others and is raised as it is."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


async def _state_of(key: StreamKey, seq: int, history: History, events: list[Event]) -> ConversationState:
    """``key`` at ``seq``: folded from the events at hand when that is short, else from a snapshot."""
    if seq <= FOLD_AT_HAND and len(events) >= seq:
        return fold(events[:seq], initial_state(key))
    return await history.state_at(key, seq)


async def _open_branch(
    branch: StreamKey, head: Head, parent: StreamKey, fork_seq: int, plan: RecomputePlan, history: History,
    bus: EventBus, parent_events: list[Event],
) -> ConversationWriter:
    """The branch's writer (``head``: its settled head): a new branch gets its ``fork`` event, a
    half-done one its state back."""
    if head.last_seq is None:
        base = await _state_of(parent, fork_seq, history, parent_events)
        writer = ConversationWriter(bus, branch, replace(base, key=branch), Head(fork_seq, head.fence), pipelined=True)
        # A persona chosen after the fork point is the branch's character too: it comes with the fork
        # (with its greeting, made again from the persona event as a first turn makes it).
        chosen = None if base.persona is not None else next(
            (event for event in parent_events if event.seq > fork_seq and isinstance(event.payload, PersonaChosen)), None)
        persona = plan.persona_prompts or default_persona_prompts() if base.persona or chosen else None
        fork = recorded_fork(parent.branch, fork_seq, plan.prompts, reason="recompute", persona=persona)
        await writer.append(lambda state: [
            make_event(branch, state.last_seq + 1, fork, turn=state.turn_count),
            *([] if chosen is None else opening_events(branch, state.last_seq + 2, cast(PersonaChosen, chosen.payload),
                                                       state.turn_count, chosen.timestamp)),
        ])
        return writer
    point = await history.fork_point(branch)
    if point is None or point.parent != parent or point.fork_seq != fork_seq:
        raise RecomputeError(
            f"branch {branch.branch!r} of {parent.conversation!r} already exists with another origin "
            f"({'no fork' if point is None else f'{point.parent.branch} after seq {point.fork_seq}'}); "
            "name another branch"
        )
    if point.prompt_set != plan.prompts.version:
        raise RecomputeError(
            f"branch {branch.branch!r} was recomputed with prompt set {point.prompt_set}, not "
            f"{plan.prompts.version}; name another branch"
        )
    return ConversationWriter(bus, branch, await history.state_at(branch), head, pipelined=True)


async def _settled_head(key: StreamKey, history: History, bus: EventBus) -> Head:
    """The bus head of ``key`` once the log holds everything the bus does (read-your-writes)."""
    head = await bus.head(key)
    if head.last_seq is None:
        committed = await history.log.last_seq(key)
        return head if committed == 0 else head.with_last_seq(committed)
    if await history.wait_for_log(key, head.last_seq, SETTLE_TIMEOUT_S) < head.last_seq:
        raise RecomputeError(f"{key}: the log did not catch up with the stream in {SETTLE_TIMEOUT_S}s")
    return head


__all__ = ["RecomputePlan", "Recomputation", "recompute_conversation"]
