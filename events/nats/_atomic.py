"""One append of several events as one JetStream atomic batch (nats-server 2.12+, ADR-50).

Why: on a replicated stream each fenced publish is a Raft round of its own — every replica
fsyncs once per event and the writer waits for each ack before sending the next (the next
fence is the previous ack's sequence). An atomic batch is proposed to the stream's Raft group
as one multi-entry proposal: one round trip and one fsync on each replica for the whole step
(measured on a loopback R3 cluster syncing always: 3 fsyncs a step instead of 3 per event, a
third of the servers' CPU at 3-7 events; ``python -m mirror.harness.bench.atomic_batch``).

Why not on a single server: there a batch is first staged in a file store of its own (a
directory, two synchronously written metadata files, a block fsynced before the commit), then
removed — about 4 fsyncs and 20 file-system operations a batch, which costs more than the 1-7
fenced publishes of a thinking step. :func:`batches_pay_off` says when to use them.

What stays as before: one message per event, with the same data and ``Nats-Msg-Id``, so every
reader (ingester, subscriptions, rebuild, compaction, erase) sees the stream it always did, plus
the batch headers. The fence: only the batch's first message carries
``Nats-Expected-Last-Subject-Sequence`` (the server refuses it on a later message of the same
subject) and a refusal refuses the whole batch. What a batch does not do like a single publish:
a retried batch whose message ids are stored is refused as a whole (10201) rather than
acknowledged as a duplicate, and a batch the server dropped half-way (too many in flight, its
10 s timer, a leader change) is answered "incomplete" (or not at all). So a batch is tried once:
any answer but a clean ack raises :class:`BatchNotStored` and the caller appends the same events
one fenced publish at a time, whose id and byte comparisons tell what (if anything) landed.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Sequence

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import StreamConfig

from mirror import tracing
from mirror.events.errors import BusError
from mirror.events.nats._client import MirrorNatsClient
from mirror.events.nats._publisher import HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE, HEADER_MSG_ID, PipelinedPublisher

log = logging.getLogger(__name__)

HEADER_BATCH_ID = "Nats-Batch-Id"
HEADER_BATCH_SEQUENCE = "Nats-Batch-Sequence"
HEADER_BATCH_COMMIT = "Nats-Batch-Commit"
COMMIT = "1"
"""``Nats-Batch-Commit: 1`` stores the message carrying it as the batch's last."""

MAX_BATCH_EVENTS = 100
"""Appends longer than this go one publish at a time (the server's limit is 1,000 messages)."""

ERR_ATOMIC_PUBLISH_DISABLED = 10174
"""The stream does not allow atomic batches (``allow_atomic`` off, e.g. recreated without it)."""


class BatchNotStored(Exception):
    """The batch was not acknowledged; what landed is for the one-at-a-time path to find out.

    ``disabled``: the stream refuses batches altogether, so the next append should not try."""

    def __init__(self, reason: str, *, disabled: bool = False) -> None:
        super().__init__(reason)
        self.disabled = disabled


def batches_pay_off(replicas: int, allow_atomic: bool | None, setting: bool | None) -> bool:
    """Whether appends of several events go as atomic batches on this stream.

    ``setting`` (:attr:`~mirror.events.nats.jetstream.StreamSettings.atomic_appends`) True or
    False decides; None: on a replicated stream only (see the module docstring). Never when the
    server did not keep ``allow_atomic`` (older than 2.12: it ignores the option)."""
    if not allow_atomic:
        return False
    return setting if setting is not None else replicas > 1


async def allow_atomic(js: JetStreamContext, config: StreamConfig) -> StreamConfig:
    """``config`` updated to allow atomic batches; as it was if the server refuses (it goes on
    appending one publish at a time). A server older than 2.12 accepts the update and ignores it."""
    try:
        updated = await js.update_stream(dataclasses.replace(config, allow_atomic=True))
    except nats.js.errors.APIError as exc:
        log.warning("JetStream stream %s refused atomic batches (%s): appends go one message at a time",
                    config.name, exc.description)
        return config
    log.info("JetStream stream %s now allows atomic batches", config.name)
    return updated.config


def batchable(count: int) -> bool:
    return 2 <= count <= MAX_BATCH_EVENTS


async def publish_batch(
    nc: MirrorNatsClient,
    publisher: PipelinedPublisher,
    subject: str,
    ids: Sequence[str],
    data: Sequence[bytes],
    fence: int,
    timeout_s: float,
) -> int:
    """Publish ``data`` (one message each, ids ``ids``) on ``subject`` as one atomic batch whose
    first message is fenced on ``fence``; the stream sequence of its last message.

    The messages before the commit go without a reply subject (the server answers each staged
    one with an empty message otherwise), so the batch costs one round trip.
    Raises :class:`BatchNotStored` for anything but a clean ack."""
    batch_id = secrets.token_hex(12)  # a fresh id per attempt: a retry never joins a stale half-batch
    last = len(data) - 1
    try:
        for index in range(last):
            headers = {HEADER_MSG_ID: ids[index], HEADER_BATCH_ID: batch_id, HEADER_BATCH_SEQUENCE: str(index + 1)}
            if index == 0:
                headers[HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE] = str(fence)
            await nc.publish(subject, data[index], headers=tracing.inject(headers))
        ack = await publisher.publish(subject, data[last], tracing.inject({
            HEADER_MSG_ID: ids[last], HEADER_BATCH_ID: batch_id,
            HEADER_BATCH_SEQUENCE: str(last + 1), HEADER_BATCH_COMMIT: COMMIT,
        }), timeout_s)
    except nats.js.errors.APIError as exc:
        raise BatchNotStored(f"refused: {exc}", disabled=exc.err_code == ERR_ATOMIC_PUBLISH_DISABLED) from exc
    except (nats.errors.Error, TimeoutError, BusError) as exc:
        raise BatchNotStored(f"not answered: {exc!r}") from exc
    if ack.duplicate:  # not how a server answers a batch; the one-at-a-time path checks the bytes
        raise BatchNotStored(f"answered as a duplicate at stream sequence {ack.seq}")
    return ack.seq


__all__ = [
    "ERR_ATOMIC_PUBLISH_DISABLED", "HEADER_BATCH_COMMIT", "HEADER_BATCH_ID", "HEADER_BATCH_SEQUENCE",
    "MAX_BATCH_EVENTS", "BatchNotStored", "allow_atomic", "batchable", "batches_pay_off", "publish_batch",
]
