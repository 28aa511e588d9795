"""A turn placed by its client's transcript: its branch checked, forked or caught up first.

Chat completions that resend the conversation are aligned against its branches at the gateway
(:mod:`mirror.gateway.openai.transcript`), which sends the turn to the branch it continues with
a :class:`~mirror.cognition.turn.Continuation`. Here, in the branch's own conversation (its single
writer), before the turn is composed:

- a **new branch** starts from the parent's state at the fork point and appends its ``fork``
  event (recording the prompt sets it is thought with, as a recompute's does), so its turns see
  the parent's history up to the fork and nothing after it;
- the branch must hold the number of turns the gateway saw: one that moved on since (another
  request appended, or forked the same branch first) is :class:`~mirror.actors.errors.HistoryMoved`
  and nothing is appended;
- the client's **adopted** exchanges (kept after an edited message) are appended as ``turn``
  events no model produced (no provenance: ``replay verify`` counts them unverifiable, recompute
  keeps them).

The fork event and the adopted turns are one fenced append: a second writer of the same new
branch gets a conflict, never a second fork.
"""

from __future__ import annotations

from collections.abc import Callable

from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.turn import Continuation
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import Head
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.log import LogAccess
from mirror.events.payloads import Turn
from mirror.projections.state import ConversationState
from mirror.replay.history import History
from mirror.replay.prompt_record import recorded_fork

from .errors import HistoryMoved

__all__ = ["place"]


async def place(writer: ConversationWriter, placed: Continuation, log: LogAccess, *, prompts: PromptSet,
                persona_prompts: PromptSet, config: Callable[[ConversationState], MirrorConfig]) -> None:
    """Make ``writer``'s branch what ``placed`` says the turn continues (see the module docstring).

    ``config(state)``: how the branch thinks once it holds ``state`` (the settings its turns
    recorded), for the adopted turns' ``turn`` events."""
    key = writer.key
    fork = None
    if placed.parent is not None:
        if writer.state.last_seq:
            raise HistoryMoved(key, f"a new branch forked from {placed.parent!r} after seq {placed.fork_seq}",
                               f"the branch already holds {writer.state.last_seq} events (another request forked it)")
        parent = StreamKey(key.tenant, key.conversation, placed.parent)
        base = (await History(log, materialize=False).rebuild(parent, placed.fork_seq)).state
        if base.last_seq != placed.fork_seq:
            raise HistoryMoved(key, f"{placed.parent!r} up to seq {placed.fork_seq}", f"it ends at seq {base.last_seq}")
        writer.rebase(base, Head(placed.fork_seq, writer.head.fence))
        fork = recorded_fork(placed.parent, placed.fork_seq, prompts, reason=placed.reason,
                             persona=persona_prompts if base.persona is not None else None)
    state = writer.state
    if state.turn_count != placed.turns:
        raise HistoryMoved(key, f"{placed.turns} turns before this one", f"{state.turn_count} (another request appended)")
    if fork is None and not placed.adopted:
        return
    settings = config(state)

    def build(state: ConversationState) -> list[Event]:
        events = [] if fork is None else [make_event(key, state.last_seq + 1, fork, turn=state.turn_count)]
        for index, (user_message, reply) in enumerate(placed.adopted):
            turn = Turn(user_message, reply, narrative_seq=None, mode=settings.mode, memory=settings.memory,
                        reflection=settings.reflection)
            events.append(make_event(key, state.last_seq + 1 + len(events), turn, turn=state.turn_count + index))
        return events

    await writer.append(build)
