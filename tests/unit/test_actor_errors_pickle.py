"""The actor runtime's errors cross Ray pickled: each must come back whole, fields and message.

A Fenced that could not be unpickled reached the gateway as Ray's ``UnserializableException``
and was answered 500 — the 500s of issue 24's broker that came back older."""

from __future__ import annotations

import pickle

import pytest

from mirror.actors.errors import ActorError, Fenced, IngesterUnavailable, Passivated, SettingConflict
from mirror.events.ids import StreamKey

KEY = StreamKey("acme", "talk", "main")
ERRORS: list[ActorError] = [
    Fenced(KEY, "stream ends at seq 3 but the rebuilt state at 9"),
    Passivated(KEY),
    SettingConflict(KEY, "mode", "fast", "full"),
    IngesterUnavailable("1", "/srv/mirror-1.duckdb", "no responders"),
]


def test_every_actor_error_is_listed_here() -> None:
    assert {type(error) for error in ERRORS} == set(ActorError.__subclasses__())


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_an_actor_error_survives_a_pickle_round_trip(error: ActorError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error) and vars(again) == vars(error)
