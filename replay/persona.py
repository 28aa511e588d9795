"""Replay of the persona mind: its turn path, its background steps and its ``persona`` event.

A persona conversation (:mod:`mirror.cognition.persona`) records each step of its cycle as an
event, and each is verified like MIRROR's steps (:mod:`~mirror.replay.verify`): rebuilt from the
state its ``causation`` names, asked again through :class:`~mirror.replay.recorded.RecordedLLM`
with the persona prompt set, and compared event for event. Zero model and zero embedding calls:

- **the turn path** — ``interpretation``, ``retrieval``, ``appraisal``/``plan`` and the ``turn``
  they share a causation with (one append) — is :func:`~mirror.cognition.persona.turn_path.persona_turn`
  again. Its embedder answers only the query vector the ``retrieval`` recorded (a retrieval
  without one was made without an embedder, or with one that failed: the replay has none either);
- **each background step** — ``emotion``, ``relationship``, ``goal``, ``episode``, or a
  ``thinker_failed`` of one of those stages (``importance`` for the episode) — is
  :func:`~mirror.cognition.persona.background.persona_step` again; an episode's vector comes from
  its own payload, and a failed step's calls the log does not answer fail as recorded;
- **the** ``persona`` **event** must carry the version its card hashes to (sha256 of the card's
  canonical JSON, as :attr:`~mirror.cognition.persona.model.Persona.version`): a card edited in
  the log is a divergence. Its biography vectors are the event's own: nothing to embed;
- **its** ``greeting`` must be the card's ``first_mes`` with the macros substituted for the
  recorded user (:func:`~mirror.cognition.persona.turn_path.greeting_of`): an edited greeting is
  a divergence.

Recompute (:func:`rethink_persona`) re-runs a persona conversation on a branch the same way the
live conversation ran it: each recorded user message through the turn path from the branch's
state, then the background steps, with the persona prompt set the recompute was given.

The persona prompt set is a set of its own (``persona-<hash>``): a verify is given it besides
MIRROR's (:func:`~mirror.cognition.persona.prompting.persona_prompt_set`, the built-in one by
default), and a request it cannot answer names the persona templates that changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from mirror.cognition.embeddings.port import Embedder, Embeddings
from mirror.cognition.errors import EmbeddingError
from mirror.cognition.llm import LLM
from mirror.cognition.persona.background import PERSONA_STAGES
from mirror.cognition.persona.model import canonical_json
from mirror.cognition.persona.turn_path import greeting_of
from mirror.cognition.prompts import PromptSet
from mirror.cognition.responses import PayloadDoesNotMatch, recorded_response
from mirror.cognition.stages import STAGE, StageContext
from mirror.cognition.turn import KeptReply, compose_persona_turn
from mirror.cognition.writer import ConversationWriter
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import (
    Appraisal,
    EmotionUpdate,
    Episode,
    GoalUpdate,
    Greeting,
    Interpretation,
    Payload,
    PersonaChosen,
    Plan,
    Provenance,
    RelationshipUpdate,
    Retrieval,
    ThinkerFailed,
    Turn,
)
from mirror.projections.state import ConversationState

from .compare import (
    RECORDING_MISS,
    Divergence,
    FailsAsRecorded,
    VerifyReport,
    comparable,
    compare,
    config_from,
    step_basis,
)
from .errors import RecordingMiss
from .prompt_record import PromptComparison
from .recorded import RecordedLLM
from .recorded_vectors import RecordedEmbedder, RecordedVectors

PATH_TYPES = (Interpretation, Retrieval, Appraisal, Plan)
"""The events a persona turn's path appends before its ``turn``."""
BACKGROUND_STAGES: dict[type[Payload], str] = {
    EmotionUpdate: "emotion", RelationshipUpdate: "relationship", GoalUpdate: "goal", Episode: "importance",
}
"""Each background step's event and the stage that makes it."""
TURN_PATH_STAGE = "persona_turn"
"""The ``stage`` of a divergence where the turn path asked a request the log never answered."""
EPISODE_NOT_EMBEDDED = "the episode could not be embedded: "
"""How :func:`~mirror.cognition.persona.background.persona_step` words a failed episode vector."""


def persona_failure(payload: Payload) -> bool:
    """A ``thinker_failed`` of a persona background stage (not a MIRROR thinking step)."""
    return isinstance(payload, ThinkerFailed) and payload.stage in PERSONA_STAGES


def is_persona_prompt_set(version: str) -> bool:
    """Whether a recorded prompt-set version is the persona mind's (``persona-<hash>``)."""
    return version.startswith("persona-")


def persona_steps(events: Sequence[Event]) -> dict[int, list[Event]]:
    """The recorded persona steps by their first seq: each ``persona`` event on its own, each turn
    path (an ``interpretation`` to the ``turn`` of the same causation), each background event or
    persona-stage failure on its own."""
    steps: dict[int, list[Event]] = {}
    index = 0
    while index < len(events):
        event = events[index]
        payload = event.payload
        if isinstance(payload, Interpretation):
            end = index + 1
            while (end < len(events) and isinstance(events[end].payload, PATH_TYPES)
                   and events[end].causation == event.causation):
                end += 1
            if end < len(events) and isinstance(events[end].payload, Turn):
                end += 1  # the path's turn: caused by the same state, or a kept reply naming the one it copies
            steps[event.seq] = list(events[index:end])
            index = end
            continue
        if isinstance(payload, PersonaChosen) and index + 1 < len(events) \
                and isinstance(events[index + 1].payload, Greeting):
            steps[event.seq] = [event, events[index + 1]]  # the persona and its greeting: one append
            index += 2
            continue
        if isinstance(payload, PersonaChosen | Greeting) or type(payload) in BACKGROUND_STAGES \
                or persona_failure(payload):
            steps[event.seq] = [event]
        index += 1
    return steps


async def verify_persona_step(key: StreamKey, step: list[Event], states: dict[int, ConversationState],
                              prompts: PromptSet, llm: RecordedLLM, report: VerifyReport,
                              comparison: PromptComparison | None = None) -> None:
    """Verify one step of :func:`persona_steps` (``prompts``: the persona prompt set)."""
    first = step[0]
    if isinstance(first.payload, PersonaChosen):
        check_persona_event(first, report)
        if len(step) > 1:
            check_greeting(step[1], first.payload, report)
    elif isinstance(first.payload, Greeting):
        before = states.get(first.seq - 1)
        persona = None if before is None else before.persona
        chosen = None if persona is None else PersonaChosen(persona.name, persona.version, persona.card,
                                                            user_name=persona.user_name)
        check_greeting(first, chosen, report)
    elif isinstance(first.payload, Interpretation):
        await _verify_turn_path(key, step, states, prompts, llm, report, comparison)
    else:
        await _verify_background(key, first, states, prompts, llm, report, comparison)


def check_persona_event(event: Event, report: VerifyReport) -> None:
    """The ``persona`` event's version must be the hash of its card (what the prompts are built from)."""
    chosen = cast(PersonaChosen, event.payload)  # the caller checked
    report.steps += 1
    try:
        card = canonical_json(json.loads(chosen.card))
    except ValueError as exc:
        report.divergences.append(Divergence(event.seq, f"the persona's card is not JSON: {exc}"))
        return
    version = hashlib.sha256(card.encode("utf-8")).hexdigest()
    if version != chosen.version:
        report.divergences.append(Divergence(
            event.seq, "persona differs in payload.version: the card hashes to another version (the card or the "
            "version was edited)", {"version": chosen.version}, {"version": version}))


def check_greeting(event: Event, chosen: PersonaChosen | None, report: VerifyReport) -> None:
    """A ``greeting`` must be what its persona's card gives (:func:`greeting_of`): the card's
    ``first_mes`` with its macros substituted for the recorded user; no model is asked."""
    greeting = cast(Greeting, event.payload)  # the callers checked
    report.steps += 1
    expected = None if chosen is None else greeting_of(chosen)
    if chosen is None:
        report.divergences.append(Divergence(event.seq, "a greeting without a persona before it", comparable(event)))
    elif expected is None or expected != greeting:
        report.divergences.append(Divergence(
            event.seq, "greeting differs from what its persona's card gives (the card's first_mes, macros substituted)",
            comparable(event), None if expected is None else {"text": expected.text,
                                                              "persona_version": expected.persona_version}))


async def _verify_turn_path(key: StreamKey, step: list[Event], states: dict[int, ConversationState],
                            prompts: PromptSet, llm: RecordedLLM, report: VerifyReport,
                            comparison: PromptComparison | None) -> None:
    first, last = step[0], step[-1]
    if not isinstance(last.payload, Turn):
        report.divergences.append(Divergence(last.seq, "a persona turn's path ends without its turn"))
        return
    provenance = last.provenance
    basis = step_basis(key, first, provenance, states, report)
    if basis is None or provenance is None:  # no provenance: counted unverifiable
        return
    for event in step:  # an edited step's answer is refused here, at its own seq, before anything is asked
        try:
            recorded_response(event)
        except PayloadDoesNotMatch as exc:
            report.divergences.append(Divergence(event.seq, f"{event.type} differs from what its model answered: {exc}",
                                                 comparable(event)))
            return
    retrieval = next((event for event in step if isinstance(event.payload, Retrieval)), None)
    embedder = _query_embedder(retrieval)
    config = replace(config_from(provenance, "baseline", talker=True), memory=False, reflection=False)
    payload = last.payload
    # A reply a recompute kept names the recorded turn it copies: the path before it is made again.
    kept = None if last.causation == first.causation or last.causation is None else \
        KeptReply(payload, provenance, last.causation)
    try:
        composed = await compose_persona_turn(basis, payload.user_message, llm=llm, embedder=embedder, prompts=prompts,
                                              config=config, now=first.timestamp, kept=kept,
                                              idempotency_key=payload.idempotency_key)
    except RecordingMiss:
        # the path's steps may be recorded with another set than a kept reply's turn (the parent's)
        version = next((event.provenance.prompt_set for event in step if event.provenance is not None
                        and event.provenance.prompt_set != prompts.version), provenance.prompt_set)
        cause = comparison.cause(version, TURN_PATH_STAGE) if comparison is not None else f"recorded with {version}"
        report.divergences.append(Divergence(
            first.seq, f"{TURN_PATH_STAGE}: the replay asked a request the log never answered ({cause}); the persona "
            "could not reply where the log has a turn", comparable(first), None, RECORDING_MISS, TURN_PATH_STAGE))
        return
    except Exception as exc:  # the replay could not even produce a reply: that is the divergence
        report.divergences.append(Divergence(first.seq, f"the persona's turn path failed on replay: {exc!r}"))
        return
    finally:
        report.embedding_calls += 0 if embedder is None else embedder.calls
    replayed = composed.events(key, first.seq)
    if first.causation is None:  # recorded before a step named the state it came from
        replayed = [replace(event, causation=None) if event.causation == composed.causation else event
                    for event in replayed]
    compare(step, replayed, report, comparison)


async def rethink_persona(writer: ConversationWriter, turns: Sequence[Event], done: int, llm: LLM,
                          embedder: Embedder | None, prompts: PromptSet, persona_prompts: PromptSet,
                          thinker: Provenance | None, attempts: int, *, counterfactual: bool = False,
                          instructions: Mapping[int, str] | None = None) -> list[dict[str, Any]]:
    """A persona conversation's recorded turns after the first ``done``, re-run on ``writer``'s
    branch as the live conversation runs them (:meth:`~mirror.cognition.writer.ConversationWriter.take_persona_turn`,
    then the background steps): each user message's path from the branch's state (a request the
    prompt change did not touch is answered from the recording). The recorded reply is kept (the
    ``turn`` names the recorded one it copies) unless ``counterfactual``, which asks for a new
    formulation. ``thinker``: a recorded background step's provenance (its model and parameters).
    ``instructions``: the client's recorded instructions, by the seq of the turn they came with.
    Returns each reply as recorded and as regenerated (counterfactual only)."""
    config = replace(config_from(thinker, "baseline", talker=False), mode="baseline", memory=False, reflection=False)
    replies: list[dict[str, Any]] = []

    async def background() -> None:
        await writer.think_until_current(llm, prompts, config, attempts=attempts, embedder=embedder,
                                         persona_prompts=persona_prompts)

    await background()  # a resumed run finishes the steps an earlier run left
    for recorded in turns[done:]:
        payload = cast(Turn, recorded.payload)  # the caller passes turn events
        asked = replace(config_from(recorded.provenance or thinker, "baseline", talker=True), memory=False,
                        reflection=False)
        kept = None if counterfactual else KeptReply(payload, recorded.provenance, recorded.id)
        composed, turn = await writer.take_persona_turn(payload.user_message, llm=llm, embedder=embedder,
                                                        prompts=persona_prompts, config=asked, kept=kept,
                                                        idempotency_key=payload.idempotency_key,
                                                        instructions=(instructions or {}).get(recorded.seq))
        if counterfactual:
            replies.append({"seq": turn.seq, "user_message": payload.user_message, "recorded": payload.reply,
                            "regenerated": composed.said.reply})
        await background()
    return replies


def _query_embedder(retrieval: Event | None) -> RecordedEmbedder | None:
    """The embedder of a replayed retrieval: the query vector it recorded, and nothing else."""
    if retrieval is None:
        return None
    payload = cast(Retrieval, retrieval.payload)
    if not payload.query_embedding:
        return None  # the live turn retrieved without a vector: so does its replay
    return RecordedEmbedder(RecordedVectors([retrieval]), payload.embedding_model)


async def _verify_background(key: StreamKey, event: Event, states: dict[int, ConversationState], prompts: PromptSet,
                             llm: RecordedLLM, report: VerifyReport, comparison: PromptComparison | None) -> None:
    payload = event.payload
    basis = step_basis(key, event, event.provenance, states, report)
    if basis is None:
        return
    failure = payload if isinstance(payload, ThinkerFailed) else None
    stage = failure.stage if failure is not None else BACKGROUND_STAGES[type(payload)]
    asked: LLM = llm if failure is None else FailsAsRecorded(llm, failure)
    embedder = _episode_embedder(event)
    config = config_from(event.provenance, "baseline", talker=False)
    context = StageContext(asked, prompts, config, embedder, persona_prompts=prompts)
    thinking = await STAGE[stage].run(basis, context, failure.attempt if failure is not None else 1)
    report.embedding_calls += 0 if embedder is None else embedder.calls
    compare([event], thinking.events(key, event.seq, timestamp=event.timestamp, causation=event.causation), report,
            comparison)


class _FailingEmbedder:
    """An episode's embedder that fails as the recorded step's did (the same words in its message)."""

    def __init__(self, model: str, shown: str) -> None:
        self._model, self.shown, self.calls = model, shown, 0

    @property
    def model(self) -> str:
        return self._model

    async def embed(self, texts: Sequence[str]) -> Embeddings:
        raise _AsRecorded(self.shown)

    async def aclose(self) -> None:
        return None


class _AsRecorded(EmbeddingError):
    """An embedding failure whose ``repr`` is the recorded one, so the step's message is too."""

    def __init__(self, shown: str) -> None:
        super().__init__(shown)
        self.shown = shown

    def __repr__(self) -> str:
        return self.shown


def _episode_embedder(event: Event) -> Embedder | None:
    """An importance step's embedder: the episode's own vector, or the failure the step recorded."""
    payload = event.payload
    if isinstance(payload, Episode):
        return RecordedEmbedder(RecordedVectors([event]), payload.embedding_model) if payload.embedding else None
    if (isinstance(payload, ThinkerFailed) and payload.stage == "importance"
            and payload.message.startswith(EPISODE_NOT_EMBEDDED)):
        return _FailingEmbedder("recorded", payload.message[len(EPISODE_NOT_EMBEDDED):])
    return None  # an importance step that failed before it embedded: never asked


__all__ = [
    "BACKGROUND_STAGES", "PATH_TYPES", "TURN_PATH_STAGE", "check_greeting", "check_persona_event", "is_persona_prompt_set",
    "persona_failure", "persona_steps", "rethink_persona", "verify_persona_step",
]
