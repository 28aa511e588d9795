"""Mirror's NATS client parts against nats-py's own, in process: the protocol parser and status
messages. Subscriptions through a real nats-server are in ``tests/system/test_nats_client.py``."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st
from nats.protocol.parser import Parser

from mirror.events.nats._client import _MessageParser, status_of


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
