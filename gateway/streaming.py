"""The server-sent-events relay of a conversation's events (``GET /v1/conversations/{id}/stream``):
a catch-up from the log, then the bus's new events, with no gap and no event twice.

Kept apart from the route because it reads the bus itself (through its port), not the log's owner.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence

from mirror.events.bus import Subscription
from mirror.events.codec import to_json_ready
from mirror.events.envelope import Event

__all__ = ["SSE_KEEP_ALIVE_S", "_sse"]

SSE_KEEP_ALIVE_S = 15.0


def _frame(event: Event) -> bytes:
    payload = json.dumps(to_json_ready(event), default=str)
    return f"id: {event.seq}\nevent: {event.type}\ndata: {payload}\n\n".encode()


async def _sse(subscription: Subscription, backlog: Sequence[Event] = ()) -> AsyncIterator[bytes]:
    """``backlog`` (events read from the log), then the subscription's events as server-sent events.

    The subscription must have started before the backlog was read: then an event is in one or
    the other (or both, and the live copy is skipped), never in neither."""
    sent = backlog[-1].seq if backlog else 0
    try:
        yield b": connected\n\n"
        for event in backlog:
            yield _frame(event)
        while True:
            try:  # a cancelled wait loses nothing (see Subscription)
                event = await asyncio.wait_for(anext(subscription), SSE_KEEP_ALIVE_S)
            except TimeoutError:
                yield b": keep-alive\n\n"
                continue
            except StopAsyncIteration:
                return
            if event.seq > sent:
                yield _frame(event)
    finally:
        await subscription.aclose()
