"""What a why question reads of a long branch: only the events its answer rests on.

:mod:`mirror.replay.why` answers from a list of events; these functions choose that list through
a :class:`~mirror.replay.History` (a fork's inherited events included), so an answer costs what
its subject's history holds rather than the branch's length:

- an event (:func:`events_for_event`): the events up to it and, for a belief or an edge, the few
  after it up to its memory step;
- a belief (:func:`read_why_belief`): the events of :data:`~mirror.replay.why.BELIEF_TOUCHES`
  whose records name it (the log searches the records and decodes only what matched), then its
  origin's turn (found in the branch's index, read alone) and the memory step after the origin.
  The answer is the one :func:`~mirror.replay.why.why_belief` gives from the whole branch.
"""

from __future__ import annotations

import asyncio

from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Edge, MemoryStep

from .history import History
from .why import BELIEF_TOUCHES, Why, why_belief

__all__ = ["MEMORY_STEP_LOOKAHEAD", "events_for_event", "read_why_belief"]

MEMORY_STEP_LOOKAHEAD = 256
"""How many events past a belief or an edge a question about it reads to find its memory step
(the step's beliefs and edges come just before it: an extraction writes a few dozen at most)."""


async def events_for_event(history: History, key: StreamKey, seq: int, last: int) -> list[Event]:
    """The events up to ``seq``; past it too, up to the memory step, when ``seq`` is a belief or an edge."""
    events = await history.events(key, until_seq=seq)
    if events and isinstance(events[-1].payload, Belief | Edge) and seq < last:
        later = await history.events(key, after_seq=seq, until_seq=min(last, seq + MEMORY_STEP_LOOKAHEAD))
        step = next((index for index, event in enumerate(later) if isinstance(event.payload, MemoryStep)), None)
        events += later if step is None else later[: step + 1]
    return events


async def read_why_belief(history: History, key: StreamKey, belief_id: str, last: int) -> Why:
    """:func:`why_belief` of ``belief_id`` from the events that name it and its origin's
    surroundings; :class:`~mirror.replay.errors.UnknownSubject` when no event names it."""
    found = await history.find(key, types=BELIEF_TOUCHES, mentioning=belief_id)
    why = why_belief(key, found, belief_id)
    origin = why.origin
    if origin is None or not isinstance(origin.payload, Belief):
        return why
    source_turn = origin.payload.source_turn
    index = await history.index(key, until_seq=origin.seq) if source_turn is not None else []
    turn_seq = next((entry.seq for entry in reversed(index) if entry.type == "turn" and entry.turn == source_turn), None)
    turn, step = await asyncio.gather(
        history.events(key, after_seq=turn_seq - 1, until_seq=turn_seq) if turn_seq else _nothing(),
        history.find(key, types=(MemoryStep.TYPE,), after_seq=origin.seq,
                     until_seq=min(last, origin.seq + MEMORY_STEP_LOOKAHEAD)))
    context = {event.seq: event for event in (*found, *turn, *step)}
    return why_belief(key, [context[seq] for seq in sorted(context)], belief_id)


async def _nothing() -> list[Event]:
    return []
