"""When does one JetStream atomic batch beat one fenced publish per event? (issue 38)

Mirror appends a thinking step's events through :meth:`JetStreamBus.append`: one fenced publish
per event (each awaits the ack of the one before, whose sequence is the next fence), or, with
``StreamSettings.atomic_appends``, one atomic batch (:mod:`mirror.events.nats._atomic`). This
bench appends ``steps`` steps of ``n`` events both ways through the bus, alternating, on fresh
embedded servers syncing always — a single server (R1) and a 3-node cluster (R3) — and prints per
step the wall ms and the servers' CPU ms (every node's).

What it found (nats-server 2.15.1, 2 busy cores; fsyncs counted with strace on the servers):
on R1 a batch is staged in a file store of its own (a directory, two synchronously written
metadata files, an fsynced block; ~4 fsyncs and ~20 file-system calls a batch), so it costs more
than 1-7 fenced publishes (3 events: 4 fsyncs against 3; servers' CPU ~2-3x); on R3 a batch is
one Raft proposal, one fsync on each replica for the whole step (3 against 3 per event) and a
third to a half of the servers' CPU at 3-7 events. Hence the default: batches on a replicated
stream only.

Run: ``python -m mirror.harness.bench.atomic_batch [n ...]`` (JSON on stdout).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mirror.events.bus import Head
from mirror.events.envelope import make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.cluster import EmbeddedNatsCluster
from mirror.events.nats.jetstream import JetStreamBus, StreamSettings
from mirror.events.payloads import Turn

TEXT = "x" * 500
"""About a thinking event's encoded size."""
WAYS = {"singles": False, "atomic": True}


def _servers_cpu_s(pids: list[int | None]) -> float:
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def _steps(bus: JetStreamBus, key: StreamKey, n: int, steps: int) -> None:
    head = Head(last_seq=0, fence=0)
    for step in range(steps):
        first = step * n + 1
        events = [make_event(key, seq, Turn(TEXT, str(seq)), turn=seq, timestamp=float(seq))
                  for seq in range(first, first + n)]
        head = await bus.append(key, events, head)


async def _probe(url: str, pids: list[int | None], sizes: list[int], steps: int, rounds: int) -> dict[str, Any]:
    buses = {way: await JetStreamBus.connect(url, StreamSettings(atomic_appends=atomic)) for way, atomic in WAYS.items()}
    try:
        await _steps(buses["singles"], StreamKey("probe", "warm"), 1, 20)
        totals: dict[str, list[float]] = {}
        for n in sizes:
            for round_ in range(rounds):  # alternate, so both ways see the same machine
                for way, bus in buses.items():
                    cpu, started = _servers_cpu_s(pids), time.perf_counter()
                    await _steps(bus, StreamKey("probe", f"{way}-{n}-{round_}"), n, steps)
                    seconds, cpu = time.perf_counter() - started, _servers_cpu_s(pids) - cpu
                    total = totals.setdefault(f"{way}_{n}", [0.0, 0.0])
                    total[0], total[1] = total[0] + seconds, total[1] + cpu
        return {name: {"step_ms": round(seconds / steps / rounds * 1e3, 2),
                       "servers_cpu_ms_per_step": round(cpu / steps / rounds * 1e3, 2)}
                for name, (seconds, cpu) in totals.items()}
    finally:
        for bus in buses.values():
            await bus.close()


def atomic_batch_cost(sizes: list[int], steps: int = 100, rounds: int = 2) -> dict[str, Any]:
    """Per cluster size (R1, R3) and step size ``n``: ``singles_<n>`` and ``atomic_<n>``."""
    figures: dict[str, Any] = {"steps": steps, "rounds": rounds}
    for size in (1, 3):
        with tempfile.TemporaryDirectory(prefix="mirror-atomic-batch-") as workdir, \
                EmbeddedNatsCluster(Path(workdir), size) as cluster:
            figures["sync_interval"] = cluster.sync_interval
            figures[f"R{size}"] = asyncio.run(_probe(cluster.url, cluster.pids, sizes, steps, rounds))
    return figures


if __name__ == "__main__":
    print(json.dumps(atomic_batch_cost([int(n) for n in sys.argv[1:]] or [1, 3, 7]), indent=2))


__all__ = ["atomic_batch_cost"]
