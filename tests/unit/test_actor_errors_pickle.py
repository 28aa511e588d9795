"""Errors cross Ray pickled: each must come back whole, its type, fields and message.

A Fenced, an AppendConflict or an OutOfOrderEvent that could not be unpickled reached the
gateway as Ray's ``UnserializableException`` and was answered 500 — the 500s of issue 24's
broker that came back older and of its machines test. Every :class:`MirrorError` is pickled as
its class, message and fields (``MirrorError.__reduce__``)."""

from __future__ import annotations

import pickle

import pytest

from mirror.actors.errors import (
    ActorError,
    Fenced,
    HistoryMoved,
    IdempotencyKeyReused,
    IngesterUnavailable,
    Passivated,
    SettingConflict,
)
from mirror.events.errors import AppendConflict, BusUnavailable, MirrorError
from mirror.events.ids import StreamKey
from mirror.projections.errors import OutOfOrderEvent

KEY = StreamKey("acme", "talk", "main")
ERRORS: list[ActorError] = [
    Fenced(KEY, "stream ends at seq 3 but the rebuilt state at 9"),
    Passivated(KEY),
    SettingConflict(KEY, "mode", "fast", "full"),
    IdempotencyKeyReused(KEY, "k-1", 3, "another message"),
    IngesterUnavailable("1", "/srv/mirror-1.duckdb", "no responders"),
    HistoryMoved(KEY, "2 turns before this one", "3 (another request appended)"),
]


def test_every_actor_error_is_listed_here() -> None:
    assert {type(error) for error in ERRORS} == set(ActorError.__subclasses__())


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_an_actor_error_survives_a_pickle_round_trip(error: ActorError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error) and vars(again) == vars(error)


OTHERS: list[MirrorError] = [
    AppendConflict("acme", "talk", "main", expected_seq=52, detail="wrong last sequence: 77"),
    OutOfOrderEvent("acme", "talk", "main", expected_seq=51, actual_seq=52, event_tenant="acme",
                    event_conversation="talk", event_branch="main"),
    BusUnavailable("127.0.0.1:4222", 1.0),
]


@pytest.mark.parametrize("error", OTHERS, ids=lambda error: type(error).__name__)
def test_the_lower_layers_errors_survive_it_too(error: MirrorError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error) and vars(again) == vars(error)
