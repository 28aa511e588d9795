"""A conversation's mind: the choice of ``mirror`` or ``persona``, and the persona's turn.

The choice is made once (:func:`persona_to_record`): a conversation whose events hold a
``persona`` event is that character for good, one whose first turn went without one is the
MIRROR mind for good; asking for another mind, persona or order later is
:class:`~mirror.actors.errors.SettingConflict` (the gateway's 409), and the same choice again
changes nothing. Choosing a persona appends its ``persona`` event and the card's greeting (a
``greeting`` event, when the card has a ``first_mes``). The persona turn itself is the writer's
(:meth:`~mirror.cognition.writer.ConversationWriter.take_persona_turn`, the code recompute and
verify run too): the persona event (on a first turn), the path's steps and the ``turn`` in one
fenced append; the writer's think loop runs the background steps afterwards.
"""

from __future__ import annotations

from mirror.cognition.embeddings import Embedder
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.persona.macros import DEFAULT_USER_NAME
from mirror.cognition.persona.turn_path import choose_persona
from mirror.cognition.turn import opening_events
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import PersonaChosen
from mirror.projections.state import ConversationState

from .errors import SettingConflict


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
        if mind.user_name is not None and mind.user_name != running.user_name:
            raise SettingConflict(key, "user_name", mind.user_name, running.user_name)
        return None
    if state.turn_count:
        if mind.mind != "mirror":
            raise SettingConflict(key, "mind", mind.mind, "mirror")
        return None
    if mind.mind == "mirror":
        return None
    assert mind.persona is not None  # MindChoice checks it
    return await choose_persona(mind.persona, embedder, mind.order, mind.user_name or DEFAULT_USER_NAME)


def persona_events(key: StreamKey, state: ConversationState, chosen: PersonaChosen, now: float) -> list[Event]:
    """The ``persona`` event and its greeting, after ``state``."""
    return opening_events(key, state.last_seq + 1, chosen, state.turn_count, now)


__all__ = ["persona_events", "persona_to_record"]
