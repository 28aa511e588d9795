"""Mirror's NATS client: nats-py's, with a faster header parser and raw subscriptions."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from nats.aio.client import _HEADER_KEY_RE, _HEADER_VALUE_NEWLINES
from nats.aio.client import Client as NatsClient
from nats.aio.subscription import Subscription
from nats.errors import BadHeaderError, ProtocolError
from nats.protocol.parser import AWAITING_CONTROL_LINE, AWAITING_MSG_PAYLOAD, MAX_CONTROL_LINE_SIZE, Parser

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


_HEADER_LINE = b"NATS/1.0\r\n"
_HEADER_PREFIXES: dict[str, bytes] = {}
"""``b"Name: "`` per header name already validated (the names a process uses are few)."""


def header_block(headers: dict[str, str]) -> bytes:
    """The NATS header block nats-py would send for ``headers``, byte for byte.

    nats-py validates each name with a regex, translates every value (a dict lookup per
    character) and grows a bytearray piece by piece on every publish, which cost a fenced
    publish more than the rest of nats-py's publish; here each name is validated once and a
    value is translated only if it holds CR or LF. Names are stripped and skipped when empty, a name outside the
    token characters is :class:`BadHeaderError`, values are stripped with CR/LF as spaces.
    """
    lines = [_HEADER_LINE]
    for name, value in headers.items():
        prefix = _HEADER_PREFIXES.get(name)
        if prefix is None:
            key = name.strip()
            if not key:
                continue
            if not _HEADER_KEY_RE.fullmatch(key):
                raise BadHeaderError(key)
            prefix = key.encode() + b": "
            if len(_HEADER_PREFIXES) < 1024:
                _HEADER_PREFIXES[name] = prefix
        value = value.strip()
        if "\r" in value or "\n" in value:  # str.translate costs microseconds even when idle
            value = value.translate(_HEADER_VALUE_NEWLINES)
        lines.append(prefix + value.encode() + _CRLF)
    lines.append(_CRLF)
    return b"".join(lines)


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


class _MessageParser(Parser):
    """nats-py's protocol parser, with MSG and HMSG lines cut by ``split`` instead of regexes.

    Nearly everything a busy publisher or ingester reads is MSG (acks) or HMSG (consumed
    events); nats-py tries a regex per protocol operation on each. Any other operation (PING,
    PONG, INFO, +OK, -ERR) goes to nats-py's parser unchanged, as does the rest of that buffer.
    """

    async def parse(self, data: bytes = b"") -> None:
        buf = self.buf
        buf.extend(data)
        # Cut messages from one immutable copy by position and drop what was consumed once at
        # the end: trimming the bytearray per message cost as much as the rest of the parse.
        view = bytes(buf)
        size = len(view)
        position = 0
        try:
            while position < size:
                if self.state == AWAITING_MSG_PAYLOAD:
                    end = position + self.needed
                    if size < end + 2:
                        return  # the payload has not all arrived
                    header_end = position + self.header_needed
                    headers = view[position:header_end] if header_end > position else None
                    payload = view[header_end:end]
                    self.header_needed = 0
                    position = end + 2
                    self.state = AWAITING_CONTROL_LINE
                    arg = self.msg_arg
                    await self.nc._process_msg(arg["sid"], arg["subject"], arg["reply"], payload, headers)
                elif view.startswith(b"MSG ", position) or view.startswith(b"HMSG ", position):
                    end = view.find(b"\r\n", position)
                    if end < 0:
                        if size - position > MAX_CONTROL_LINE_SIZE:
                            raise ProtocolError("nats: control line too long")
                        return
                    args = view[position:end].split()
                    position = end + 2
                    # MSG <subject> <sid> [reply] <size>; HMSG <subject> <sid> [reply] <header size> <size>
                    sizes = 1 if args[0] == b"MSG" else 2
                    if len(args) not in (3 + sizes, 4 + sizes):
                        raise ProtocolError("nats: malformed MSG")
                    try:
                        self.msg_arg = {
                            "subject": args[1],
                            "sid": int(args[2]),
                            "reply": args[3] if len(args) == 4 + sizes else b"",
                        }
                        self.needed = int(args[-1])
                        self.header_needed = int(args[-2]) if sizes == 2 else 0
                    except ValueError:
                        raise ProtocolError("nats: malformed MSG") from None
                    self.state = AWAITING_MSG_PAYLOAD
                else:
                    del buf[:position]
                    position = 0
                    await super().parse()
                    return
        finally:
            if position:
                del buf[:position]


RawHandler = Callable[[bytes, bytes, bytes, "bytes | None"], Awaitable[None]]
"""``handler(subject, reply, data, header_block)`` for :meth:`MirrorNatsClient.subscribe_raw`.

It runs inside the connection's read loop, so it must not wait on anything slow; an exception
it raises goes to the connection's error callback, as for nats-py's subscription callbacks."""


class MirrorNatsClient(NatsClient):
    """nats-py's client with faster protocol and header parsing, a faster header encoder and
    raw subscriptions.

    A raw subscription hands each message to its handler straight from the read loop, as the
    protocol parser cut it — no ``Msg`` object, no header dict, no queue and no task switch
    per message. The ingester's feed and the publisher's ack inbox use it: at tens of thousands
    of messages a second that per-message machinery cost more than checking the records.
    Other subscriptions behave exactly as in nats-py.
    """

    _parse_header_lines = staticmethod(_parse_header_lines)

    def __init__(self, server_urls: list[str] | None = None) -> None:
        super().__init__()
        self.server_urls: tuple[str, ...] = tuple(server_urls or ())
        """The servers it was told to connect to (``connect_nats``'s URL list): the stream's default replicas."""
        self._ps = _MessageParser(self)
        self._raw_handlers: dict[int, RawHandler] = {}

    @property
    def server_list(self) -> str:
        """The servers this client may connect to, for messages (``host:port,host:port``)."""
        return ",".join(uri.netloc for uri in self.servers) or "(none)"

    async def wait_connected(self, grace_s: float) -> bool:
        """True once connected; while reconnecting, waits up to ``grace_s`` (a cluster fails over
        in a fraction of a second). False if still not connected then, or closed."""
        if self.is_connected:
            return True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while not self.is_connected:
            if self.is_closed or loop.time() >= deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    async def subscribe_raw(self, subject: str, handler: RawHandler) -> Subscription:
        """Subscribe ``handler``; stop with :meth:`unsubscribe_raw`. Survives reconnects (same sid)."""
        subscription = await self.subscribe(subject)
        self._raw_handlers[subscription._id] = handler
        return subscription

    async def unsubscribe_raw(self, subscription: Subscription) -> None:
        self._raw_handlers.pop(subscription._id, None)
        if not self.is_closed:
            await subscription.unsubscribe()

    async def _send_publish(
        self, subject: str, reply: str, payload: bytes, payload_size: int, headers: dict[str, str] | None
    ) -> None:
        if headers is None or not subject:
            return await super()._send_publish(subject, reply, payload, payload_size, headers)
        # As nats-py's, with the header block from header_block().
        block = header_block(headers)
        command = f"HPUB {subject} {reply} {len(block)} {len(block) + payload_size}\r\n".encode() + block + payload + _CRLF
        self.stats["out_msgs"] += 1
        self.stats["out_bytes"] += payload_size
        await self._send_command(command)
        if self._flush_queue is not None and self._flush_queue.empty():
            await self._flush_pending()

    async def _process_msg(
        self, sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
    ) -> None:
        handler = self._raw_handlers.get(sid)
        if handler is None:
            return await super()._process_msg(sid, subject, reply, data, headers)  # type: ignore[arg-type]  # nats-py annotates headers as bytes, yet its parser passes None when a message has none
        self.stats["in_msgs"] += 1
        self.stats["in_bytes"] += len(data)
        try:
            await handler(subject, reply, data, headers)
        except Exception as exc:  # as nats-py does for callbacks: reported, and the read loop lives on
            await self._error_cb(exc)
