"""What an interrupted recompute left at the end of its branch, so the next run finishes it.

A recompute writes its branch with pipelined appends, and the bus stores one append's events
one message at a time: a run that dies (its driver killed, its task with it) can stop between
two publishes of one append. The next run rebuilds the branch's state from the log and carries
on, and where the log ends in the first part of an append, it appends the rest of that append
instead of making it again — so a resumed branch is event for event the one a single run writes.

Three appends have more than one event:

- a turn (``recall`` then ``turn``): the recall alone is an :class:`Orphan`; the next run appends
  the turn after it (:func:`~mirror.replay.recompute._rethink`);
- a thinking step (``monologue`` then ``narrative``): the thinking stage itself finishes it
  (:func:`~mirror.cognition.pipeline.threads_of_a_cut_step`);
- a memory step (its ``belief`` and ``edge`` events, then the ``memory_step`` that marks the turn
  remembered): its first events alone are a :class:`CutMemoryStep`. Remembering the turn again
  from the state after them would gate the statements against the beliefs that landed and write
  each as a ``reinforce`` — one belief event more than a single run, and a belief seen twice.
  :func:`finish_memory_step` makes the step again from the state before it and appends only what
  did not land.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirror.cognition.embeddings.port import Embedder
from mirror.cognition.llm import LLM
from mirror.cognition.memory.stage import memory_behind
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.stages import STAGE, StageContext
from mirror.cognition.writer import ConversationWriter
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Edge, Recall
from mirror.projections.state import ConversationState

from .history import History


@dataclass(frozen=True)
class Orphan:
    """A ``recall`` the previous run appended without its ``turn``, with the state it was made from."""

    event: Event
    state_before: ConversationState


async def orphan_recall(branch: StreamKey, state: ConversationState, history: History) -> Orphan | None:
    """The branch's last event when it is a ``recall`` (its turn's append was cut after it), else None."""
    if state.last_seq < 1:
        return None
    (last,) = await history.events(branch, after_seq=state.last_seq - 1, until_seq=state.last_seq)
    if not isinstance(last.payload, Recall):
        return None
    return Orphan(last, await history.state_at(branch, last.seq - 1))


@dataclass(frozen=True)
class CutMemoryStep:
    """The first events of the newest turn's memory step (``landed``: beliefs and edges, no
    ``memory_step``), with the state the step was made from (the state before them)."""

    landed: tuple[Event, ...]
    state_before: ConversationState


async def cut_memory_step(branch: StreamKey, state: ConversationState, history: History) -> CutMemoryStep | None:
    """The memory step the branch ends in the middle of, else None.

    Only a memory step writes ``belief`` and ``edge`` events, and it ends in a ``memory_step``;
    so belief and edge events of the newest turn at the end of the branch, with the turn not yet
    remembered, are a step cut short (:func:`finish_memory_step` checks that the step made again
    from the state before them begins with them)."""
    if not state.recent_turns or not memory_behind(state):
        return None
    turn = state.turn_count - 1
    after_turn = await history.events(branch, after_seq=state.recent_turns[-1].seq, until_seq=state.last_seq)
    landed: list[Event] = []
    for event in reversed(after_turn):
        if not isinstance(event.payload, (Belief, Edge)) or event.turn != turn:
            break
        landed.insert(0, event)
    if not landed:
        return None
    return CutMemoryStep(tuple(landed), await history.state_at(branch, landed[0].seq - 1))


async def finish_memory_step(
    writer: ConversationWriter, cut: CutMemoryStep, llm: LLM, prompts: PromptSet, config: MirrorConfig,
    embedder: Embedder | None,
) -> bool:
    """Make the cut step again from the state before it and append what did not land; True if
    done. False (nothing written) when the step made again does not begin with the events that
    landed (a model that answers otherwise the second time): the think loop then remembers the
    turn from the branch as it is, as it would after any other failure."""
    memory = STAGE["memory"]
    context = StageContext(llm, prompts, config, embedder)
    if not memory.behind(writer.state, context):
        return False
    first = cut.landed[0]
    step = await memory.run(cut.state_before, context, 1)
    made = step.events(writer.key, first.seq, causation=first.causation)
    landed = len(cut.landed)
    if not step.ok or len(made) <= landed or [e.payload for e in made[:landed]] != [e.payload for e in cut.landed]:
        return False
    if writer.state.last_seq != made[landed - 1].seq:
        raise ValueError(f"{writer.key}: the cut memory step ends at seq {made[landed - 1].seq}, "
                         f"the branch at {writer.state.last_seq}")
    await writer.append(lambda state: made[landed:])
    return True


__all__ = ["CutMemoryStep", "Orphan", "cut_memory_step", "finish_memory_step", "orphan_recall"]
