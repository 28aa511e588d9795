"""What each reflection changed, read back from the log: the portrait, the beliefs, the cost.

A ``reflection`` event holds the whole of one reflection (its triggers, the portrait the
consolidation call wrote, the validation, the health check, the decay decisions and both calls'
cost); what it *changed* needs the state right before it too: the portrait it replaced and the
statements and confidences of the beliefs it decayed or forgot (a forgotten belief is gone from
the state after it, never from the log). :func:`reflection_history` folds a branch's events with
the projection (:func:`~mirror.projections.conversation.apply`, the one fold) and, at each
reflection, records both sides in a :class:`ReflectionView`: a pure function of the events, so
the same log always reads the same, on a live conversation or a recompute branch alike.
:func:`read_reflections` reads a branch (inherited events included) through
:class:`~mirror.replay.History` and folds it; :func:`read_reflection` reads one reflection, folding
only from the snapshot before it (:meth:`History.rebuild`), so asking about reflection N of a long
conversation costs what time travel to it costs.

Invariants: ``number`` is the reflection's place on its branch (1-based, the ones inherited from
a parent branch included), equal to ``counters.reflections`` of the state after it;
``portrait_after`` is the state's portrait after the event, so it equals ``portrait_before``
when the reflection was rejected (``proposed`` keeps what the consolidation wrote); the portrait
at any seq is the ``portrait_after`` of the last reflection at or before it, which is what time
travel shows (:meth:`History.state_at`).

The portrait's diff is a unified diff of its lines, a line being a sentence: a portrait is a
paragraph or two, and one changed sentence should read as one changed line, not as the whole
paragraph removed and written again.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Reflection, ThinkerFailed
from mirror.projections.conversation import apply
from mirror.projections.state import ConversationState, initial_state

from .errors import UnknownPosition, UnknownReflection
from .history import History

__all__ = [
    "BeliefChange",
    "DecisionView",
    "ReflectionCost",
    "ReflectionFailure",
    "ReflectionHistory",
    "ReflectionView",
    "portrait_diff",
    "portrait_lines",
    "read_reflection",
    "read_reflections",
    "reflection_history",
]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def portrait_lines(text: str | None) -> list[str]:
    """``text`` as the lines its diff compares: each line of it cut after every sentence."""
    return [sentence for line in (text or "").splitlines() for sentence in _SENTENCE_END.split(line.strip()) if sentence]


def portrait_diff(before: str | None, after: str | None, *, labels: tuple[str, str] = ("before", "after")) -> tuple[str, ...]:
    """The unified diff (one line of context) of two portraits, a line per sentence; () when equal.
    A change of spacing alone is shown as the two texts whole (quoted), never as no change."""
    if (before or "") == (after or ""):
        return ()
    old, new = portrait_lines(before), portrait_lines(after)
    if old == new:  # only the spacing changed: show the texts whole, so the change is not hidden
        old, new = [repr(before or "")], [repr(after or "")]
    return tuple(difflib.unified_diff(old, new, *labels, lineterm="", n=1))


@dataclass(frozen=True, slots=True)
class DecisionView:
    """One decay decision: what the model proposed, what was applied, and the rule that overruled
    it (``rule`` "" when none did). ``statement`` and ``confidence`` are the belief's in the state
    before the reflection ("" and None for a belief that state did not hold)."""

    belief_id: str
    proposed: str
    applied: str
    rule: str
    statement: str
    confidence: float | None

    @property
    def overruled(self) -> bool:
        return bool(self.rule)


@dataclass(frozen=True, slots=True)
class BeliefChange:
    """A belief a reflection decayed (``after`` its lowered confidence) or forgot (``after`` None)."""

    belief_id: str
    statement: str
    memory_type: str
    before: float
    after: float | None


@dataclass(frozen=True, slots=True)
class ReflectionCost:
    """What a reflection cost: the consolidation call (the event's provenance) and the decay call
    (the payload's ``decay_tokens`` / ``decay_ms``; 0 when no belief was old enough to ask about)."""

    model: str
    consolidation_prompt_tokens: int
    consolidation_completion_tokens: int
    consolidation_ms: float
    decay_tokens: int
    decay_ms: float

    @property
    def tokens(self) -> int:
        return self.consolidation_prompt_tokens + self.consolidation_completion_tokens + self.decay_tokens

    @property
    def ms(self) -> float:
        return self.consolidation_ms + self.decay_ms


@dataclass(frozen=True, slots=True)
class ReflectionView:
    """One reflection and what it changed (see the module docstring)."""

    number: int
    seq: int
    turn: int
    for_turn: int | None
    timestamp: float
    triggers: tuple[str, ...]
    accepted: bool
    reason: str
    warning: str
    unique_ratio: float
    insights_used: int
    episodes_used: int
    portrait_before: str | None
    portrait_after: str | None
    proposed: str
    diff: tuple[str, ...]
    decisions: tuple[DecisionView, ...]
    decayed: tuple[BeliefChange, ...]
    forgotten: tuple[BeliefChange, ...]
    cost: ReflectionCost

    @property
    def overruled(self) -> tuple[DecisionView, ...]:
        return tuple(decision for decision in self.decisions if decision.overruled)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: every field, each decision with ``overruled``, the cost with its totals."""
        data = asdict(self)
        data["triggers"] = list(self.triggers)
        data["diff"] = list(self.diff)
        data["decisions"] = [{**asdict(decision), "overruled": decision.overruled} for decision in self.decisions]
        data["decayed"] = [asdict(change) for change in self.decayed]
        data["forgotten"] = [asdict(change) for change in self.forgotten]
        data["overruled"] = len(self.overruled)
        data["cost"] = {**asdict(self.cost), "tokens": self.cost.tokens, "ms": self.cost.ms}
        return data


@dataclass(frozen=True, slots=True)
class ReflectionFailure:
    """A reflection that failed (a ``thinker_failed`` event of stage ``reflection``): nothing of it
    was applied, and it is retried at the next opportunity."""

    seq: int
    turn: int
    for_turn: int | None
    timestamp: float
    error_type: str
    message: str
    attempt: int


@dataclass(frozen=True, slots=True)
class ReflectionHistory:
    """The reflections of a branch up to ``state.last_seq``, oldest first, and the failed attempts."""

    state: ConversationState
    reflections: tuple[ReflectionView, ...]
    failures: tuple[ReflectionFailure, ...]

    def number(self, number: int) -> ReflectionView:
        """Reflection ``number`` (1-based); :class:`UnknownReflection` when the branch has no such one."""
        if 1 <= number <= len(self.reflections):
            return self.reflections[number - 1]
        raise UnknownReflection(self.state.key, number, len(self.reflections))

    def portrait_at(self, seq: int) -> str | None:
        """The portrait right after event ``seq``: the last reflection at or before it says it."""
        portrait = None
        for view in self.reflections:
            if view.seq > seq:
                break
            portrait = view.portrait_after
        return portrait


def _cost(event: Event, payload: Reflection) -> ReflectionCost:
    provenance = event.provenance
    if provenance is None:
        return ReflectionCost("", 0, 0, 0.0, payload.decay_tokens, payload.decay_ms)
    return ReflectionCost(provenance.model, provenance.prompt_tokens, provenance.completion_tokens,
                          provenance.latency_ms, payload.decay_tokens, payload.decay_ms)


def _view(before: ConversationState, after: ConversationState, event: Event, payload: Reflection) -> ReflectionView:
    decisions, decayed, forgotten = [], [], []
    for belief_id, proposed, applied, rule in payload.decisions:
        belief = before.beliefs.get(belief_id)
        decisions.append(DecisionView(belief_id, proposed, applied, rule, "" if belief is None else belief.statement,
                                      None if belief is None else belief.confidence))
        if belief is None:
            continue
        if applied == "decay" and (now := after.beliefs.get(belief_id)) is not None:
            decayed.append(BeliefChange(belief_id, belief.statement, belief.memory_type, belief.confidence, now.confidence))
        elif applied == "forget" and belief_id not in after.beliefs:
            forgotten.append(BeliefChange(belief_id, belief.statement, belief.memory_type, belief.confidence, None))
    labels = (f"{before.key.branch}@{before.last_seq}", f"{after.key.branch}@{after.last_seq}")
    return ReflectionView(
        number=after.counters.reflections, seq=event.seq, turn=event.turn, for_turn=payload.for_turn,
        timestamp=event.timestamp, triggers=payload.triggers, accepted=payload.accepted, reason=payload.reason,
        warning=payload.warning, unique_ratio=payload.unique_ratio, insights_used=payload.insights_used,
        episodes_used=payload.episodes_used, portrait_before=before.portrait, portrait_after=after.portrait,
        proposed=payload.portrait, diff=portrait_diff(before.portrait, after.portrait, labels=labels),
        decisions=tuple(decisions), decayed=tuple(decayed), forgotten=tuple(forgotten), cost=_cost(event, payload),
    )


def reflection_history(events: Iterable[Event], state: ConversationState | None = None) -> ReflectionHistory:
    """Fold ``events`` (from ``state``, default the start of the first event's stream) and read
    every reflection on the way. Events of a parent branch (a fork's inherited prefix, as
    :meth:`History.events` returns them) are folded into the state of the branch that follows."""
    reflections: list[ReflectionView] = []
    failures: list[ReflectionFailure] = []
    for event in events:
        if state is None:
            state = initial_state(event.key)
        elif state.key != event.key:  # the parent's events, then the branch's own: one story
            state = replace(state, key=event.key)
        before, state = state, apply(state, event)
        payload = event.payload
        if isinstance(payload, Reflection):
            reflections.append(_view(before, state, event, payload))
        elif isinstance(payload, ThinkerFailed) and payload.stage == "reflection":
            failures.append(ReflectionFailure(event.seq, event.turn, payload.for_turn, event.timestamp,
                                              payload.error_type, payload.message, payload.attempt))
    if state is None:
        raise ValueError("reflection_history needs at least one event or a state to start from")
    return ReflectionHistory(state, tuple(reflections), tuple(failures))


async def read_reflection(history: History, key: StreamKey, number: int) -> tuple[ReflectionView, Event]:
    """Reflection ``number`` of ``key`` (1-based, inherited ones included) and the branch's last event.

    The same view :func:`read_reflections` gives, without folding the whole branch: the state
    before it is rebuilt as time travel rebuilds one (:meth:`History.rebuild`: snapshot + tail),
    then its event applied. :class:`UnknownReflection` when the branch has had fewer.
    """
    await history.last_seq(key)  # an unknown branch is UnknownBranch, as for time travel
    events = await history.events(key)
    reflections = [event for event in events if isinstance(event.payload, Reflection)]
    if not 1 <= number <= len(reflections):
        raise UnknownReflection(key, number, len(reflections))
    event = reflections[number - 1]
    before = (await history.rebuild(key, event.seq - 1)).state
    if before.key != event.key:  # the parent's reflection, seen from the branch
        before = replace(before, key=event.key)
    payload = event.payload
    assert isinstance(payload, Reflection)
    return _view(before, apply(before, event), event, payload), events[-1]


async def read_reflections(history: History, key: StreamKey, until_seq: int | None = None) -> ReflectionHistory:
    """The reflections of ``key`` up to ``until_seq`` (default: the last), inherited ones included.

    Positions are checked as time travel checks them (:class:`~mirror.replay.UnknownPosition`,
    :class:`~mirror.replay.UnknownBranch`); the whole branch is folded from its first event.
    """
    last = await history.last_seq(key)
    if until_seq is None:
        until_seq = last
    if type(until_seq) is not int or not 0 <= until_seq <= last:
        raise UnknownPosition(key, until_seq, last)
    events = await history.events(key, until_seq=until_seq) if until_seq else []
    found = reflection_history(events, initial_state(key) if not events else None)
    if found.state.key != key:  # a branch looked at inside the prefix it inherited
        found = replace(found, state=replace(found.state, key=key))
    return found
