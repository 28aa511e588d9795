"""``apply(state, event) -> state``: the one place a conversation's state changes.

``apply`` checks that the event continues the state (same stream, seq ``last_seq + 1``),
hands the payload to its handler (``functools.singledispatch`` on the payload type, one
handler per event type), then records the bookkeeping every event shares: ``last_seq``,
``last_timestamp`` and the per-type counter.

Invariants: ``apply`` is pure and total over valid events; it never mutates ``state``;
``fold(b, fold(a, s)) == fold(a + b, s)`` for any split of a valid sequence; a failed
thinking step (``ThinkerFailed``) never replaces the narrative, threads or portrait; a
rejected reflection never replaces the portrait.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from functools import singledispatch

from mirror.events.envelope import Event
from mirror.events.payloads import (
    Belief,
    Edge,
    Fork,
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

from .beliefs import apply_belief, apply_decisions, apply_recall
from .edges import apply_edge
from .errors import EmptyFold, OutOfOrderEvent, UnhandledEvent
from .monologue import MonologueEntry, Threads, append_bounded
from .persona import HANDLERS as PERSONA_HANDLERS
from .state import (
    ConversationState,
    FailureInfo,
    ForkInfo,
    KeyedTurn,
    Limits,
    PendingInsight,
    ReflectionRecord,
    TurnRecord,
    initial_state,
    keep_last,
)


def apply(state: ConversationState, event: Event) -> ConversationState:
    """The state after ``event``; raises :class:`OutOfOrderEvent` if it does not continue it."""
    key = state.key
    if (
        event.seq != state.last_seq + 1
        or event.tenant != key.tenant
        or event.conversation != key.conversation
        or event.branch != key.branch
    ):
        raise OutOfOrderEvent(
            key.tenant,
            key.conversation,
            key.branch,
            expected_seq=state.last_seq + 1,
            actual_seq=event.seq,
            event_tenant=event.tenant,
            event_conversation=event.conversation,
            event_branch=event.branch,
        )
    state = _apply_payload(event.payload, state, event)
    counters = state.counters
    by_type = counters.events_by_type
    return replace(
        state,
        last_seq=event.seq,
        last_timestamp=event.timestamp,
        counters=replace(counters, events_by_type=by_type.set(event.type, by_type.get(event.type, 0) + 1)),
    )


def fold(
    events: Iterable[Event], state: ConversationState | None = None, *, limits: Limits | None = None
) -> ConversationState:
    """Apply ``events`` in order to ``state``.

    Without a state, folding starts from ``initial_state`` of the first event's stream with
    ``limits`` (default :class:`Limits`); ``limits`` is ignored when a state is given, since
    the state carries the limits it was folded with.
    """
    iterator = iter(events)
    if state is None:
        first = next(iterator, None)
        if first is None:
            raise EmptyFold("fold needs at least one event or a state to start from")
        state = apply(initial_state(first.key, limits), first)
    for event in iterator:
        state = apply(state, event)
    return state


THREADS_ONLY = "threads_only"

# ---------------------------------------------------------------------------------- handlers


@singledispatch
def _apply_payload(payload: Payload, state: ConversationState, event: Event) -> ConversationState:
    raise UnhandledEvent(
        f"no projection handler for event type {type(payload).__name__!r} at "
        f"{event.tenant}/{event.conversation}/{event.branch} seq {event.seq}; "
        "register one on mirror.projections.conversation._apply_payload"
    )


@_apply_payload.register
def _on_turn(payload: Turn, state: ConversationState, event: Event) -> ConversationState:
    record = TurnRecord(event.seq, payload.user_message, payload.reply, payload.narrative_seq)
    counters = state.counters
    return replace(
        state,
        turn_count=state.turn_count + 1,
        first_user_message=payload.user_message if state.first_user_message is None else state.first_user_message,
        mode=payload.mode,
        memory=state.memory if payload.memory is None else payload.memory,
        reflection=state.reflection if payload.reflection is None else payload.reflection,
        recent_turns=keep_last((*state.recent_turns, record), state.limits.recent_turns),
        counters=replace(counters, turns_since_reflection=counters.turns_since_reflection + 1),
        keyed_turns=state.keyed_turns if payload.idempotency_key is None else keep_last(
            (*state.keyed_turns, KeyedTurn(payload.idempotency_key, event.seq, event.turn, event.timestamp)),
            state.limits.keyed_turns),
    )


@_apply_payload.register
def _on_monologue(payload: Monologue, state: ConversationState, event: Event) -> ConversationState:
    threads = Threads(payload.reasoning, payload.memory, payload.goal)
    limits = state.limits
    history, tokens = append_bounded(
        state.monologue_history,
        state.monologue_tokens,
        MonologueEntry(event.seq, threads),
        budget=limits.monologue_token_budget,
        trim_above_percent=limits.monologue_trim_above_percent,
        trim_to_percent=limits.monologue_trim_to_percent,
    )
    state = replace(state, threads=threads, threads_seq=event.seq, monologue_history=history, monologue_tokens=tokens)
    if state.mode == THREADS_ONLY:  # no controller in this mode: the threads complete the thinking
        state = replace(state, thought_turn=_later(state.thought_turn, event.turn))
    return state


@_apply_payload.register
def _on_narrative(payload: Narrative, state: ConversationState, event: Event) -> ConversationState:
    # The controller regenerates the whole narrative: replace, never append.
    return replace(
        state, narrative=payload.text, narrative_seq=event.seq, thought_turn=_later(state.thought_turn, event.turn)
    )


def _later(current: int | None, turn: int) -> int:
    return turn if current is None else max(current, turn)


@_apply_payload.register
def _on_belief(payload: Belief, state: ConversationState, event: Event) -> ConversationState:
    beliefs, reviews = apply_belief(
        state.beliefs, state.review_items, payload, seq=event.seq, timestamp=event.timestamp, turn=event.turn
    )
    counters = state.counters
    new_beliefs = len(beliefs) - len(state.beliefs)
    opened = len(reviews) - len(state.review_items)
    if new_beliefs or opened:
        counters = replace(
            counters,
            beliefs_since_reflection=counters.beliefs_since_reflection + new_beliefs,
            reviews_since_reflection=counters.reviews_since_reflection + opened,
        )
    return replace(state, beliefs=beliefs, review_items=reviews, counters=counters)


@_apply_payload.register
def _on_recall(payload: Recall, state: ConversationState, event: Event) -> ConversationState:
    # Only the recall counts change: what was recalled is in the log, not worth a copy in state.
    beliefs = apply_recall(state.beliefs, payload, event.turn)
    return state if beliefs is state.beliefs else replace(state, beliefs=beliefs)


@_apply_payload.register
def _on_edge(payload: Edge, state: ConversationState, event: Event) -> ConversationState:
    return replace(state, edges=apply_edge(state.edges, payload, timestamp=event.timestamp))


@_apply_payload.register
def _on_memory_step(payload: MemoryStep, state: ConversationState, event: Event) -> ConversationState:
    # What the step wrote came as belief and edge events before this one; here only "done".
    return replace(state, memory_turn=_later(state.memory_turn, payload.for_turn))


@_apply_payload.register
def _on_insight(payload: Insight, state: ConversationState, event: Event) -> ConversationState:
    pending = (*state.pending_insights, PendingInsight(event.seq, payload.text))
    done = state.insight_turn if payload.for_turn is None else _later(state.insight_turn, payload.for_turn)
    return replace(state, pending_insights=keep_last(pending, state.limits.pending_insights), insight_turn=done)


@_apply_payload.register
def _on_reflection(payload: Reflection, state: ConversationState, event: Event) -> ConversationState:
    # A reflection that ran consumed the pending insights, applied its decay decisions and
    # restarts the cooldown whether or not its portrait passed validation; only an accepted
    # one replaces the portrait.
    record = ReflectionRecord(
        event.seq, payload.accepted, payload.reason, payload.unique_ratio, payload.insights_used,
        payload.for_turn, payload.triggers, payload.warning,
    )
    beliefs, decayed, forgotten = apply_decisions(state.beliefs, payload.decisions)
    counters = state.counters
    state = replace(
        state,
        beliefs=beliefs,
        pending_insights=(),
        last_reflection=record,
        reflection_times=keep_last((*state.reflection_times, event.timestamp), state.limits.reflection_times),
        counters=replace(
            counters,
            turns_since_reflection=0,
            beliefs_since_reflection=0,
            reviews_since_reflection=0,
            reflections=counters.reflections + 1,
            reflections_rejected=counters.reflections_rejected + (0 if payload.accepted else 1),
            beliefs_decayed=counters.beliefs_decayed + decayed,
            beliefs_forgotten=counters.beliefs_forgotten + forgotten,
        ),
    )
    if payload.accepted:
        state = replace(state, portrait=payload.portrait, portrait_seq=event.seq)
    return state


@_apply_payload.register
def _on_thinker_failed(payload: ThinkerFailed, state: ConversationState, event: Event) -> ConversationState:
    failure = FailureInfo(
        event.seq, payload.stage, payload.error_type, payload.message, payload.attempt, payload.for_turn
    )
    counters = replace(state.counters, thinker_failures=state.counters.thinker_failures + 1)
    return replace(state, last_failure=failure, counters=counters)


@_apply_payload.register
def _on_fork(payload: Fork, state: ConversationState, event: Event) -> ConversationState:
    info = ForkInfo(event.seq, payload.parent_branch, payload.fork_seq, payload.prompt_set, payload.reason)
    return replace(state, fork=info)


# (issue 35) the client's instructions --------------------------------------------------------
@_apply_payload.register
def _on_instructions(payload: Instructions, state: ConversationState, event: Event) -> ConversationState:
    # Replaced, never appended to: the client said what its system text is now.
    return replace(state, instructions=payload.text, instructions_seq=event.seq)
# (end of the client's instructions) -----------------------------------------------------------


for _payload_type, _handler in PERSONA_HANDLERS:  # the persona mind's events (mirror.projections.persona)
    _apply_payload.register(_payload_type, _handler)


__all__ = ["apply", "fold"]
