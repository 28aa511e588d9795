"""The seal of a stream message (:mod:`mirror.events.nats.sealing`): it opens to what was sealed,
is the same bytes each time (retries and duplicates are compared bytewise), hides the plaintext,
refuses another key or an altered byte, and is never taken for a codec record."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mirror.events.codec import encode
from mirror.events.envelope import make_event
from mirror.events.errors import BusError
from mirror.events.ids import StreamKey
from mirror.events.nats.sealing import HEADER_BYTES, DataKey, is_sealed, key_id_of
from mirror.events.payloads import Turn

KEY = DataKey.new()


@given(st.binary(max_size=2048))
def test_a_seal_opens_to_what_was_sealed_and_is_the_same_each_time(data: bytes) -> None:
    sealer = KEY.sealer()
    sealed = sealer.seal(data)
    assert sealed == KEY.sealer().seal(data)  # deterministic: a retry's bytes match the stored copy
    assert is_sealed(sealed) and key_id_of(sealed) == KEY.key_id
    assert len(sealed) == len(data) + HEADER_BYTES + 16
    assert sealer.open(sealed) == data


def test_the_plaintext_is_not_in_the_seal_and_a_codec_record_is_never_taken_for_one() -> None:
    record = encode(make_event(StreamKey("acme", "c1"), 1, Turn("canary-sealed-3f1a", "reply"), turn=1))
    assert not is_sealed(record)
    sealed = KEY.sealer().seal(record)
    assert b"canary-sealed-3f1a" not in sealed
    assert KEY.sealer().seal(record + b"x")[HEADER_BYTES - 12:HEADER_BYTES] != sealed[HEADER_BYTES - 12:HEADER_BYTES]


def test_another_key_or_an_altered_byte_does_not_open() -> None:
    sealed = KEY.sealer().seal(b"some event")
    with pytest.raises(BusError, match="opened with key id"):
        DataKey.new().sealer().open(sealed)
    altered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(BusError, match="altered"):
        KEY.sealer().open(altered)


def test_a_key_record_round_trips_and_a_foreign_one_is_refused() -> None:
    assert DataKey.from_record(KEY.record()) == KEY
    with pytest.raises(BusError, match="format"):
        DataKey.from_record(b"\x02" + KEY.record()[1:])
