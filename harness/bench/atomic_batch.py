"""Would JetStream's atomic batch publish let one fsync cover a thinking step's events?

The question behind how Mirror appends a step's events (issue 38): today each event is its own
fenced publish, and with ``sync_interval: always`` each is fsynced before its ack. nats-server
2.12+ can store a batch atomically (stream ``allow_atomic``; headers ``Nats-Batch-Id``,
``Nats-Batch-Sequence``, ``Nats-Batch-Commit``), one event per message still. This probe times,
on one fresh embedded server syncing always, ``steps`` steps of ``n`` events each published
both ways, awaited as an append awaits them: ``singles`` (each fenced on the one before, as
``JetStreamBus.append``) and ``atomic`` (the first message fenced on the step's fence, one ack
for the whole batch). Per step: wall ms and the server's CPU ms.

What it found (nats-server 2.15.1, 2 cores, strace counting the server's syscalls): a batch is
staged in a store of its own on disk — per batch ~4 fsyncs, 3 mkdirs, 12 unlinks — so one
batch does not cost one fsync: at 7 events a step both ways cost about the same (~2.5 ms of
the server's CPU and ~12–16 ms a step), at 1–3 events a batch costs several times more, and
only at ~20 does it win (2.6 ms of CPU against 6). Inside a batch the fence works on the first
message only: ``Nats-Expected-Last-Subject-Sequence`` on a later message of the same subject
is refused (10071, or 10164 when every message carries the step's fence); a retry of a batch
that landed is refused as a whole (10201, a duplicate message id), not acknowledged as a
duplicate. Mirror's steps write 1–3 events, so it keeps one fenced publish per event.

Run: ``python -m mirror.harness.bench.atomic_batch [n ...]`` (JSON on stdout).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats
from nats.js.api import StorageType, StreamConfig

from mirror.events.nats._publisher import HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE, HEADER_MSG_ID
from mirror.events.nats.server import EmbeddedNats

HEADER_BATCH_ID = "Nats-Batch-Id"
HEADER_BATCH_SEQUENCE = "Nats-Batch-Sequence"
HEADER_BATCH_COMMIT = "Nats-Batch-Commit"
STREAM = "BATCHPROBE"
PAYLOAD = b"x" * 600
"""About a thinking event's encoded size."""


def _server_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        fields = stat.read().rpartition(b")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _singles(nc: Any, subject: str, n: int, steps: int) -> None:
    js, fence = nc.jetstream(), 0
    for step in range(steps):
        for index in range(n):
            ack = await js.publish(subject, PAYLOAD, headers={
                HEADER_MSG_ID: f"{subject}-{step}-{index}", HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE: str(fence)})
            fence = ack.seq


async def _atomic(nc: Any, subject: str, n: int, steps: int) -> None:
    fence = 0
    for step in range(steps):
        batch = secrets.token_hex(8)
        for index in range(n):
            headers = {HEADER_MSG_ID: f"{subject}-{step}-{index}", HEADER_BATCH_ID: batch,
                       HEADER_BATCH_SEQUENCE: str(index + 1)}
            if index == 0:
                headers[HEADER_EXPECTED_LAST_SUBJECT_SEQUENCE] = str(fence)
            if index < n - 1:
                await nc.publish(subject, PAYLOAD, headers=headers)
                continue
            headers[HEADER_BATCH_COMMIT] = "1"
            answer = json.loads((await nc.request(subject, PAYLOAD, headers=headers, timeout=10)).data)
            if "error" in answer:
                raise RuntimeError(f"atomic batch refused: {answer['error']}")
            fence = answer["seq"]


async def _probe(url: str, pid: int, sizes: list[int], steps: int) -> dict[str, Any]:
    nc = await nats.connect(url)
    try:
        await nc.jetstream().add_stream(StreamConfig(name=STREAM, subjects=["probe.>"], storage=StorageType.FILE,
                                                     allow_atomic=True))
        await _singles(nc, "probe.warm", 1, 20)
        figures: dict[str, Any] = {}
        for n in sizes:
            for way, publish in (("singles", _singles), ("atomic", _atomic)):
                cpu, started = _server_cpu_s(pid), time.perf_counter()
                await publish(nc, f"probe.{way}.{n}", n, steps)
                seconds, cpu = time.perf_counter() - started, _server_cpu_s(pid) - cpu
                figures[f"{way}_{n}"] = {"step_ms": round(seconds / steps * 1e3, 2),
                                         "server_cpu_ms_per_step": round(cpu / steps * 1e3, 2),
                                         "events_per_s": round(n * steps / seconds)}
        return figures
    finally:
        await nc.close()


def atomic_batch_cost(sizes: list[int], steps: int = 100) -> dict[str, Any]:
    """Per step size ``n``: ``singles_<n>`` and ``atomic_<n>`` on a fresh server syncing always."""
    with tempfile.TemporaryDirectory(prefix="mirror-atomic-batch-") as workdir, EmbeddedNats(Path(workdir)) as server:
        assert server.pid is not None, "a started server has a pid"
        return {"steps": steps, "sync_interval": server.sync_interval,
                **asyncio.run(_probe(server.url, server.pid, sizes, steps))}


if __name__ == "__main__":
    print(json.dumps(atomic_batch_cost([int(n) for n in sys.argv[1:]] or [1, 3, 7, 20]), indent=2))


__all__ = ["atomic_batch_cost"]
