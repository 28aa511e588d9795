"""`mirror bench codec`: the event codec against msgspec, on the same events, in the same run.

The codec (:mod:`mirror.events.codec`) packs with msgpack-python and checks each decoded map
against the payload classes' annotations in Python. msgspec does typed msgpack decoding with
validation in C, so the question is whether Mirror should hand that job to it. This bench
answers with numbers: for each kind of event a conversation writes — a turn with its provenance
(small), a belief and a recall carrying a 384-dimension vector (1.5 KB of bytes), and large
payloads (a 16 KB narrative, a persona with eight biography vectors) — it times µs per event for
encode and for decode (validated, the event built) through the codec's own :func:`encode` and
:func:`decode`, and through :class:`MsgspecCodec`, the closest msgspec path: one ``Struct`` for
the envelope (unknown fields forbidden) with the payload left raw, then the payload class
decoded by msgspec; older schema versions through the same upcasters.

Speed is half of the decision. The stored bytes must not change (an event read back and
written again must give the same bytes: the golden logs check it), and bad input must still be
refused as it is today. So the report also says, per kind, whether msgspec's bytes equal the
codec's, and which of the codec's rules msgspec's decoding keeps (``msgspec_semantics``): a
payload field the class lacks, a NaN in a float field, ``True`` where an int belongs, a whole
number in a float field kept as written, a payload dataclass written as msgpack-python writes it.

Needs ``msgspec`` (the ``test`` extra installs it; the runtime does not use it).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgpack

from mirror.events.codec import READABLE_FORMATS, RECORD_FORMAT, decode, encode, event_to_record
from mirror.events.envelope import MAX_SEQ, Event, make_event
from mirror.events.errors import CorruptEvent, InvalidIdentifier
from mirror.events.ids import StreamKey, validate_identifier
from mirror.events.payloads import (
    PAYLOAD_TYPES,
    Belief,
    Narrative,
    PersonaChosen,
    Provenance,
    Recall,
    Reflection,
    Turn,
)
from mirror.events.upcasting import payload_class, provenance_format_1_to_2, upcast
from mirror.events.vectors import vector_to_bytes

DIMENSIONS = 384
"""The offline embedder's vector size (all-MiniLM-L6-v2): 1,536 bytes an embedding."""
KINDS = ("turn", "vector", "large")


class MsgspecCodec:
    """Events to msgpack and back through msgspec, with the codec's envelope checks.

    Written for the comparison only: the envelope is one ``Struct`` (unknown fields forbidden),
    the payload and provenance stay raw until their type is known, then msgspec decodes them
    into the payload classes (frozen dataclasses). What msgspec cannot say for a dataclass is
    left as msgspec does it; :func:`msgspec_semantics` reports which of the codec's rules that
    loses.
    """

    def __init__(self) -> None:
        import msgspec

        # Built with defstruct: this module's annotations are strings, and msgspec is imported here.
        envelope = msgspec.defstruct("Envelope", [
            ("f", int), ("tenant", str), ("conversation", str), ("branch", str), ("seq", int), ("type", str),
            ("schema", int), ("ts", float), ("turn", int), ("causation", str | None),
            ("payload", msgspec.Raw), ("provenance", msgspec.Raw),
        ], forbid_unknown_fields=True)

        self._msgspec = msgspec
        self._encoder = msgspec.msgpack.Encoder()
        self._envelope = msgspec.msgpack.Decoder(envelope)
        self._payloads: dict[type, Any] = {cls: msgspec.msgpack.Decoder(cls) for cls in (*PAYLOAD_TYPES, Provenance)}
        self._plain = msgspec.msgpack.Decoder()

    def encode(self, event: Event) -> bytes:
        # The codec's own record (plain maps): msgspec handed the payload dataclass itself writes
        # some payloads' headers wider than msgpack-python does (see msgspec_semantics).
        return self._encoder.encode(event_to_record(event))

    def encode_dataclasses(self, event: Event) -> bytes:
        """The payload and provenance handed to msgspec as the dataclasses they are."""
        return self._encoder.encode({
            "f": RECORD_FORMAT, "tenant": event.tenant, "conversation": event.conversation,
            "branch": event.branch, "seq": event.seq, "type": event.type, "schema": event.schema_version,
            "ts": float(event.timestamp), "turn": event.turn, "causation": event.causation,
            "payload": event.payload, "provenance": event.provenance,
        })

    def decode(self, data: bytes) -> Event:
        msgspec = self._msgspec
        try:
            envelope: Any = self._envelope.decode(data)  # a defstruct: its fields are not known to mypy
            if envelope.f not in READABLE_FORMATS:
                raise CorruptEvent(f"record format {envelope.f} is not readable")
            validate_identifier("tenant", envelope.tenant)
            validate_identifier("conversation", envelope.conversation)
            validate_identifier("branch", envelope.branch)
            if not 1 <= envelope.seq <= MAX_SEQ or not 0 <= envelope.turn <= MAX_SEQ:
                raise CorruptEvent(f"seq must be 1..{MAX_SEQ} and turn 0..{MAX_SEQ}")
            cls = payload_class(envelope.type)
            if envelope.schema == cls.VERSION:
                payload = self._payloads[cls].decode(envelope.payload)
            else:
                fields = upcast(envelope.type, envelope.schema, self._plain.decode(envelope.payload))
                payload = msgspec.convert(fields, cls)
            provenance = None
            if bytes(envelope.provenance) != b"\xc0":  # msgpack nil
                if envelope.f == 1:
                    provenance = msgspec.convert(
                        provenance_format_1_to_2(self._plain.decode(envelope.provenance)), Provenance)
                else:
                    provenance = self._payloads[Provenance].decode(envelope.provenance)
        except (msgspec.DecodeError, InvalidIdentifier) as exc:  # ValidationError is a DecodeError
            raise CorruptEvent(f"corrupt event record: {exc}") from None
        return Event(tenant=envelope.tenant, conversation=envelope.conversation, branch=envelope.branch,
                     seq=envelope.seq, payload=payload, timestamp=envelope.ts, turn=envelope.turn,
                     causation=envelope.causation, provenance=provenance)


# ------------------------------------------------------------------------------ the events


def _vector(seed: int) -> bytes:
    return vector_to_bytes(math.sin(seed * 7.1 + index * 0.37) for index in range(DIMENSIONS))


def _provenance(index: int, response: str | None = None) -> Provenance:
    return Provenance(model="gemma-3-270m", prompt_set="default@3", request_fingerprint=f"{index:064x}",
                      parameters={"temperature": 0.7, "max_tokens": 512, "top_p": 0.95}, latency_ms=101.7 + index,
                      prompt_tokens=812 + index, completion_tokens=64, response=response,
                      response_digest="" if response is not None else f"{index:016x}")


def sample_events(count: int = 200) -> dict[str, list[Event]]:
    """``count`` events of each kind, in one conversation, as a running conversation writes them."""
    key = StreamKey("bench-tenant", "bench-conversation")
    start = 1_700_000_000.0
    kinds: dict[str, list[Event]] = {kind: [] for kind in KINDS}
    for index in range(count):
        seq = index + 1
        turn = Turn(user_message=f"I went to the market on Tuesday and bought {index} apples for the pie.",
                    reply="That sounds lovely! Which recipe are you going to use, and is it for an occasion?",
                    narrative_seq=max(1, seq - 3), mode="full", memory=True, reflection=False)
        kinds["turn"].append(make_event(key, seq, turn, turn=seq, causation=f"{seq:032x}",
                                        provenance=_provenance(index), timestamp=start + seq))
        if index % 2:
            vector_payload: Belief | Recall = Belief(
                belief_id=f"b{index}", operation="assert", statement=f"The user bakes apple pies (note {index}).",
                memory_type="standard", confidence=0.62, related=(f"b{index - 1}",), about="the user",
                source_turn=seq, embedding=_vector(index), embedding_model="all-MiniLM-L6-v2",
                embedding_fingerprint=f"{index:064x}")
        else:
            vector_payload = Recall(
                query="what does the user bake?", query_embedding=_vector(index), embedding_model="all-MiniLM-L6-v2",
                query_fingerprint=f"{index:064x}", belief_ids=tuple(f"b{i}" for i in range(8)),
                review_ids=("r1",), edges=(("user", "bakes", "pie"), ("pie", "contains", "apples")),
                depth=100, analyzer="stemmed")
        kinds["vector"].append(make_event(key, seq, vector_payload, turn=seq, timestamp=start + seq))
        if index % 2:
            large: Narrative | PersonaChosen = Narrative(
                text=" ".join(f"The user mentioned baking ({index}, {word})." for word in range(500)),
                monologue_seq=seq - 1)
            kinds["large"].append(make_event(key, seq, large, turn=seq, provenance=_provenance(index),
                                             timestamp=start + seq))
        else:
            large = PersonaChosen(name="baker", version=f"{index:064x}", card="A patient baker. " * 200,
                                  emotions=("joy", "trust"), relationship={"warmth": 0.5, "closeness": 0.25},
                                  hard_goals=("never lie",), soft_goals=("talk about baking",),
                                  biography=tuple(f"Line {line} of the biography." for line in range(8)),
                                  biography_importance=tuple(0.1 * line for line in range(8)),
                                  biography_embeddings=tuple(_vector(index + line) for line in range(8)),
                                  embedding_model="all-MiniLM-L6-v2", embedding_fingerprint=f"{index:064x}")
            kinds["large"].append(make_event(key, seq, large, turn=seq, timestamp=start + seq))
    return kinds


# ------------------------------------------------------------------------------ timing


def _per_event_us(function: Callable[[Any], Any], items: Sequence[Any], repeats: int) -> float:
    """The fastest of ``repeats`` passes over ``items``, in µs an item (the least disturbed pass)."""
    passes = []
    for _ in range(repeats):
        started = time.perf_counter()
        for item in items:
            function(item)
        passes.append(time.perf_counter() - started)
    return round(min(passes) * 1e6 / len(items), 2)


def compare(events: Sequence[Event], msgspec_codec: MsgspecCodec, repeats: int = 5) -> dict[str, Any]:
    """One kind's figures: bytes, µs an event each way for both, and whether the bytes agree.

    msgspec's encode is timed on the codec's record (:meth:`MsgspecCodec.encode`), the only form
    that writes the same bytes; ``msgspec_dataclass_encode_us`` hands it the dataclasses.
    """
    records = [encode(event) for event in events]
    msgspec_records = [msgspec_codec.encode(event) for event in events]
    same_bytes = records == msgspec_records
    same_events = [msgspec_codec.decode(record) for record in records] == [decode(record) for record in records]
    for function, items in ((encode, events), (decode, records), (msgspec_codec.encode, events),
                            (msgspec_codec.decode, records)):
        _per_event_us(function, items[:20], 1)  # warm up
    current_encode = _per_event_us(encode, events, repeats)
    current_decode = _per_event_us(decode, records, repeats)
    msgspec_encode = _per_event_us(msgspec_codec.encode, events, repeats)
    msgspec_decode = _per_event_us(msgspec_codec.decode, records, repeats)
    msgspec_dataclass_encode = _per_event_us(msgspec_codec.encode_dataclasses, events, repeats)
    return {
        "events": len(events),
        "mean_bytes": round(statistics.fmean(map(len, records))),
        "current_encode_us": current_encode,
        "current_decode_us": current_decode,
        "msgspec_encode_us": msgspec_encode,
        "msgspec_decode_us": msgspec_decode,
        "msgspec_dataclass_encode_us": msgspec_dataclass_encode,
        "encode_speedup": round(current_encode / msgspec_encode, 2),
        "decode_speedup": round(current_decode / msgspec_decode, 2),
        "same_bytes": same_bytes,
        "same_events": same_events,
    }


def _refused(codec_decode: Callable[[bytes], Event], record: dict[str, Any]) -> bool:
    try:
        codec_decode(msgpack.packb(record, use_bin_type=True))
    except CorruptEvent:
        return True
    return False


def msgspec_semantics(msgspec_codec: MsgspecCodec) -> dict[str, dict[str, bool]]:
    """The codec's rules for bad or unusual input, each tried on both decoders."""
    key = StreamKey("bench-tenant", "bench-conversation")
    belief = make_event(key, 1, Belief(belief_id="b1", operation="assert", statement="s"), timestamp=1.0)
    base = event_to_record(belief)
    cases = {
        "refuses_an_unknown_payload_field": {**base, "payload": {**base["payload"], "colour": "red"}},
        "refuses_nan_in_a_float_field": {**base, "payload": {**base["payload"], "confidence": math.nan}},
        "refuses_true_for_an_int": {**base, "payload": {**base["payload"], "source_turn": True}},
        "refuses_an_unknown_envelope_field": {**base, "colour": "red"},
    }
    report = {name: {"current": _refused(decode, record), "msgspec": _refused(msgspec_codec.decode, record)}
              for name, record in cases.items()}
    reflection = make_event(key, 2, Reflection(portrait="p", accepted=True), timestamp=2.0)
    report["encodes_a_14_field_payload_dataclass_as_msgpack_python_does"] = {
        "current": True, "msgspec": msgspec_codec.encode_dataclasses(reflection) == encode(reflection)}
    whole = {**base, "payload": {**base["payload"], "confidence": 1}}
    data = msgpack.packb(whole, use_bin_type=True)
    report["writes_back_a_whole_number_in_a_float_field_as_read"] = {
        "current": encode(decode(data)) == data, "msgspec": msgspec_codec.encode(msgspec_codec.decode(data)) == data}
    return report


def run_codec_bench(count: int = 200, repeats: int = 5, logs: Sequence[Sequence[bytes]] = ()) -> dict[str, Any]:
    """Both codecs on ``count`` events of each kind (and on ``logs``, records as stored)."""
    if count < 1 or repeats < 1:
        raise ValueError("need count >= 1 and repeats >= 1")
    msgspec_codec = MsgspecCodec()
    load_average = os.getloadavg()[0]
    kinds = {kind: compare(events, msgspec_codec, repeats) for kind, events in sample_events(count).items()}
    for index, records in enumerate(logs):
        current = [record for record in records if msgpack.unpackb(record, raw=False)["f"] == RECORD_FORMAT]
        events = [decode(record) for record in records]
        figures = compare(events, msgspec_codec, repeats)
        # A stored log may hold older versions: what must agree is the current records' bytes.
        figures["same_bytes"] = [msgspec_codec.encode(decode(record)) for record in current] == [
            encode(decode(record)) for record in current]
        figures["same_events"] = [msgspec_codec.decode(record) for record in records] == events
        kinds[f"log{index}"] = figures
    import msgspec

    return {
        "benchmark": "codec",
        "msgspec": msgspec.__version__,
        "msgpack": ".".join(map(str, msgpack.version)),
        "cpus": os.cpu_count(),
        "load_average_1m": round(load_average, 1),
        "repeats": repeats,
        "kinds": kinds,
        "msgspec_semantics": msgspec_semantics(msgspec_codec),
    }


__all__ = ["DIMENSIONS", "KINDS", "MsgspecCodec", "compare", "msgspec_semantics", "run_codec_bench", "sample_events"]
