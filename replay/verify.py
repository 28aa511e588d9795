"""Deterministic replay: re-run the pipelines over the recorded history and compare.

For every recorded step — the Talker's reply to a turn, and each thinking step — the replayer
rebuilds the exact state the step started from (a thinking event's ``causation`` names the
last event that step saw), asks the pipeline again with :class:`RecordedLLM`, and compares the
events it would append with the ones the log holds: type, seq, turn, payload, provenance and
causation (timestamps are the only thing allowed to differ). With an unchanged prompt set and
pipeline this makes zero model calls and finds nothing; after a change to prompts or pipeline
code it reports where the history would now go differently — the check a team runs in CI,
like a workflow replayer.

The run-time parameters a request depends on (model, temperature, max_tokens, seed) are taken
from the recorded provenance of each step, so the replay asks exactly what was asked then.

Memory steps (:mod:`mirror.cognition.memory`) are verified the same way: the belief and edge
events before a ``memory_step`` (same causation), or a ``thinker_failed`` of stage ``memory``,
are re-decided by the memory stage with the recorded chat answers and a
:class:`~mirror.replay.recorded_vectors.RecordedEmbedder` over the vectors the log holds — zero
model and zero embedding calls. A failed step wrote no vectors and keeps only its extraction's
answer, so whatever else it asks (the embeddings, the contradiction call) fails again as the
step recorded it failing: its events are compared, the calls after the extraction are not.

A ``recall`` event is re-run from the state it was made from (its causation), with the query
vector it records (none: keyword-only, as the live turn did when its embedder failed) at its own
timestamp, and what it names — beliefs, review items, edges — is compared. The ``turn`` right
after it is then replayed with the replayed recall's block in the Talker's request: zero model
and zero embedding calls, and a recall that now comes out differently shows in both places.

A live turn does not always land right after the state its Talker was asked from: the Thinker
appends while the Talker waits for the model (the two write concurrently), so a turn may follow
thinking events its request never saw. Its basis is then the state its recall's causation names
or, with no recall, one of the states since the previous turn: :func:`talker_bases` offers them
newest first, and the reply is made from the first whose request the log answered (a request
that none answers is the divergence).

Reflection's events are verified like thinking steps, each on its own: an ``insight``, a
``reflection`` or a ``thinker_failed`` of stage ``insight`` / ``reflection`` is made again from
the state its causation names (a reflection with the triggers due there, or ``forced`` first if
it was forced: a reflection that would no longer be due shows as a divergence in its triggers).
The reflection's decay call is answered from its payload (``decay_fingerprint`` /
``decay_answer``, through :class:`RecordedLLM`), its consolidation from its provenance: zero
model calls. A failed step is re-run with the calls the log does not answer failing as recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import cast

from mirror.cognition.llm import LLM, ChatRequest, ChatResponse
from mirror.cognition.memory.stage import RecordedStepFailure
from mirror.cognition.memory.turn import TurnRecall, replay_recall
from mirror.cognition.persona.prompting import default_persona_prompts
from mirror.cognition.pipeline import Thinking
from mirror.cognition.prompts import PromptSet
from mirror.cognition.reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from mirror.cognition.reflection.triggers import FORCED, due, forced_triggers
from mirror.cognition.stages import STAGE, StageContext
from mirror.cognition.turn import compose_mirror_turn
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.payloads import (
    Belief,
    Edge,
    Insight,
    Instructions,
    MemoryStep,
    Monologue,
    Narrative,
    Payload,
    Recall,
    Reflection,
    ThinkerFailed,
    Turn,
)
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState

from .compare import (
    RECORDING_MISS,
    Divergence,
    FailsAsRecorded,
    VerifyReport,
    basis_of,
    comparable,
    compare,
    config_from,
    step_basis,
)
from .errors import RecordingMiss
from .persona import is_persona_prompt_set, persona_failure, persona_steps, verify_persona_step
from .prompt_record import PromptComparison
from .recorded import RecordedLLM, ReplayedFailure
from .recorded_vectors import RecordedEmbedder, RecordedVectors, recorded_embedding_model

THINKING_TYPES = (Monologue, Narrative, ThinkerFailed)
KEPT_STATES = 256
"""How many recent states the replayer keeps as possible starting points of a step."""


def thinking_steps(events: Sequence[Event]) -> list[list[Event]]:
    """The recorded thinking steps: runs of thinking events one ``think()`` call appended.

    A step ends at a failure or a narrative, before a monologue or any other event, or where
    the causation changes (two steps may follow each other directly).
    """
    steps: list[list[Event]] = []
    current: list[Event] = []
    for event in events:
        payload = event.payload
        if (not isinstance(payload, THINKING_TYPES) or _memory_failure(payload) or _reflection_event(payload)
                or persona_failure(payload)):
            if current:
                steps.append(current)
                current = []
            continue
        if current and (isinstance(payload, Monologue) or event.causation != current[0].causation):
            steps.append(current)
            current = []
        current.append(event)
        if isinstance(payload, (ThinkerFailed, Narrative)):
            steps.append(current)
            current = []
    if current:
        steps.append(current)
    return steps


def _memory_failure(payload: Payload) -> bool:
    return isinstance(payload, ThinkerFailed) and payload.stage == "memory"


REFLECTION_STAGES = ("insight", "reflection")


def _reflection_event(payload: Payload) -> bool:
    return isinstance(payload, (Insight, Reflection)) or (
        isinstance(payload, ThinkerFailed) and payload.stage in REFLECTION_STAGES)


def reflection_steps(events: Sequence[Event]) -> list[list[Event]]:
    """The recorded insight and reflection steps: each ``insight``, ``reflection`` and
    ``thinker_failed`` of stage ``insight`` or ``reflection``, one event each."""
    return [[event] for event in events if _reflection_event(event.payload)]


def memory_steps(events: Sequence[Event]) -> list[list[Event]]:
    """The recorded memory steps: the belief and edge events right before each ``memory_step``
    with its causation, and each ``thinker_failed`` of stage ``memory`` on its own."""
    steps: list[list[Event]] = []
    for index, event in enumerate(events):
        if _memory_failure(event.payload):
            steps.append([event])
        elif isinstance(event.payload, MemoryStep):
            start = index
            while (start > 0 and isinstance(events[start - 1].payload, (Belief, Edge))
                   and events[start - 1].causation == event.causation):
                start -= 1
            steps.append(list(events[start : index + 1]))
    return steps


async def verify_events(
    key: StreamKey, base: ConversationState, events: Sequence[Event], prompts: PromptSet, *, check_replies: bool = True,
    known_prompt_sets: Sequence[PromptSet] = (), persona_prompts: PromptSet | None = None,
) -> VerifyReport:
    """Re-run every recorded step of ``events`` (which continue ``base``) and compare.

    ``known_prompt_sets``: prompt sets the log may have been recorded with (besides ``prompts``),
    so a divergence can name the templates that changed (:class:`PromptComparison`); persona
    prompt sets among them are compared with ``persona_prompts``.
    ``persona_prompts``: the persona mind's prompt set (:mod:`~mirror.replay.persona`; default:
    the built-in one)."""
    report = VerifyReport(key, events=len(events), prompt_set=prompts.version)
    comparison = PromptComparison(prompts, known_prompt_sets)
    persona_prompts = persona_prompts or default_persona_prompts()
    persona_comparison = PromptComparison(persona_prompts, (
        default_persona_prompts(), *(known for known in known_prompt_sets if is_persona_prompt_set(known.version))))
    personal = persona_steps(events)
    if personal:
        report.persona_prompt_set = persona_prompts.version
    llm = RecordedLLM(events)
    vectors = RecordedVectors(events)
    model = recorded_embedding_model(events) or "recorded"
    states: dict[int, ConversationState] = {base.last_seq: base}
    state = base
    steps = {step[0].seq: step for step in thinking_steps(events)}
    remembered = {step[0].seq: step for step in memory_steps(events)}
    reflected = {step[0].seq: step for step in reflection_steps(events)}
    recall: TurnRecall | None = None  # the replayed recall, for the turn right after its recall event
    index = 0
    while index < len(events):
        event = events[index]
        step = steps.get(event.seq) or remembered.get(event.seq) or reflected.get(event.seq) or personal.get(event.seq)
        if step is not None:
            if event.seq in personal:
                await verify_persona_step(key, step, states, persona_prompts, llm, report, persona_comparison)
            elif event.seq in reflected:
                await _verify_reflection_step(key, event, states, prompts, llm, report, comparison)
            elif event.seq in remembered:
                await _verify_memory_step(key, step, states, prompts, llm, vectors, model, report, comparison)
            else:
                await _verify_step(key, step, states, prompts, llm, report, comparison)
            for recorded in step:
                state = apply(state, recorded)
                states[state.last_seq] = state
            index += len(step)
        else:
            if isinstance(event.payload, Recall):
                recall = _verify_recall(key, event, states, state, report)
            elif check_replies and isinstance(event.payload, Turn):
                before = events[index - 1] if index else None
                made = recall if before is not None and isinstance(before.payload, Recall) else None
                bases = talker_bases(key, state, states, before if made is not None else None, events[:index])
                await _verify_turn(key, event, bases, prompts, llm, report, made, comparison)
            state = apply(state, event)
            states[state.last_seq] = state
            index += 1
        for old in [seq for seq in states if seq < state.last_seq - KEPT_STATES]:
            del states[old]
    report.recorded_answers = llm.recorded_calls
    report.model_calls = llm.live_calls
    for divergence in report.divergences:
        provenance = divergence.recorded.get("provenance") if isinstance(divergence.recorded, dict) else None
        if isinstance(provenance, dict):
            version = str(provenance.get("prompt_set", ""))
            (persona_comparison if is_persona_prompt_set(version) else comparison).met.add(version)
    report.prompt_notes = comparison.notes() + persona_comparison.notes()
    return report


def _verify_recall(key: StreamKey, event: Event, states: dict[int, ConversationState], state: ConversationState,
                   report: VerifyReport) -> TurnRecall | None:
    """Recall again from the state the recall was made from, with its recorded vector, at its
    timestamp; compare what it names. Returns the replayed recall (the next turn's Talker reads its block)."""
    recorded = cast(Recall, event.payload)  # the caller checked
    basis = basis_of(key, event, states) if event.causation is not None else state
    if basis is None:
        report.divergences.append(Divergence(event.seq, f"the state this recall started from ({event.causation}) is unknown"))
        return None
    report.steps += 1
    try:
        replayed = replay_recall(basis, recorded, event.timestamp)
    except Exception as exc:  # e.g. a recorded vector that no longer fits the beliefs
        report.divergences.append(Divergence(event.seq, f"the recall failed on replay: {exc}"))
        return None
    fields = ("belief_ids", "review_ids", "edges")
    old = {name: [list(item) if isinstance(item, tuple) else item for item in getattr(recorded, name)] for name in fields}
    new = {name: [list(item) if isinstance(item, tuple) else item for item in getattr(replayed.payload, name)]
           for name in fields}
    if old != new:
        differing = ", ".join(name for name in fields if old[name] != new[name])
        report.divergences.append(Divergence(event.seq, f"recall differs in {differing}", old, new))
    return replayed


def talker_bases(key: StreamKey, state: ConversationState, states: dict[int, ConversationState],
                 recall: Event | None, earlier: Sequence[Event]) -> list[ConversationState]:
    """The states a turn's Talker may have been asked from, newest first: ``state`` (just before
    the turn), then each earlier one back to the previous turn — the Thinker's events that landed
    while the Talker waited for the model were not in its request. With a ``recall``, the state
    its causation names comes first (the Talker was asked from the recall's basis). The client's
    ``instructions`` recorded in the turn's own append are applied on top of earlier states (the
    recall's named basis included: a recall names the logged state it saw, before the instructions
    were applied), as the live turn applied them before asking."""
    own = [event for event in earlier[-2:] if isinstance(event.payload, Instructions)]

    def instructed(candidate: ConversationState) -> ConversationState:
        for instruction in own:
            if instruction.seq > candidate.last_seq:
                candidate = apply(candidate, replace(instruction, seq=candidate.last_seq + 1))
        return candidate

    bases = [state]
    if recall is not None and recall.causation is not None:
        named = basis_of(key, recall, states)
        if named is not None and named.last_seq < state.last_seq:
            bases.insert(0, instructed(named))
    for seq in sorted(states, reverse=True):
        candidate = states[seq]
        if seq >= state.last_seq or candidate.turn_count != state.turn_count:
            if candidate.turn_count != state.turn_count:
                break
            continue
        candidate = instructed(candidate)
        if all(candidate is not known for known in bases):
            bases.append(candidate)
    return bases


async def _verify_turn(key: StreamKey, event: Event, bases: list[ConversationState], prompts: PromptSet,
                       llm: RecordedLLM, report: VerifyReport, recalled: TurnRecall | None = None,
                       comparison: PromptComparison | None = None) -> None:
    """The Talker's reply made again by the turn's own code (:func:`~mirror.cognition.turn.compose_mirror_turn`)
    from the state it was asked from (the first of ``bases``, :func:`talker_bases`, whose request
    the log answered), with the replayed recall (``recalled``) as the live turn had its recall,
    and every answer from the log."""
    state = bases[0]
    payload = cast(Turn, event.payload)  # the caller checked isinstance(event.payload, Turn)
    if event.causation is not None:
        return  # a reply copied from another branch (a recompute keeps them): not produced here
    if event.provenance is None:
        report.unverifiable += 1
        return
    report.steps += 1
    config = config_from(event.provenance, payload.mode, talker=True)
    if payload.memory is not None:
        config = replace(config, memory=payload.memory)
    if payload.reflection is not None:
        config = replace(config, reflection=payload.reflection)

    async def replayed_recall(basis: ConversationState, message: str, now: float) -> TurnRecall | None:
        return recalled

    try:
        for index, state in enumerate(bases):
            try:
                composed = await compose_mirror_turn(state, payload.user_message, llm=llm, prompts=prompts,
                                                     config=config,
                                                     now=event.timestamp, recaller=replayed_recall,
                                                     idempotency_key=payload.idempotency_key)
                break
            except RecordingMiss:
                if index == len(bases) - 1:
                    raise
    except RecordingMiss:
        cause = comparison.cause(event.provenance.prompt_set, "talker") if comparison is not None else "a new request"
        report.divergences.append(Divergence(
            event.seq, f"talker: the replay asked a request the log never answered ({cause}); the Talker could not "
            "reply where the log has a turn", comparable(event), None, RECORDING_MISS, "talker"))
        return
    except Exception as exc:  # the replay could not even produce a reply: that is the divergence
        report.divergences.append(Divergence(event.seq, f"the Talker failed on replay: {exc}"))
        return
    # A version-2 turn did not record whether memory was on; its replay does not claim to know either.
    turn = composed.turn if payload.memory is not None else replace(composed.turn, memory=None)
    if payload.reflection is None:  # nor did a version-3 turn record whether reflection was on
        turn = replace(turn, reflection=None)
    replayed = make_event(key, event.seq, turn, turn=state.turn_count, provenance=composed.provenance,
                          timestamp=event.timestamp, causation=event.causation)
    compare([event], [replayed], report, comparison)


async def _verify_step(key: StreamKey, step: list[Event], states: dict[int, ConversationState],
                       prompts: PromptSet, llm: RecordedLLM, report: VerifyReport,
                       comparison: PromptComparison | None = None) -> None:
    first = step[0]
    provenance = next((event.provenance for event in step if event.provenance is not None), None)
    basis = step_basis(key, first, provenance, states, report)
    if basis is None:
        return
    failure = next((event.payload for event in step if isinstance(event.payload, ThinkerFailed)), None)
    attempt = failure.attempt if failure is not None else 1
    config = config_from(provenance, basis.mode, talker=False)
    thinking = await STAGE["thinking"].run(basis, StageContext(llm, prompts, config), attempt)
    replayed = thinking.events(key, first.seq, timestamp=first.timestamp, causation=first.causation)
    if config.mode == "full" and isinstance(step[-1].payload, Monologue) and len(step) < len(replayed):
        replayed = replayed[: len(step)]  # a step cut between its two events: the next step finishes it
    compare(step, replayed, report, comparison)


class _OnlyTheRecordedCall:
    """A failed insight or reflection step, asked again: the call its provenance names is answered
    by the recording (the failure's own: recordings of one fingerprint are served in order), every
    other call fails as the step recorded it failing.

    A later attempt may have asked the failed call again and got an answer (a consolidation that
    failed once, then worked): the failed attempt must not be served that answer."""

    def __init__(self, event: Event, failure: ThinkerFailed, llm: RecordedLLM) -> None:
        self.provenance, self.failure, self.llm = event.provenance, failure, llm

    async def chat(self, request: ChatRequest) -> ChatResponse:
        if self.provenance is not None and request.fingerprint() == self.provenance.request_fingerprint:
            return await self.llm.chat(request)
        raise ReplayedFailure(self.failure.error_type, self.failure.message)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.llm.embed(texts)


async def _verify_memory_step(key: StreamKey, step: list[Event], states: dict[int, ConversationState],
                              prompts: PromptSet, llm: RecordedLLM, vectors: RecordedVectors, model: str,
                              report: VerifyReport, comparison: PromptComparison | None = None) -> None:
    first, last = step[0], step[-1]
    basis = step_basis(key, first, last.provenance, states, report)
    if basis is None:
        return
    failure = last.payload if isinstance(last.payload, ThinkerFailed) else None
    step_model = next((e.payload.embedding_model for e in step if isinstance(e.payload, Belief) and e.payload.embedding_model),
                      model)
    # A failed step wrote no vectors: whatever it asked the log cannot answer fails as recorded.
    missing = None if failure is None else RecordedStepFailure(failure.error_type, failure.message)
    embedder = RecordedEmbedder(vectors, step_model, missing=missing)
    asked: LLM = llm if failure is None else FailsAsRecorded(llm, failure)
    config = config_from(last.provenance, basis.mode, talker=False)
    thinking = await STAGE["memory"].run(basis, StageContext(asked, prompts, config, embedder),
                                         failure.attempt if failure else 1)
    report.embedding_calls += embedder.calls
    compare(step, thinking.events(key, first.seq, timestamp=first.timestamp, causation=first.causation), report,
             comparison)


async def _verify_reflection_step(key: StreamKey, event: Event, states: dict[int, ConversationState],
                                  prompts: PromptSet, llm: RecordedLLM, report: VerifyReport,
                                  comparison: PromptComparison | None = None,
                                  policy: ReflectionPolicy = DEFAULT_POLICY) -> None:
    basis = step_basis(key, event, event.provenance, states, report)
    if basis is None:
        return
    thinking = await replay_reflection_step(event, basis, llm, prompts, policy)
    compare([event], thinking.events(key, event.seq, timestamp=event.timestamp, causation=event.causation), report,
             comparison)


async def replay_reflection_step(event: Event, basis: ConversationState, llm: RecordedLLM, prompts: PromptSet,
                                 policy: ReflectionPolicy = DEFAULT_POLICY) -> Thinking:
    """The insight or reflection step ``event`` records, made again from ``basis`` over the recorded answers."""
    payload = event.payload
    failure = payload if isinstance(payload, ThinkerFailed) else None
    asked: LLM = llm if failure is None else _OnlyTheRecordedCall(event, failure, llm)
    config = replace(config_from(event.provenance, basis.mode, talker=False), reflection=True)
    attempt = failure.attempt if failure is not None else 1
    if isinstance(payload, Insight) or (failure is not None and failure.stage == "insight"):
        return await STAGE["insight"].run(basis, StageContext(asked, prompts, config, policy=policy), attempt)
    forced = isinstance(payload, Reflection) and FORCED in payload.triggers
    # A failure records no triggers (nor do they change it): those due, or forced when none is.
    triggers = forced_triggers(basis, policy) if forced else (due(basis, policy) or forced_triggers(basis, policy))
    return await STAGE["reflection"].run(basis, StageContext(asked, prompts, config, policy=policy, triggers=triggers),
                                         attempt)

__all__ = [
    "Divergence", "RECORDING_MISS", "REFLECTION_STAGES", "VerifyReport", "config_from", "memory_steps",
    "reflection_steps", "replay_reflection_step", "thinking_steps", "verify_events",
]
