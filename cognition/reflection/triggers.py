"""When a reflection may run and why: pure functions of the projected state and the policy.

- **Gates** (:func:`refusal`): never within ``cooldown`` interactions of the last reflection
  (the conversation's start counts as one: a conversation reflects at the earliest after
  ``cooldown`` turns), and never when ``max_per_hour`` reflections ran within the hour before
  the newest event. "Now" is the newest event's timestamp (``state.last_timestamp``), not the
  wall clock: the decision is the log's, so replay and time travel make it again.
- **Triggers** (:func:`due`): ``periodic`` (``every`` interactions since the last one),
  ``review`` (contradiction reviews opened since the last one), ``belief_burst`` (beliefs new
  since the last one). A forced reflection (:func:`forced_triggers`) passes the same gates and
  records ``forced`` first, then whichever triggers were also due.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirror.projections.state import ConversationState

from .policy import SECONDS_PER_HOUR, ReflectionPolicy

PERIODIC, REVIEW, BELIEF_BURST, FORCED = "periodic", "review", "belief_burst", "forced"
TRIGGERS: tuple[str, ...] = (PERIODIC, REVIEW, BELIEF_BURST, FORCED)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why no reflection may run now: ``reason`` is ``no_turns``, ``cooldown`` (``turns_left``
    more turns) or ``hourly_cap`` (``next_slot``: the timestamp from which one may run again)."""

    reason: str
    detail: str
    turns_left: int = 0
    next_slot: float | None = None


def reflections_within_the_hour(state: ConversationState) -> tuple[float, ...]:
    """The timestamps of the reflections that ran within the hour up to the newest event."""
    now = state.last_timestamp
    if now is None:
        return ()
    return tuple(moment for moment in state.reflection_times if now - SECONDS_PER_HOUR < moment <= now)


def turns_left_in_cooldown(state: ConversationState, policy: ReflectionPolicy) -> int:
    """How many more turns before the cooldown ends (0: it has)."""
    return max(0, policy.cooldown - state.counters.turns_since_reflection)


def refusal(state: ConversationState, policy: ReflectionPolicy) -> Refusal | None:
    """Why a reflection may not run on ``state`` now, or ``None`` when it may."""
    if state.turn_count == 0:
        return Refusal("no_turns", "the conversation has no turn to reflect on yet")
    left = turns_left_in_cooldown(state, policy)
    if left:
        since = "after the last reflection" if state.counters.reflections else "from the start (no reflection ran yet)"
        return Refusal("cooldown", f"within the cooldown of {policy.cooldown} turns {since}: {left} more turn(s) first",
                       turns_left=left)
    recent = reflections_within_the_hour(state)
    if len(recent) >= policy.max_per_hour:
        next_slot = min(recent) + SECONDS_PER_HOUR
        return Refusal("hourly_cap", f"{len(recent)} reflections within the hour, the cap is {policy.max_per_hour}; "
                       f"the next may run from timestamp {next_slot:.3f}", next_slot=next_slot)
    return None


def _event_triggers(state: ConversationState, policy: ReflectionPolicy) -> list[str]:
    counters = state.counters
    triggers = []
    if counters.turns_since_reflection >= policy.every:
        triggers.append(PERIODIC)
    if policy.review_trigger and counters.reviews_since_reflection >= policy.review_trigger:
        triggers.append(REVIEW)
    if policy.belief_burst and counters.beliefs_since_reflection >= policy.belief_burst:
        triggers.append(BELIEF_BURST)
    return triggers


def due(state: ConversationState, policy: ReflectionPolicy) -> tuple[str, ...]:
    """The triggers a reflection would run for now (empty: none is due, or a gate holds it back)."""
    if refusal(state, policy) is not None:
        return ()
    return tuple(_event_triggers(state, policy))


def forced_triggers(state: ConversationState, policy: ReflectionPolicy) -> tuple[str, ...]:
    """``forced`` and whatever else is due, for a reflection asked for now; the caller checked
    :func:`refusal` (the gates hold for a forced reflection too)."""
    return (FORCED, *_event_triggers(state, policy))


__all__ = [
    "BELIEF_BURST", "FORCED", "PERIODIC", "REVIEW", "Refusal", "TRIGGERS", "due", "forced_triggers",
    "reflections_within_the_hour", "refusal", "turns_left_in_cooldown",
]
