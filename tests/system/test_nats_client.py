"""Mirror's NATS client against a real nats-server: raw and ordinary subscriptions on one
connection, a failing raw handler, and header blocks as nats-py sends them (the parser alone:
``tests/unit/test_nats_client.py``)."""

from __future__ import annotations

import nats
import pytest
from nats.errors import BadHeaderError

from mirror.events.nats._client import header_block
from mirror.events.nats.jetstream import connect_nats
from mirror.events.nats.server import EmbeddedNats
from tests.support.waits import until_async


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
