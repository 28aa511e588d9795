"""The stacks the benchmarks start, each in a throwaway temporary directory.

``nats_and_ingester``: the smallest stack a log benchmark needs (``bench ingest``,
``bench timetravel``, ``bench recompute``) — they append through JetStream and read back through the log's NATS API,
as the gateway does, without a gateway or Ray actors in the way; the ingester (one per shard of
a shard map) runs in its own process so its work is not charged to the benchmark's GIL.

``sim_stack``: the whole embedded stack on free ports against the simulator at a fixed latency
(``bench turns``, ``bench actors``), so what is measured over that latency is Mirror's.

Both run nats-server as Mirror does by default, with ``sync_interval: always`` (each ack after an
fsync); ``bench ingest --nats-sync`` may relax its server to compare.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirror.events.nats.server import SYNC_ALWAYS, EmbeddedNats
from mirror.events.shards import ShardMap
from mirror.processes import free_port
from mirror.stack.embedded import EmbeddedStack, StackSettings
from mirror.stack.processes import IngesterProcess


@dataclass(frozen=True, slots=True)
class LogStack:
    """What :func:`nats_and_ingester` runs: the NATS URL and the pids (``nats_pid`` None: NATS is not ours)."""

    url: str
    nats_pid: int | None
    ingester_pid: int | None
    """The default shard's ingester."""
    ingester_pids: dict[str, int | None] = field(default_factory=dict)
    """Every shard's ingester, by shard."""


@contextmanager
def nats_and_ingester(nats_url: str | None = None, shard_map: tuple[str, ...] = (),
                      sync_interval: str = SYNC_ALWAYS) -> Iterator[LogStack]:
    """Start NATS (unless ``nats_url`` names one; with ``sync_interval``, Mirror's default unless
    a benchmark compares) and an ingester per shard of ``shard_map`` (``SHARD=TENANT,TENANT``
    entries; none: the one shard ``0``); stop the ingesters and then NATS."""
    shards = ShardMap.parse(shard_map)
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as workdir, ExitStack() as ingesters:
        server = None if nats_url else EmbeddedNats(Path(workdir) / "nats", sync_interval=sync_interval).start()
        if server is not None:
            ingesters.callback(server.stop)  # last: after every ingester has stopped
        url = server.url if server is not None else str(nats_url)
        pids: dict[str, int | None] = {}
        for shard in shards.shards:
            ingester = IngesterProcess(url, Path(workdir) / f"log-{shard}.duckdb", shard=shard, shard_map=shard_map)
            ingesters.callback(ingester.stop)
            pids[shard] = ingester.start().pid
        yield LogStack(url, None if server is None else server.pid, pids[shards.default], pids)


@contextmanager
def sim_stack(name: str, llm_latency_ms: float, mode: str, **settings: Any) -> Iterator[EmbeddedStack]:
    """An embedded stack with ``llm="sim"`` at fixed latency; ``settings`` are the rest of :class:`StackSettings`."""
    with tempfile.TemporaryDirectory(prefix=f"mirror-bench-{name}-") as data:
        stack_settings = StackSettings(
            data_dir=Path(data), llm="sim", sim_latency=f"fixed:{llm_latency_ms:g}", mode=mode,
            gateway_port=free_port(), nats_port=free_port(), **settings,
        )
        with EmbeddedStack(stack_settings) as stack:
            yield stack
