"""Identifiers and event ids: valid ids accepted, subject-breaking ones refused at construction
(with how to fix them), and an event's id a pinned pure function of its coordinates, so a retried
append carries the same id everywhere."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.events.envelope import Event, make_event
from mirror.events.errors import InvalidIdentifier
from mirror.events.ids import MAX_IDENTIFIER_LENGTH, StreamKey, event_id, validate_identifier
from mirror.events.payloads import Monologue, Turn
from tests.support.strategies import identifiers, invalid_identifiers, seqs, stream_keys
from tests.unit.test_codec import BAD_IDENTIFIERS, KEY


def test_event_id_is_deterministic_and_pinned() -> None:
    # The id doubles as the NATS message id: it must be the same in every process and release.
    assert event_id("acme", "chat-7", "main", 4) == "6e74197f79a5ad16b966af85f5a715f1"
    event = make_event(KEY, 4, Turn("u", "r"), timestamp=0.0)
    assert event.id == event_id("acme", "chat-7", "main", 4)
    retried = make_event(KEY, 4, Turn("other", "payload"), timestamp=99.0)
    assert retried.id == event.id  # a retried append carries the same id


@given(stream_keys, seqs)
@settings(max_examples=100, deadline=None)
def test_event_id_is_a_function_of_the_coordinates(key: StreamKey, seq: int) -> None:
    first = event_id(key.tenant, key.conversation, key.branch, seq)
    assert first == event_id(key.tenant, key.conversation, key.branch, seq)
    assert len(first) == 32 and all(ch in "0123456789abcdef" for ch in first)


@given(st.lists(st.tuples(identifiers, identifiers, identifiers, st.integers(1, 50)), min_size=2, max_size=30, unique=True))
@settings(max_examples=150, deadline=None)
def test_distinct_coordinates_have_distinct_ids(coordinates: list[tuple[str, str, str, int]]) -> None:
    ids = [event_id(*point) for point in coordinates]
    assert len(set(ids)) == len(coordinates)


def test_ids_of_neighbouring_coordinates_differ() -> None:
    # Near misses a naive concatenation would confuse.
    points = [("a", "b", "c", 12), ("a", "b", "c1", 2), ("a", "bc", "1", 2), ("ab", "c", "1", 2), ("a", "b", "c", 1)]
    assert len({event_id(*point) for point in points}) == len(points)


@given(identifiers)
@settings(max_examples=100, deadline=None)
def test_valid_identifiers_are_accepted(value: str) -> None:
    assert validate_identifier("tenant", value) == value
    key = StreamKey(value, value, value)
    assert make_event(key, 1, Turn("u", "r"), timestamp=0.0).key == key


def test_identifier_length_boundary() -> None:
    assert validate_identifier("tenant", "a" * MAX_IDENTIFIER_LENGTH) == "a" * MAX_IDENTIFIER_LENGTH
    with pytest.raises(InvalidIdentifier):
        validate_identifier("tenant", "a" * (MAX_IDENTIFIER_LENGTH + 1))


@pytest.mark.parametrize("field", ["tenant", "conversation", "branch"])
@given(bad=invalid_identifiers)
@settings(max_examples=60, deadline=None)
def test_invalid_identifiers_are_refused_at_construction(field: str, bad: Any) -> None:
    coordinates = {"tenant": "acme", "conversation": "chat-7", "branch": "main", field: bad}
    with pytest.raises(InvalidIdentifier) as caught:
        StreamKey(**coordinates)
    assert caught.value.kind == field and caught.value.value == bad
    assert isinstance(caught.value, ValueError)
    with pytest.raises(InvalidIdentifier):
        Event(**coordinates, seq=1, payload=Turn("u", "r"), timestamp=0.0)


@pytest.mark.parametrize("value", BAD_IDENTIFIERS, ids=repr)
def test_subject_breaking_identifiers_are_refused(value: str) -> None:
    with pytest.raises(InvalidIdentifier) as caught:
        StreamKey("acme", value)
    assert "A-Za-z0-9_-" in str(caught.value)  # the message says how to fix it


@pytest.mark.parametrize(
    ("seq", "turn"), [(0, 0), (-1, 0), (True, 0), (1.0, 0), ("1", 0), (None, 0), (1, -1), (1, False), (1, 0.5)]
)
def test_seq_and_turn_are_checked_at_construction(seq: Any, turn: Any) -> None:
    with pytest.raises(InvalidIdentifier):
        Event("acme", "chat-7", "main", seq, Monologue("r", "m", "g"), 0.0, turn)
