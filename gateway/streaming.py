"""The gateway's two reads of the bus itself: the head of a conversation's stream, and the
server-sent-events relay of its new events (``GET /v1/conversations/{id}/stream``).

Kept apart from the routes because they read the bus (through its port), not the log's owner.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from mirror.events.bus import EventBus
from mirror.events.codec import to_json_ready
from mirror.events.ids import StreamKey

__all__ = ["SSE_KEEP_ALIVE_S", "_sse", "_stream_last_seq"]


async def _stream_last_seq(bus: EventBus, key: StreamKey) -> int | None:
    """The last seq the bus holds for ``key`` (None: nothing), committed to the log yet or not."""
    return (await bus.head(key)).last_seq


SSE_KEEP_ALIVE_S = 15.0


async def _sse(bus: EventBus, key: StreamKey) -> AsyncIterator[bytes]:
    """New events of ``key`` as server-sent events, as they are appended."""
    subscription = await bus.subscribe(key)
    try:
        yield b": connected\n\n"
        while True:
            try:  # a cancelled wait loses nothing (see Subscription)
                event = await asyncio.wait_for(anext(subscription), SSE_KEEP_ALIVE_S)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            except StopAsyncIteration:
                return
            payload = json.dumps(to_json_ready(event), default=str)
            yield f"id: {event.seq}\nevent: {event.type}\ndata: {payload}\n\n".encode()
    finally:
        await subscription.aclose()
