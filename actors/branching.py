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

A turn placed **quickly** (issue 38: the gateway sends a transcript to ``main`` with its digest,
without reading the log) continues the branch only when the branch's turns are exactly the
transcript's exchanges: the conversation compares the digest with its own
(:class:`BranchTranscript`, kept between turns); anything else is
:class:`~mirror.actors.errors.TranscriptElsewhere`, nothing appended, and the gateway places the
turn the long way.
"""

from __future__ import annotations

from collections.abc import Callable

from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet
from mirror.cognition.transcript_digest import EMPTY, digest_of, link
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

from .errors import HistoryMoved, TranscriptElsewhere

__all__ = ["BranchTranscript", "place"]


class BranchTranscript:
    """The digest of one branch's turns (inherited ones included), kept by its conversation between turns.

    Extended from the state's recent turns as the branch grows; read from the log only when they
    do not reach back to what it last digested (the first time, or after a gap of more than the
    recent-turns window): once per activation, not once per request."""

    def __init__(self, key: StreamKey, log: LogAccess) -> None:
        self.key = key
        self.log = log
        self._turns = 0
        self._last_seq = 0
        """The seq of the last turn digested (0: none)."""
        self._digest = EMPTY

    async def digest(self, state: ConversationState) -> str | None:
        """The digest of the branch's turns as ``state`` holds them; ``None`` when the log does not
        hold those older than the state's recent turns (yet): the caller takes it as no match."""
        if self._turns != state.turn_count:
            if not self._extend(state):
                logged = await History(self.log, materialize=False).find(self.key, types=("turn",))
                self._turns, self._last_seq, self._digest = 0, 0, EMPTY
                for event in logged:
                    payload = event.payload
                    assert isinstance(payload, Turn)
                    self._turns, self._last_seq = self._turns + 1, event.seq
                    self._digest = link(self._digest, payload.user_message, payload.reply)
                if not self._extend(state):
                    return None
        return self._digest

    def _extend(self, state: ConversationState) -> bool:
        """Digest the state's recent turns after the last one digested, if they are all that is missing."""
        newer = [turn for turn in state.recent_turns if turn.seq > self._last_seq]
        if self._turns + len(newer) != state.turn_count:
            return False
        if newer:
            self._digest = digest_of(((turn.user_message, turn.reply) for turn in newer), self._digest)
            self._turns, self._last_seq = state.turn_count, newer[-1].seq
        return True


async def place(writer: ConversationWriter, placed: Continuation, log: LogAccess, *, prompts: PromptSet,
                persona_prompts: PromptSet, config: Callable[[ConversationState], MirrorConfig],
                transcript: BranchTranscript | None = None) -> None:
    """Make ``writer``'s branch what ``placed`` says the turn continues (see the module docstring).

    ``config(state)``: how the branch thinks once it holds ``state`` (the settings its turns
    recorded), for the adopted turns' ``turn`` events; ``transcript``: the branch's digest, which a
    quickly placed turn (``placed.digest``) is checked against."""
    key = writer.key
    if placed.digest is not None:
        if transcript is None:
            transcript = BranchTranscript(key, log)
        state = writer.state
        if state.turn_count != placed.turns or await transcript.digest(state) != placed.digest:
            raise TranscriptElsewhere(key, state.turn_count)
        return
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
