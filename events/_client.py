"""Mirror's NATS client: nats-py's, with a faster header parser and raw subscriptions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from nats.aio.client import Client as NatsClient
from nats.aio.subscription import Subscription

_CRLF = b"\r\n"


def _parse_header_lines(raw: bytes) -> dict[str, str]:
    """NATS header block -> dict, without nats-py's per-character whitespace scan.

    nats-py 2.16 checks every character of every header name with a generator; for an
    ingester reading fenced messages that scan was its largest single cost. Header names
    containing whitespace are still dropped, as nats-py does.
    """
    out: dict[str, str] = {}
    for line in raw.split(_CRLF):
        name, sep, value = line.partition(b":")
        if not sep:
            continue
        key = name.strip()
        if not key or len(key.split()) != 1 or not key.isascii():
            continue
        out[key.decode("ascii")] = value.strip().decode("utf-8", "replace")
    return out


_STATUS_LINE = b"NATS/1.0 "


def status_of(header_block: bytes | None) -> tuple[bytes, bytes] | None:
    """(status code, rest of the block) of a server status message, None for any other.

    ``NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 12\r\n\r\n``; a published
    message's header block starts ``NATS/1.0\r\n`` and has no code.
    """
    if not header_block or not header_block.startswith(_STATUS_LINE):
        return None
    line, _, rest = header_block.partition(b"\r\n")
    code = line[len(_STATUS_LINE) : len(_STATUS_LINE) + 3]
    return (code, rest) if code.isdigit() else None


RawHandler = Callable[[bytes, bytes, bytes, "bytes | None"], Awaitable[None]]
"""``handler(subject, reply, data, header_block)`` for :meth:`MirrorNatsClient.subscribe_raw`."""


class MirrorNatsClient(NatsClient):
    """nats-py's client with a faster header parser and raw subscriptions.

    A raw subscription hands each message to its handler straight from the read loop, as the
    protocol parser cut it — no ``Msg`` object, no header dict, no queue and no task switch
    per message. The ingester's feed and the publisher's ack inbox use it: at tens of thousands
    of messages a second that per-message machinery cost more than checking the records.
    Other subscriptions behave exactly as in nats-py.
    """

    _parse_header_lines = staticmethod(_parse_header_lines)

    def __init__(self) -> None:
        super().__init__()
        self._raw_handlers: dict[int, RawHandler] = {}

    async def subscribe_raw(self, subject: str, handler: RawHandler) -> Subscription:
        """Subscribe ``handler``; stop with :meth:`unsubscribe_raw`. Survives reconnects (same sid)."""
        subscription = await self.subscribe(subject)
        self._raw_handlers[subscription._id] = handler
        return subscription

    async def unsubscribe_raw(self, subscription: Subscription) -> None:
        self._raw_handlers.pop(subscription._id, None)
        if not self.is_closed:
            await subscription.unsubscribe()

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        handler = self._raw_handlers.get(sid)
        if handler is None:
            return await super()._process_msg(sid, subject, reply, data, headers)
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        await handler(subject, reply, data, headers)
