"""The gateway's two reads of the NATS stream itself: the head of a conversation's subject, and
the server-sent-events relay of its new events (``GET /v1/conversations/{id}/stream``).

Kept apart from the routes because they talk to JetStream directly, not through the log's
owner; the bus port is to grow what they need (issue 11), and then only this module changes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from mirror.actors.gateway.settings import GatewaySettings
from mirror.events.codec import decode, to_json_ready
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import subject_for

__all__ = ["_sse", "_stream_last_seq"]


async def _stream_last_seq(nc: Any, key: StreamKey, settings: GatewaySettings) -> int | None:
    import nats.js.errors

    try:
        message = await nc.jetstream().get_last_msg(settings.runtime.stream.name, subject_for(key), direct=True)
    except nats.js.errors.NotFoundError:
        return None
    return decode(message.data).seq


async def _sse(nc: Any, key: StreamKey) -> AsyncIterator[bytes]:
    """New events of ``key`` as server-sent events, as they are published."""
    queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=1000)

    async def on_message(message: Any) -> None:
        if not queue.full():
            queue.put_nowait(message.data)

    subscription = await nc.subscribe(subject_for(key), cb=on_message)
    try:
        yield b": connected\n\n"
        while True:
            try:
                data = await asyncio.wait_for(queue.get(), 15)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            event = decode(data)
            payload = json.dumps(to_json_ready(event), default=str)
            yield f"id: {event.seq}\nevent: {event.type}\ndata: {payload}\n\n".encode()
    finally:
        await subscription.unsubscribe()
