"""The turn, written once: its request, and the code that makes a turn's events.

A turn's options are one value, :class:`TurnRequest`, built once at the edge (the native route,
chat completions, the CLI, the harness) and handed whole through the handle, the placements and
the Ray actors to the conversation. A new option (an idempotency key, a tenant's limits, a trace
context, a client's instructions) is a field here, the edge that fills it and the code that reads
it: nothing in between restates it.

The events a turn appends are made here and nowhere else, for both minds:

- :func:`compose_mirror_turn` — recall (when memory is on and there is something to recall) →
  the Talker → a ``recall`` and a ``turn`` event;
- :func:`compose_persona_turn` — a first turn's ``persona`` event (and its greeting), the persona cycle's steps on the
  turn's path (:mod:`mirror.cognition.persona.turn_path`) and the ``turn``.

The live conversation composes from its state and appends through the
:class:`~mirror.cognition.writer.ConversationWriter` (:meth:`~mirror.cognition.writer.ConversationWriter.take_turn`);
``recompute`` does the same on a branch with the recorded model answering what the prompt change
did not touch (and, unless counterfactual, the recorded reply kept: :class:`KeptReply`); ``replay
verify`` composes from the recorded basis with every answer recorded and compares the events. So
a change to the turn's code is seen by verify without a line of ``replay/`` changing.

How the turn recalls is the one thing the callers choose (:data:`Recaller`): live and recompute
embed the message (recompute from the log's vectors), verify re-runs the recorded recall with its
recorded vector, depth and analyzer.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey, event_id
from mirror.events.payloads import Instructions, PersonaChosen, Provenance, Turn
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState

from .embeddings.port import Embedder
from .instructions import instructions_change
from .llm import LLM, TokenSink
from .memory.turn import TurnRecall
from .persona.choice import MindChoice
from .persona.turn_path import PersonaTurn, opening, persona_turn
from .pipeline import MODES, MirrorConfig, talk
from .prompts import PromptSet


class InvalidTurnRequest(ValueError):
    """A turn request that cannot be a turn: not a message, an unknown mode, a malformed idempotency key."""


@dataclass(frozen=True, slots=True)
class Continuation:
    """Where a turn goes in its branch's history, as the client's transcript placed it (issue 35).

    Chat completions that resend the conversation are aligned against its branches
    (:mod:`mirror.gateway.openai.transcript`); the gateway then sends the turn to the branch to
    continue, with this. ``turns``: how many turns that branch held when the gateway looked (for a
    new branch, how many it inherits): a branch that has moved on since is refused, never appended
    to blindly. ``parent`` / ``fork_seq``: the branch is new, forked from ``parent`` after
    ``fork_seq`` (a ``fork`` event starts it). ``adopted``: the client's own exchanges, (user,
    reply), that the branch lacks after those turns (an earlier message edited, with the turns the
    client kept after it): recorded as turns no model produced before the new one.
    """

    turns: int
    parent: str | None = None
    fork_seq: int = 0
    adopted: tuple[tuple[str, str], ...] = ()
    reason: str = ""
    """Why a new branch was forked, in words (its ``fork`` event's ``reason``)."""
    digest: str | None = None
    """The quick placement (issue 38): the digest (:mod:`.transcript_digest`) of the client's
    exchanges, which the branch's turns must be exactly (else :class:`~mirror.actors.errors.TranscriptElsewhere`
    and nothing is appended: the gateway aligns the transcript against every branch instead)."""


MAX_KEY_CHARS = 255
"""The longest idempotency key (what Stripe and the IETF draft's examples allow; a UUID is 36)."""


@dataclass(frozen=True, slots=True)
class TurnRequest:
    """What a client asked of one turn. Frozen: built once at the edge, read where it is used.

    ``mode``, ``memory`` and ``reflection``: how the conversation thinks (a first turn fixes them;
    ``None``: the stack's default, or what the first turn fixed). ``mind``: the mind a first turn
    gives the conversation (a persona, with its order of plan and appraisal). ``sync``: wait for
    the previous turn's thinking first (the papers' benchmark setting). ``stream``: the client
    reads the reply token by token.
    """

    message: str
    sync: bool = False
    mode: str | None = None
    memory: bool | None = None
    reflection: bool | None = None
    mind: MindChoice | None = None
    stream: bool = False
    idempotency_key: str | None = None
    """The client's key for this request (``Idempotency-Key``): a retry with it is answered with
    the turn it appended (the key is recorded in the ``turn`` event), never a second turn."""
    instructions: str | None = None
    """The client's instructions (its system text; ``""``: none). ``None``: keep the conversation's
    current ones. A text other than the current one is recorded (an ``instructions`` event) with the turn."""
    continuation: Continuation | None = None
    """Where the turn goes in its branch's history (``None``: after whatever the branch holds)."""
    trace: str | None = None
    """The W3C ``traceparent`` of the span that asked (:func:`mirror.tracing.carried`): the turn's
    trace goes on across the Ray call. Not part of the turn's events; ``None`` with traces off."""

    def __post_init__(self) -> None:
        if not isinstance(self.message, str):
            raise InvalidTurnRequest(f"a turn's message is text, not {type(self.message).__name__}")
        if self.mode is not None and self.mode not in MODES:
            raise InvalidTurnRequest(f"unknown mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if self.instructions is not None and not isinstance(self.instructions, str):
            raise InvalidTurnRequest(f"a turn's instructions are text, not {type(self.instructions).__name__}")
        key = self.idempotency_key
        if key is not None and not (isinstance(key, str) and 0 < len(key) <= MAX_KEY_CHARS
                                    and all("!" <= char <= "~" for char in key)):
            raise InvalidTurnRequest(f"an idempotency key is 1 to {MAX_KEY_CHARS} visible ASCII characters "
                                     f"(no spaces), not {key!r:.80}")

    def streamed(self) -> TurnRequest:
        """The same request, read token by token."""
        return self if self.stream else replace(self, stream=True)


Recaller = Callable[[ConversationState, str, float], Awaitable[TurnRecall | None]]
"""How a turn recalls: ``(state, message, now) -> the recall`` (``None``: nothing recalled)."""


async def no_recall(state: ConversationState, message: str, now: float) -> TurnRecall | None:
    """A turn that recalls nothing (a writer driven without memory, e.g. a test's)."""
    return None


@dataclass(frozen=True, slots=True)
class KeptReply:
    """A recorded turn's reply, kept instead of asking for a new one (recompute without
    ``counterfactual``). The ``turn`` event names the recorded turn it copies (``causation``)."""

    turn: Turn
    provenance: Provenance | None
    causation: str


@dataclass(frozen=True, slots=True)
class ComposedTurn:
    """A MIRROR turn's events before they are appended, and where its time went (ms)."""

    turn: Turn
    provenance: Provenance | None
    causation: str | None
    recall: TurnRecall | None
    recall_causation: str
    timestamp: float
    recall_ms: float
    talk_ms: float
    finish_reason: str = "stop"
    """The Talker's, as the model said (``length``: its ``max_tokens`` cut the reply); ``stop`` for a kept reply."""
    instructions: Instructions | None = None
    """The client's new instructions, recorded first (the Talker read them)."""

    def events(self, key: StreamKey, first_seq: int, turn: int) -> list[Event]:
        """The ``instructions`` and the ``recall`` (if any) and the ``turn``, from ``first_seq`` on,
        of turn number ``turn``.

        One clock reading for all (the recall's ``now``), so replay recomputes decay at the
        instant the Talker saw it."""
        events = []
        if self.instructions is not None:
            events.append(make_event(key, first_seq, self.instructions, turn=turn, timestamp=self.timestamp))
        if self.recall is not None:
            events.append(make_event(key, first_seq + len(events), self.recall.payload, turn=turn,
                                     causation=self.recall_causation,
                                     timestamp=self.timestamp))
        events.append(make_event(key, first_seq + len(events), self.turn, turn=turn, provenance=self.provenance,
                                 causation=self.causation, timestamp=self.timestamp))
        return events

    def build(self, key: StreamKey) -> Callable[[ConversationState], list[Event]]:
        """The events placed after whatever the state holds when they are appended."""
        return lambda state: self.events(key, state.last_seq + 1, state.turn_count)


def _last_event(state: ConversationState) -> str:
    key = state.key
    return event_id(key.tenant, key.conversation, key.branch, state.last_seq)


def _instructed(state: ConversationState, asked: str | None, now: float) -> tuple[ConversationState, Instructions | None]:
    """The state a turn asking for instructions ``asked`` is made from, and the event recording
    them (``None``: unchanged, nothing recorded)."""
    change = instructions_change(state, asked)
    if change is None:
        return state, None
    return apply(state, make_event(state.key, state.last_seq + 1, change, turn=state.turn_count, timestamp=now)), change


async def compose_mirror_turn(
    state: ConversationState, message: str, *, llm: LLM, prompts: PromptSet, config: MirrorConfig, now: float,
    recaller: Recaller, kept: KeptReply | None = None, on_token: TokenSink | None = None,
    idempotency_key: str | None = None, instructions: str | None = None,
) -> ComposedTurn:
    """The MIRROR turn for ``message`` from ``state`` at ``now``: recall, then the Talker (or the
    ``kept`` reply). ``idempotency_key``: the request's, recorded in the ``turn``; ``instructions``:
    the client's, recorded first when they differ from the state's (the Talker reads them). LLM
    errors propagate: nothing was appended."""
    basis = _last_event(state)  # what the recall names: the logged state it saw (the instructions
    # are appended with the turn, after whatever the Thinker appends meanwhile; replay applies them on top)
    state, changed = _instructed(state, instructions, now)
    started = time.perf_counter()
    recalled = await recaller(state, message, now) if config.memory else None
    remembered = time.perf_counter()
    provenance: Provenance | None
    finish_reason = "stop"
    if kept is None:
        said = await talk(state, message, llm, prompts, config, recalled="" if recalled is None else recalled.block,
                          on_token=on_token, idempotency_key=idempotency_key)
        turn, provenance, causation, finish_reason = said.turn, said.provenance, None, said.finish_reason
    else:
        turn, provenance, causation = kept.turn, kept.provenance, kept.causation
    talked = time.perf_counter()
    return ComposedTurn(turn, provenance, causation, recalled, basis, now,
                        recall_ms=(remembered - started) * 1000, talk_ms=(talked - remembered) * 1000,
                        finish_reason=finish_reason, instructions=changed)


def opening_events(key: StreamKey, first_seq: int, chosen: PersonaChosen, turn: int, timestamp: float | None) -> list[Event]:
    """The events choosing a persona appends from ``first_seq``: the ``persona`` event and its
    greeting (:func:`~mirror.cognition.persona.turn_path.opening`) — on a first turn, on ``choose``
    and when a recompute's branch takes the persona with it alike."""
    return [make_event(key, first_seq + offset, payload, turn=turn, timestamp=timestamp)
            for offset, payload in enumerate(opening(chosen))]


@dataclass(frozen=True, slots=True)
class ComposedPersonaTurn:
    """A persona turn's events before they are appended: the ``persona`` event a first turn
    records, the path's steps and the ``turn``, all caused by the state the path ran from."""

    said: PersonaTurn
    chosen: PersonaChosen | None
    turn_index: int
    causation: str
    timestamp: float
    kept_causation: str | None = None
    instructions: Instructions | None = None
    """The client's new instructions, after a first turn's ``persona`` event and before the path."""

    def events(self, key: StreamKey, first_seq: int) -> list[Event]:
        events = [] if self.chosen is None else opening_events(key, first_seq, self.chosen, self.turn_index,
                                                               self.timestamp)
        if self.instructions is not None:
            events.append(make_event(key, first_seq + len(events), self.instructions, turn=self.turn_index,
                                     timestamp=self.timestamp))
        path = self.said.events(key, first_seq + len(events), self.turn_index, self.causation, self.timestamp)
        if self.kept_causation is not None:  # a kept reply names the recorded turn it copies
            path[-1] = replace(path[-1], causation=self.kept_causation)
        return [*events, *path]

    def build(self, key: StreamKey) -> Callable[[ConversationState], list[Event]]:
        return lambda state: self.events(key, state.last_seq + 1)


async def compose_persona_turn(
    state: ConversationState, message: str, *, llm: LLM, embedder: Embedder | None, prompts: PromptSet,
    config: MirrorConfig, now: float, chosen: PersonaChosen | None = None, kept: KeptReply | None = None,
    on_token: TokenSink | None = None, idempotency_key: str | None = None, instructions: str | None = None,
) -> ComposedPersonaTurn:
    """The persona's turn for ``message`` from ``state`` (after ``chosen``'s ``persona`` event, on a
    first turn, and the client's changed ``instructions``): its path's steps, then the formulation
    — or, ``kept``, the recorded reply after the steps made again."""
    key = state.key
    basis = state
    for event in [] if chosen is None else opening_events(key, state.last_seq + 1, chosen, state.turn_count, now):
        basis = apply(basis, event)
    basis, changed = _instructed(basis, instructions, now)
    said = await persona_turn(basis, message, llm, embedder, prompts, config, on_token=on_token,
                              kept=None if kept is None else (kept.turn, kept.provenance),
                              idempotency_key=idempotency_key)
    return ComposedPersonaTurn(said, chosen, basis.turn_count, _last_event(basis), now,
                               None if kept is None else kept.causation, changed)


__all__ = [
    "MAX_KEY_CHARS", "ComposedPersonaTurn", "ComposedTurn", "Continuation", "InvalidTurnRequest", "KeptReply", "Recaller", "TurnRequest",
    "compose_mirror_turn", "compose_persona_turn", "no_recall", "opening_events",
]
