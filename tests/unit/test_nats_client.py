"""Mirror's NATS client parts against nats-py's own: the protocol parser and raw subscriptions."""

from __future__ import annotations

import asyncio

import nats
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats.errors import BadHeaderError
from nats.protocol.parser import Parser

from mirror.events.nats._client import _MessageParser, header_block, status_of
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.server import EmbeddedNats
from tests.support.waits import until_async


class Recorder:
    """What a parser hands the client: messages, pings, pongs, infos, errors."""

    def __init__(self) -> None:
        self.seen: list[tuple] = []

    async def _process_msg(self, sid, subject, reply, data, headers) -> None:
        self.seen.append(("msg", sid, bytes(subject), bytes(reply), bytes(data), None if headers is None else bytes(headers)))

    async def _process_ping(self) -> None:
        self.seen.append(("ping",))

    async def _process_pong(self) -> None:
        self.seen.append(("pong",))

    async def _process_info(self, info, initial_connection=False) -> None:
        self.seen.append(("info", info))

    async def _process_err(self, message) -> None:
        self.seen.append(("err", message))


def frame(kind: int, index: int) -> bytes:
    payload = f"payload {index} ".encode() * (index % 4)
    headers = f"NATS/1.0\r\nNats-Msg-Id: id-{index}\r\n\r\n".encode()
    reply = f" $JS.ACK.MIRROR.ingest-0.1.{index}.{index}.1.0" if index % 2 else ""
    if kind == 0:
        return f"MSG mirror.t.c{index}.main {index}{reply} {len(payload)}\r\n".encode() + payload + b"\r\n"
    if kind == 1:
        return (
            f"HMSG mirror.t.c{index}.main {index}{reply} {len(headers)} {len(headers) + len(payload)}\r\n".encode()
            + headers + payload + b"\r\n"
        )
    if kind == 2:
        return b"PING\r\n"
    if kind == 3:
        return b"+OK\r\n"
    return b'INFO {"server_id":"x","max_payload":1048576}\r\n'


async def parse_in_chunks(parser_class: type[Parser], stream: bytes, cuts: list[int]) -> list[tuple]:
    recorder = Recorder()
    parser = parser_class(recorder)
    previous = 0
    for cut in [*sorted(cuts), len(stream)]:
        await parser.parse(stream[previous:cut])
        previous = cut
    return recorder.seen


@settings(max_examples=200, deadline=None)
@given(
    kinds=st.lists(st.integers(0, 4), min_size=1, max_size=30),
    cut_fractions=st.lists(st.floats(0, 1), max_size=12),
)
def test_the_message_parser_reads_what_nats_py_reads_however_the_bytes_are_cut(kinds, cut_fractions) -> None:
    stream = b"".join(frame(kind, index) for index, kind in enumerate(kinds))
    cuts = [int(fraction * len(stream)) for fraction in cut_fractions]
    ours = asyncio.run(parse_in_chunks(_MessageParser, stream, cuts))
    theirs = asyncio.run(parse_in_chunks(Parser, stream, []))
    assert ours == theirs
    assert sum(kind in (0, 1) for kind in kinds) == sum(item[0] == "msg" for item in ours)


def test_status_messages_are_told_from_data_messages_by_their_header_block() -> None:
    expired = b"NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 10\r\nNats-Pending-Bytes: 0\r\n\r\n"
    status = status_of(expired)
    assert status is not None
    code, rest = status
    assert code == b"408" and b"Nats-Pending-Messages: 10" in rest
    assert (status_of(b"NATS/1.0 404 No Messages\r\n\r\n") or (None,))[0] == b"404"
    assert (status_of(b"NATS/1.0 503\r\n\r\n") or (None,))[0] == b"503"
    assert status_of(b"NATS/1.0\r\nNats-Msg-Id: abc\r\n\r\n") is None  # a published message's headers
    assert status_of(None) is None


async def test_raw_and_ordinary_subscriptions_share_a_connection(nats_server: EmbeddedNats) -> None:
    nc = await connect_nats(nats_server.url)
    raw: list[tuple[bytes, bytes, bytes, bytes | None]] = []
    ordinary: list[bytes] = []

    async def on_raw(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        raw.append((subject, reply, data, headers))

    async def on_message(msg) -> None:
        ordinary.append(msg.data)

    markers: list[bytes] = []

    async def on_marker(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        markers.append(data)

    subscription = await nc.subscribe_raw("raw.>", on_raw)
    await nc.subscribe("plain.>", cb=on_message)
    await nc.subscribe_raw("marker", on_marker)
    await nc.publish("raw.a", b"one", reply="inbox.1", headers={"Nats-Msg-Id": "m1"})
    await nc.publish("plain.a", b"two")
    await nc.publish("raw.b", b"three")
    await nc.flush()
    await until_async(lambda: len(raw) >= 2 and len(ordinary) >= 1, "both subscriptions' messages arrived")
    assert [(subject, reply, data) for subject, reply, data, _ in raw] == [
        (b"raw.a", b"inbox.1", b"one"), (b"raw.b", b"", b"three"),
    ]
    assert raw[0][3] is not None and b"Nats-Msg-Id: m1" in raw[0][3] and raw[1][3] is None
    assert ordinary == [b"two"]
    await nc.unsubscribe_raw(subscription)
    await nc.publish("raw.c", b"after")
    await nc.publish("marker", b"later")  # one publisher, one connection: delivered after raw.c would be
    await nc.flush()
    await until_async(lambda: markers == [b"later"], "the marker arrived")
    assert len(raw) == 2
    await nc.close()


async def test_a_failing_raw_handler_does_not_stop_the_connection(nats_server: EmbeddedNats) -> None:
    nc = await connect_nats(nats_server.url)
    seen: list[bytes] = []

    async def fragile(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        seen.append(data)
        if data == b"bad":
            raise RuntimeError("handler bug")

    await nc.subscribe_raw("fragile", fragile)
    for data in (b"bad", b"good"):
        await nc.publish("fragile", data)
    await nc.flush()
    await until_async(lambda: len(seen) >= 2, "both messages reached the handler")
    assert seen == [b"bad", b"good"]
    assert (await nc.request("$JS.API.INFO", b"", timeout=5)).data  # still reading replies
    await nc.close()


HEADER_CASES = [
    {"Nats-Msg-Id": "0123456789abcdef", "Nats-Expected-Last-Subject-Sequence": "12"},
    {" Padded ": "  value with spaces  ", "Empty-Value": ""},
    {"Multi": "line\r\nbreak\ninside", "   ": "skipped: the name is blank"},
    {"Unicode": "café ✓"},
]


async def test_headers_arrive_as_nats_py_sends_them(nats_server: EmbeddedNats) -> None:
    """Mirror's header encoder against nats-py's, through a real server: same header blocks."""
    ours = await connect_nats(nats_server.url)
    theirs = await nats.connect(nats_server.url)
    received: dict[bytes, list[bytes | None]] = {b"headers.ours": [], b"headers.theirs": []}

    async def on_raw(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
        received[subject].append(headers)

    await ours.subscribe_raw("headers.>", on_raw)
    await ours.flush()
    for headers in HEADER_CASES:
        await ours.publish("headers.ours", b"x", headers=headers)
        await ours.flush()
        await theirs.publish("headers.theirs", b"x", headers=headers)
        await theirs.flush()
    # Each connection's messages arrive in its own order; the server may interleave the two.
    await until_async(lambda: all(len(blocks) == len(HEADER_CASES) for blocks in received.values()),
                      "every header block arrived")
    assert received[b"headers.ours"] == received[b"headers.theirs"]
    assert len(received[b"headers.ours"]) == len(HEADER_CASES)
    assert received[b"headers.ours"][0] == header_block(HEADER_CASES[0])
    for client in (ours, theirs):
        with pytest.raises(BadHeaderError):
            await client.publish("headers.bad", b"x", headers={"bad name": "v"})
    await ours.close()
    await theirs.close()
