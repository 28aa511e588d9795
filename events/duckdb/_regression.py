"""Is the stream still the one the log was filled from? The ingester's check of its stream.

A broker acknowledges a publish once it is in the stream; a stream whose disk comes back older
(a power failure with a relaxed ``sync_interval``, a restored backup, a lost disk) or that was
deleted and made again hands out stream sequences the log has already committed past. Trusting
the committed offset then skips every new message at or below it — acknowledged turns missing
from the log, with no gap to show it. So the ingester keeps, with its data, the stream's
creation time and its newest stored message (stream seq and event id: compaction keeps that
message in the stream until a newer one of its subject is committed), and asks the stream:

- a different creation time: the stream was **recreated**;
- a last sequence below the committed offset: it **went backwards**;
- another message (or none) where the newest stored one stood: it went backwards and has
  since been written past the old offset.

Any of these is a :class:`~mirror.events.log.StreamRegression`; the ingester then re-reads
everything the stream still holds and stores each event once (primary key and bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

import nats.js.errors
from nats.js import JetStreamContext

from mirror.events.codec import decode
from mirror.events.errors import BusError, CodecError, DataKeyErased
from mirror.events.log import StreamMark, StreamRegression
from mirror.events.nats.sealing import DataKeys


@dataclass(frozen=True, slots=True)
class StreamCheck:
    created: str | None
    """The stream's creation time as the broker reports it (ISO 8601), if it does."""
    regression: StreamRegression | None


async def check_stream(js: JetStreamContext, stream: str, mark: StreamMark, committed_offset: int,
                       keys: DataKeys | None = None) -> StreamCheck:
    """Compare the stream with what the log knows of it (see the module docstring); ``keys``
    opens a sealed message (:mod:`mirror.events.nats.sealing`)."""
    info = await js.stream_info(stream)
    created = info.created.isoformat() if info.created is not None else None
    last_seq = info.state.last_seq or 0
    reread_from = max(1, info.state.first_seq or 1)

    def regression(kind: str, detail: str) -> StreamCheck:
        return StreamCheck(created, StreamRegression(kind, detail, committed_offset, last_seq, reread_from))

    if mark.created is not None and created is not None and created != mark.created:
        return regression("recreated", f"{stream} was created at {created}, not at {mark.created} as when the log "
                                       "was filled from it")
    if last_seq < committed_offset:
        return regression("went backwards", f"{stream} ends at seq {last_seq}, below the log's committed offset")
    if mark.anchor_seq and mark.anchor_id:
        try:
            stored = await js.get_msg(stream, seq=mark.anchor_seq)  # from the leader, not a lagging replica
        except nats.js.errors.NotFoundError:
            return regression("went backwards", f"{stream} no longer holds seq {mark.anchor_seq}, the newest message "
                                                f"the log stored ({mark.anchor_id})")
        try:
            data = stored.data or b""
            if keys is not None and stored.subject:
                _, tenant, conversation, _ = stored.subject.split(".", 3)
                data = await keys.open(tenant, conversation, data)
            found = decode(data).id
        except DataKeyErased:  # a forgotten conversation's, erased next: its id cannot be read, nor doubted
            return StreamCheck(created, None)
        except (CodecError, BusError, ValueError):
            found = "a message that is not an event"
        if found != mark.anchor_id:
            return regression("went backwards", f"{stream} holds {found} at seq {mark.anchor_seq}, where the log "
                                                f"stored {mark.anchor_id}")
    return StreamCheck(created, None)


__all__ = ["StreamCheck", "check_stream"]
