"""A conversation's mind: the choice of ``mirror`` or ``persona``, and the persona's turn.

The choice is made once (:func:`persona_to_record`): a conversation whose events hold a
``persona`` event is that character for good, one whose first turn went without one is the
MIRROR mind for good; asking for another mind, persona or order later is
:class:`~mirror.actors.errors.SettingConflict` (the gateway's 409), and the same choice again
changes nothing. A persona turn (:func:`persona_turn`) runs the cycle's steps on the turn's path
(:mod:`mirror.cognition.persona.turn_path`) from the state as it is, then appends the persona
event (on a first turn), the steps' events and the ``turn`` in one fenced append; the writer's
think loop runs the background steps afterwards.
"""

from __future__ import annotations

import time

from mirror.cognition.embeddings import Embedder
from mirror.cognition.llm import LLM, TokenSink
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.persona.turn_path import choose_persona
from mirror.cognition.persona.turn_path import persona_turn as run_persona_turn
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.writer import ConversationWriter
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey, event_id
from mirror.events.payloads import PersonaChosen
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState

from .errors import SettingConflict
from .results import TurnResult


async def persona_to_record(key: StreamKey, state: ConversationState, mind: MindChoice | None,
                            embedder: Embedder | None) -> PersonaChosen | None:
    """The ``persona`` event ``mind`` asks to record (``None``: nothing to record), or
    :class:`SettingConflict` when the conversation already runs another mind, persona or order."""
    running = state.persona
    if mind is None:
        return None
    if running is not None:
        if mind.mind != "persona":
            raise SettingConflict(key, "mind", mind.mind, "persona")
        assert mind.persona is not None  # MindChoice checks it
        if mind.persona.version != running.version:
            raise SettingConflict(key, "persona", f"{mind.persona.name} ({mind.persona.version[:12]})",
                                  f"{running.name} ({running.version[:12]})")
        if mind.order != running.order:
            raise SettingConflict(key, "order", mind.order, running.order)
        return None
    if state.turn_count:
        if mind.mind != "mirror":
            raise SettingConflict(key, "mind", mind.mind, "mirror")
        return None
    if mind.mind == "mirror":
        return None
    assert mind.persona is not None  # MindChoice checks it
    return await choose_persona(mind.persona, embedder, mind.order)


def persona_event(key: StreamKey, state: ConversationState, chosen: PersonaChosen, now: float) -> Event:
    return make_event(key, state.last_seq + 1, chosen, turn=state.turn_count, timestamp=now)


async def persona_turn(writer: ConversationWriter, key: StreamKey, message: str, chosen: PersonaChosen | None,
                       llm: LLM, embedder: Embedder | None, prompts: PromptSet, config: MirrorConfig,
                       on_token: TokenSink | None = None) -> tuple[TurnResult, Event]:
    """The persona's reply to ``message``; every event is acknowledged before this returns.
    ``on_token``: the formulation's pieces as the model writes them."""
    started = time.perf_counter()
    now = time.time()
    state = writer.state
    basis = state if chosen is None else apply(state, persona_event(key, state, chosen, now))
    said = await run_persona_turn(basis, message, llm, embedder, prompts, config, on_token=on_token)
    talked = time.perf_counter()
    cause = event_id(key.tenant, key.conversation, key.branch, basis.last_seq)

    def build(current: ConversationState) -> list[Event]:
        events = [] if chosen is None else [persona_event(key, current, chosen, now)]
        return [*events, *said.events(key, current.last_seq + 1 + len(events), basis.turn_count, cause, now)]

    events = await writer.append(build)
    appended = time.perf_counter()
    turn = events[-1]
    retrieval_ms = said.step_ms.get("retrieval", 0.0)
    formulation = said.thoughts[-1].provenance
    result = TurnResult(
        reply=said.reply, turn=turn.turn, seq=turn.seq, narrative_seq=None, llm_ms=said.llm_ms,
        talk_ms=round((talked - started) * 1000, 3), append_ms=round((appended - talked) * 1000, 3),
        turn_ms=round((appended - started) * 1000, 3), recall_ms=round(retrieval_ms, 3),
        steps_ms=dict(said.step_ms),
        prompt_tokens=0 if formulation is None else formulation.prompt_tokens,
        completion_tokens=0 if formulation is None else formulation.completion_tokens,
    )
    return result, turn


__all__ = ["persona_event", "persona_to_record", "persona_turn"]
