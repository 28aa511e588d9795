"""Snapshots: a folded state as msgpack bytes, and back.

A snapshot is a cache of a fold, never truth. Invariant, for any valid events ``a + b``::

    fold(b, state_from_snapshot(snapshot_bytes(fold(a)))) == fold(a + b)

The bytes carry ``PROJECTION_VERSION``. Any change to what ``apply`` computes (a handler, a
constant, a field) must bump it: old snapshots then raise :class:`StaleSnapshot` and callers
refold from the log instead of resuming from a state this build would not have produced.

Records are positional lists in dataclass field order, so the format is compact and a field
added without a version bump fails loudly (wrong arity) instead of loading half a state.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any

import msgpack

from mirror.events.ids import StreamKey

from ._frozen import FrozenMap
from .beliefs import BeliefState, ReviewItem
from .edges import EdgeState
from .errors import CorruptSnapshot, StaleSnapshot
from .monologue import MonologueEntry, Threads
from .persona import EpisodeRecord, PersonaState, StepRecord
from .state import (
    ConversationState,
    Counters,
    FailureInfo,
    ForkInfo,
    KeyedTurn,
    Limits,
    PendingInsight,
    ReflectionRecord,
    TurnRecord,
)

PROJECTION_VERSION = 11
"""Bump on any change to what the conversation projection computes or how it is stored.

11: ``instructions`` and ``instructions_seq`` (the client's system text), from ``instructions`` events.

10: ``greeting`` (a persona conversation's opening, from ``greeting`` events) and the persona's
``user_name`` (from ``persona`` events).

9: ``keyed_turns`` (the idempotency keys of the newest turns), from ``turn`` events.

8: the persona mind — ``persona`` (:class:`~mirror.projections.persona.PersonaState`), from the
persona events.

7: reflection — ``reflection``, ``insight_turn``, ``portrait`` (was ``reflection_snapshot``),
``reflection_times``, the reflection counters; beliefs record the turns they were last touched
and recalled; a reflection's ``forget`` decisions drop beliefs.

6: ``memory`` (whether the conversation's memory is on), from ``turn`` events.

5: ``memory_turn`` (the latest turn whose memory stage completed), from ``memory_step`` events.

4: beliefs carry ``about``, ``kind``, ``source_turn``, ``embedding`` and ``embedding_model``,
and ``recall`` events count recalls.
"""

_PROJECTION_NAME = "conversation"


@cache
def _names(cls: type) -> tuple[str, ...]:
    """Field names of a record class (``dataclasses.fields`` is too slow to ask per record)."""
    return tuple(item.name for item in fields(cls))


def _values(record: Any) -> list[Any]:
    """A record's field values, in field order."""
    return [getattr(record, name) for name in _names(type(record))]  # type: ignore[arg-type]  # types are hashable; mypy reads type.__hash__ as unbound (mypy issue 20409)


def _flat(record: Any) -> list[Any] | None:
    """A record whose fields are all scalars, as the list of its field values."""
    return None if record is None else _values(record)


def _checked(cls: type, values: Any) -> list[Any]:
    if not isinstance(values, list) or len(values) != len(_names(cls)):
        raise CorruptSnapshot(f"{cls.__name__} record has the wrong shape: {values!r:.80}")
    return values


def _unflat(cls: type, values: Any) -> Any:
    return None if values is None else cls(*_checked(cls, values))


def _edge_record(edge: EdgeState) -> list[Any]:
    *scalars, contradicted_by = _values(edge)
    return [*scalars, [list(key) for key in contradicted_by]]


def _edge_from(values: Any) -> EdgeState:
    *scalars, contradicted_by = _checked(EdgeState, values)
    return EdgeState(*scalars, tuple(tuple(key) for key in contradicted_by))  # type: ignore[call-arg]  # _checked fixed the arity; mypy assumes a starred list fills every parameter


def _reflection_from(values: Any) -> ReflectionRecord | None:
    if values is None:
        return None
    *before, triggers, warning = _checked(ReflectionRecord, values)
    return ReflectionRecord(*before, tuple(triggers), warning)  # type: ignore[call-arg]  # _checked fixed the arity


_PERSONA_MAPS = ("emotions", "relationship", "soft_goals")
_PERSONA_TUPLES = ("hard_goals", "biography", "biography_importance", "biography_embeddings", "hard_met_turns")
_PERSONA_STEPS = ("interpretation", "plan", "appraisal")


def _persona_record(persona: PersonaState | None) -> dict[str, Any] | None:
    if persona is None:
        return None
    record: dict[str, Any] = {name: getattr(persona, name) for name in _names(PersonaState)}
    for name in _PERSONA_MAPS:
        record[name] = [[key, value] for key, value in record[name].items()]  # ordered: the card's order
    for name in _PERSONA_TUPLES:
        record[name] = list(record[name])
    for name in _PERSONA_STEPS:
        record[name] = _flat(record[name])
    record["episodes"] = [_flat(episode) for episode in persona.episodes]
    return record


def _persona_from(record: Any) -> PersonaState | None:
    if record is None:
        return None
    if not isinstance(record, dict) or set(record) != set(_names(PersonaState)):
        raise CorruptSnapshot(f"persona record has the wrong fields: {record!r:.80}")
    values = dict(record)
    for name in _PERSONA_MAPS:
        values[name] = FrozenMap((key, value) for key, value in values[name])
    for name in _PERSONA_TUPLES:
        values[name] = tuple(values[name])
    for name in _PERSONA_STEPS:
        values[name] = _unflat(StepRecord, values[name])
    values["episodes"] = tuple(_unflat(EpisodeRecord, episode) for episode in values["episodes"])
    return PersonaState(**values)


def _state_record(state: ConversationState) -> dict[str, Any]:
    return {
        "key": [state.key.tenant, state.key.conversation, state.key.branch],
        "limits": _flat(state.limits),
        "last_seq": state.last_seq,
        "last_timestamp": state.last_timestamp,
        "turn_count": state.turn_count,
        "first_user_message": state.first_user_message,
        "mode": state.mode,
        "memory": state.memory,
        "reflection": state.reflection,
        "thought_turn": state.thought_turn,
        "memory_turn": state.memory_turn,
        "insight_turn": state.insight_turn,
        "recent_turns": [_flat(turn) for turn in state.recent_turns],
        "narrative": state.narrative,
        "narrative_seq": state.narrative_seq,
        "threads": _flat(state.threads),
        "threads_seq": state.threads_seq,
        "monologue_history": [[entry.seq, _flat(entry.threads)] for entry in state.monologue_history],
        "monologue_tokens": state.monologue_tokens,
        "beliefs": [_flat(belief) for belief in state.beliefs.values()],
        "review_items": [_flat(item) for item in state.review_items.values()],
        "edges": [_edge_record(edge) for edge in state.edges.values()],
        "pending_insights": [_flat(insight) for insight in state.pending_insights],
        "portrait": state.portrait,
        "portrait_seq": state.portrait_seq,
        "last_reflection": _flat(state.last_reflection),
        "reflection_times": list(state.reflection_times),
        "counters": [dict(state.counters.events_by_type), *_values(state.counters)[1:]],
        "last_failure": _flat(state.last_failure),
        "fork": _flat(state.fork),
        "persona": _persona_record(state.persona),
        "keyed_turns": [_flat(keyed) for keyed in state.keyed_turns],
        "greeting": state.greeting,  # cards (issue 35)
        "instructions": [state.instructions, state.instructions_seq],
    }


def _state_from(record: dict[str, Any]) -> ConversationState:
    history = tuple(MonologueEntry(seq, _unflat(Threads, threads)) for seq, threads in record["monologue_history"])
    beliefs = (_unflat(BeliefState, values) for values in record["beliefs"])
    reviews = (_unflat(ReviewItem, values) for values in record["review_items"])
    edges = (_edge_from(values) for values in record["edges"])
    by_type, *counts = _checked(Counters, record["counters"])
    return ConversationState(
        key=StreamKey(*record["key"]),
        limits=_unflat(Limits, record["limits"]),
        last_seq=record["last_seq"],
        last_timestamp=record["last_timestamp"],
        turn_count=record["turn_count"],
        first_user_message=record["first_user_message"],
        mode=record["mode"],
        memory=record["memory"],
        reflection=record["reflection"],
        thought_turn=record["thought_turn"],
        memory_turn=record["memory_turn"],
        insight_turn=record["insight_turn"],
        recent_turns=tuple(_unflat(TurnRecord, values) for values in record["recent_turns"]),
        narrative=record["narrative"],
        narrative_seq=record["narrative_seq"],
        threads=_unflat(Threads, record["threads"]),
        threads_seq=record["threads_seq"],
        monologue_history=history,
        monologue_tokens=record["monologue_tokens"],
        beliefs=FrozenMap((belief.belief_id, belief) for belief in beliefs),
        review_items=FrozenMap((item.key, item) for item in reviews),
        edges=FrozenMap((edge.key, edge) for edge in edges),
        pending_insights=tuple(_unflat(PendingInsight, values) for values in record["pending_insights"]),
        portrait=record["portrait"],
        portrait_seq=record["portrait_seq"],
        last_reflection=_reflection_from(record["last_reflection"]),
        reflection_times=tuple(record["reflection_times"]),
        counters=Counters(FrozenMap(by_type), *counts),
        last_failure=_unflat(FailureInfo, record["last_failure"]),
        fork=_unflat(ForkInfo, record["fork"]),
        persona=_persona_from(record["persona"]),
        keyed_turns=tuple(_unflat(KeyedTurn, values) for values in record["keyed_turns"]),
        greeting=record["greeting"],  # cards (issue 35)
        instructions=record["instructions"][0],
        instructions_seq=record["instructions"][1],
    )


def snapshot_bytes(state: ConversationState) -> bytes:
    """``state`` as msgpack bytes tagged with ``PROJECTION_VERSION``."""
    envelope = {"projection": _PROJECTION_NAME, "version": PROJECTION_VERSION, "state": _state_record(state)}
    return msgpack.packb(envelope, use_bin_type=True)


def state_from_snapshot(data: bytes) -> ConversationState:
    """The state ``snapshot_bytes`` wrote.

    Raises :class:`StaleSnapshot` for another projection version and
    :class:`CorruptSnapshot` for anything that is not a snapshot; both mean "refold".
    """
    try:
        envelope = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise CorruptSnapshot(f"snapshot is not valid msgpack: {exc}") from None
    if not isinstance(envelope, dict) or envelope.get("projection") != _PROJECTION_NAME:
        raise CorruptSnapshot("bytes are not a conversation projection snapshot; refold from the log")
    if envelope.get("version") != PROJECTION_VERSION:
        raise StaleSnapshot(envelope.get("version"), PROJECTION_VERSION)
    try:
        return _state_from(envelope["state"])
    except CorruptSnapshot:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise CorruptSnapshot(f"snapshot state is malformed ({exc!r}); refold from the log") from None


__all__ = ["PROJECTION_VERSION", "snapshot_bytes", "state_from_snapshot"]
