"""Beliefs: confidence arithmetic and decay, as pure functions of events and their timestamps.

The cognition layer decides *what* happened to a belief (the dedup gate picks ``reinforce``,
the contradiction check picks ``consistent`` or ``contradict``) and records it as a
:class:`~mirror.events.payloads.Belief` event. This module decides *what that does to the
numbers*, so every replay of the same log computes the same beliefs.

Invariants:

* ``0 <= confidence <= CONFIDENCE_CAP`` for every belief, whatever the payload says.
* A contradiction never overwrites: the new belief and the beliefs it opposes are all kept,
  and an open review item records each opposed pair with the seq that found it.
* No belief event removes a belief (a contradiction least of all); only a reflection's applied
  ``forget`` decision does (:func:`apply_decisions`), and the log keeps every event of it.
* Decay is never stored. ``strength(belief, now)`` is computed from ``last_reinforced`` when
  asked, so folding is independent of wall-clock time and decay is monotone in ``now``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from mirror.events.payloads import Belief, BeliefKind, MemoryType, Recall

from ._frozen import FrozenMap
from .constants import (
    BELIEF_HALF_LIFE_DAYS,
    BELIEF_STRENGTH_FLOOR,
    CONFIDENCE_CAP,
    CONFIDENCE_MIN,
    CONSISTENT_BOOST,
    RECALLED_HALF_LIFE_FACTOR,
    RECALLS_TO_EXTEND_HALF_LIFE,
    REFLECTION_DECAY_FACTOR,
    REINFORCE_STEP,
    SECONDS_PER_DAY,
)
from .errors import UnhandledEvent


@dataclass(frozen=True, slots=True)
class BeliefState:
    """One belief as the log has shaped it so far.

    ``created`` and ``last_reinforced`` are event timestamps (epoch seconds); decay counts from
    ``last_reinforced``. ``recall_count`` only grows, by ``recall`` operations and by
    :class:`~mirror.events.payloads.Recall` events. ``about``, ``kind``, ``source_turn``,
    ``embedding`` and ``embedding_model`` are what the event that created the belief said
    (the vector kept as given, little-endian float32); later events never change them, so a
    vector stays the one its statement was embedded to. ``last_touched_turn`` is the envelope
    turn of the latest event that asserted, reinforced or supported it, ``last_recalled_turn``
    of the latest recall that named it (``None``: never, or not known): reflection's decay step
    asks about beliefs not touched for a while and protects those recently recalled.
    """

    belief_id: str
    statement: str
    memory_type: MemoryType
    confidence: float
    created: float
    last_reinforced: float
    recall_count: int = 0
    about: str = ""
    kind: BeliefKind = "belief"
    source_turn: int | None = None
    embedding: bytes = b""
    embedding_model: str = ""
    last_touched_turn: int | None = None
    last_recalled_turn: int | None = None


@dataclass(frozen=True, slots=True)
class ReviewItem:
    """An open contradiction: ``belief_id`` (recorded at ``seq``) opposes ``opposed_id``.

    Both beliefs stay in state; the item stays open until an event that resolves reviews
    exists (none does yet), so it is never dropped by the projection.
    """

    belief_id: str
    opposed_id: str
    seq: int
    kind: str = "contradiction"

    @property
    def key(self) -> ReviewKey:
        return (self.belief_id, self.opposed_id)

    @property
    def review_id(self) -> str:
        """The item's stable id (see :func:`review_id`)."""
        return review_id(self.belief_id, self.opposed_id)


def review_id(belief_id: str, opposed_id: str) -> str:
    """A stable id for the review of ``belief_id`` opposing ``opposed_id``.

    A hash of the pair, not the seq that opened it: the same contradiction found on another
    branch, or again by a recompute, keeps its id, so a ``Recall`` naming it and an API link
    to it stay valid. Safe in URLs and identifiers (``rv-`` and 16 hex digits).

    The pair is hashed as ``belief_id NUL opposed_id``, unambiguous for ids without NUL — every
    id Mirror writes (``b-`` and hex). An id with a NUL (only a hand-made event could carry one)
    would make two pairs hash alike (``("", "\\0")`` and ``("\\0", "")``), so such a pair is
    hashed length-prefixed behind two NULs instead, which no NUL-free pair produces: every
    existing id, in logs and in recorded recalls, stays what it was.
    """
    if "\x00" in belief_id or "\x00" in opposed_id:
        pair = f"\x00\x00{len(belief_id)}:{belief_id}{opposed_id}"
    else:
        pair = f"{belief_id}\x00{opposed_id}"
    digest = hashlib.blake2b(pair.encode(), digest_size=8).hexdigest()
    return f"rv-{digest}"


ReviewKey = tuple[str, str]
Beliefs = FrozenMap[str, BeliefState]
ReviewItems = FrozenMap[ReviewKey, ReviewItem]


# -------------------------------------------------------------------------------- arithmetic


def clamp_confidence(value: float) -> float:
    """``value`` forced into [CONFIDENCE_MIN, CONFIDENCE_CAP]; NaN counts as no confidence."""
    if math.isnan(value):
        return CONFIDENCE_MIN
    return min(CONFIDENCE_CAP, max(CONFIDENCE_MIN, float(value)))


def half_life_days(belief: BeliefState) -> float:
    """The belief's half-life: by memory type, multiplied once it has been recalled enough."""
    days = BELIEF_HALF_LIFE_DAYS[belief.memory_type]
    if belief.recall_count >= RECALLS_TO_EXTEND_HALF_LIFE:
        days *= RECALLED_HALF_LIFE_FACTOR
    return days


def strength(belief: BeliefState, now: float) -> float:
    """``max(floor, 0.5 ** (age_days / half_life))``, age counted from ``last_reinforced``.

    A ``now`` before the last reinforcement counts as age 0 (strength 1): clocks differ, and
    decay must never make a belief stronger than fresh.
    """
    age_days = max(0.0, (now - belief.last_reinforced) / SECONDS_PER_DAY)
    return max(BELIEF_STRENGTH_FLOOR[belief.memory_type], 0.5 ** (age_days / half_life_days(belief)))


def effective_confidence(belief: BeliefState, now: float) -> float:
    """What the belief is worth at ``now``: its confidence scaled by its strength."""
    return belief.confidence * strength(belief, now)


# ------------------------------------------------------------------------------- operations


def _new_belief(payload: Belief, timestamp: float, turn: int | None) -> BeliefState:
    return BeliefState(
        belief_id=payload.belief_id,
        statement=payload.statement,
        memory_type=payload.memory_type,
        confidence=clamp_confidence(payload.confidence),
        created=timestamp,
        last_reinforced=timestamp,
        about=payload.about,
        kind=payload.kind,
        source_turn=payload.source_turn,
        embedding=payload.embedding,
        embedding_model=payload.embedding_model,
        last_touched_turn=turn,
    )


def _reinforced(belief: BeliefState, timestamp: float, turn: int | None) -> BeliefState:
    return replace(
        belief,
        confidence=clamp_confidence(belief.confidence + REINFORCE_STEP),
        last_reinforced=timestamp,
        last_touched_turn=turn,
    )


def _assert_or_reinforce(beliefs: Beliefs, payload: Belief, timestamp: float, turn: int | None) -> Beliefs:
    # The dedup gate may send "assert" for a belief that already exists, and "reinforce" for
    # one this branch never saw (e.g. after a fork): both mean "this belief, once more".
    existing = beliefs.get(payload.belief_id)
    if existing is None:
        return beliefs.set(payload.belief_id, _new_belief(payload, timestamp, turn))
    return beliefs.set(payload.belief_id, _reinforced(existing, timestamp, turn))


def _others(payload: Belief) -> tuple[str, ...]:
    # Related ids in first-seen order, without repeats and without the belief itself.
    return tuple(i for i in dict.fromkeys(payload.related) if i != payload.belief_id)


def _on_assert(beliefs: Beliefs, reviews: ReviewItems, payload: Belief, seq: int, timestamp: float, turn: int | None):
    return _assert_or_reinforce(beliefs, payload, timestamp, turn), reviews


def _on_recall(beliefs: Beliefs, reviews: ReviewItems, payload: Belief, seq: int, timestamp: float, turn: int | None):
    # Recalling an unknown belief changes nothing: there is nothing to make last longer.
    existing = beliefs.get(payload.belief_id)
    if existing is None:
        return beliefs, reviews
    recalled = replace(existing, recall_count=existing.recall_count + 1, last_recalled_turn=turn)
    return beliefs.set(payload.belief_id, recalled), reviews


def _on_consistent(beliefs: Beliefs, reviews: ReviewItems, payload: Belief, seq: int, timestamp: float, turn: int | None):
    # The boost raises confidence but does not reset the related beliefs' decay clocks: they
    # were supported, not observed again.
    beliefs = _assert_or_reinforce(beliefs, payload, timestamp, turn)
    boosted = [
        (other, replace(beliefs[other], confidence=clamp_confidence(beliefs[other].confidence + CONSISTENT_BOOST)))
        for other in _others(payload)
        if other in beliefs
    ]
    return beliefs.set_many(boosted), reviews


def _on_contradict(beliefs: Beliefs, reviews: ReviewItems, payload: Belief, seq: int, timestamp: float, turn: int | None):
    # Never last-write-wins: keep the new belief, leave the opposed ones untouched, and open
    # one review item per opposed belief. A contradiction seen again keeps its first item.
    beliefs = _assert_or_reinforce(beliefs, payload, timestamp, turn)
    opened = [
        ((payload.belief_id, other), ReviewItem(payload.belief_id, other, seq))
        for other in _others(payload)
        if (payload.belief_id, other) not in reviews
    ]
    return beliefs, (reviews.set_many(opened) if opened else reviews)


_OPERATIONS: dict[str, Callable[..., tuple[Beliefs, ReviewItems]]] = {
    "assert": _on_assert,
    "reinforce": _on_assert,
    "recall": _on_recall,
    "consistent": _on_consistent,
    "contradict": _on_contradict,
}


def apply_belief(
    beliefs: Beliefs, reviews: ReviewItems, payload: Belief, *, seq: int, timestamp: float, turn: int | None = None
) -> tuple[Beliefs, ReviewItems]:
    """The beliefs and review items after one belief event at ``seq`` (of ``turn``) stamped ``timestamp``."""
    try:
        operation = _OPERATIONS[payload.operation]
    except KeyError:
        raise UnhandledEvent(
            f"belief operation {payload.operation!r} (seq {seq}) has no handler; "
            f"known operations are {sorted(_OPERATIONS)}"
        ) from None
    return operation(beliefs, reviews, payload, seq, timestamp, turn)


def apply_recall(beliefs: Beliefs, payload: Recall, turn: int | None = None) -> Beliefs:
    """The beliefs after the Talker was given ``payload.belief_ids``: each recalled once more.

    An id named twice in one recall counts once (one recall, one use); an id this branch does
    not hold changes nothing, as with a ``recall`` belief operation. Confidence and decay
    clocks are untouched: being recalled is not evidence, only a reason to forget more slowly.
    """
    recalled = [
        (belief_id, replace(beliefs[belief_id], recall_count=beliefs[belief_id].recall_count + 1,
                            last_recalled_turn=turn))
        for belief_id in dict.fromkeys(payload.belief_ids)
        if belief_id in beliefs
    ]
    return beliefs.set_many(recalled) if recalled else beliefs


def apply_decisions(
    beliefs: Beliefs, decisions: tuple[tuple[str, str, str, str], ...]
) -> tuple[Beliefs, int, int]:
    """The beliefs after a reflection's decay decisions, with how many were decayed and forgotten.

    Each ``(belief_id, proposed, applied, rule)`` whose ``applied`` is ``decay`` multiplies the
    belief's confidence by ``REFLECTION_DECAY_FACTOR`` (its decay clock untouched); ``forget``
    drops it from the state (the log keeps it: time travel before this event still shows it).
    ``retain``, and a decision naming a belief this branch does not hold, change nothing.
    """
    decayed = forgotten = 0
    for belief_id, _proposed, applied, _rule in decisions:
        existing = beliefs.get(belief_id)
        if existing is None:
            continue
        if applied == "decay":
            confidence = clamp_confidence(existing.confidence * REFLECTION_DECAY_FACTOR)
            beliefs = beliefs.set(belief_id, replace(existing, confidence=confidence))
            decayed += 1
        elif applied == "forget":
            beliefs = beliefs.remove_many((belief_id,))
            forgotten += 1
    return beliefs, decayed, forgotten


__all__ = [
    "BeliefState",
    "apply_decisions",
    "ReviewItem",
    "ReviewKey",
    "review_id",
    "apply_recall",
    "clamp_confidence",
    "half_life_days",
    "strength",
    "effective_confidence",
    "apply_belief",
]
