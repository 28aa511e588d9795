"""The stacks the benchmarks start, each in a throwaway temporary directory.

``nats_and_ingester``: the smallest stack a log benchmark needs (``bench ingest``,
``bench timetravel``, ``bench recompute``) — they append through JetStream and read back through the log's NATS API,
as the gateway does, without a gateway or Ray actors in the way; the ingester runs in its own
process so its work is not charged to the benchmark's GIL.

``sim_stack``: the whole embedded stack on free ports against the simulator at a fixed latency
(``bench turns``, ``bench actors``), so what is measured over that latency is Mirror's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.actors.stack.embedded import EmbeddedStack, StackSettings
from mirror.actors.stack.processes import IngesterProcess
from mirror.events.nats.server import EmbeddedNats, free_port


@dataclass(frozen=True, slots=True)
class LogStack:
    """What :func:`nats_and_ingester` runs: the NATS URL and the pids (``nats_pid`` None: NATS is not ours)."""

    url: str
    nats_pid: int | None
    ingester_pid: int | None


@contextmanager
def nats_and_ingester(nats_url: str | None = None) -> Iterator[LogStack]:
    """Start NATS (unless ``nats_url`` names one) and an ingester; stop the ingester and then NATS."""
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as workdir:
        server = None if nats_url else EmbeddedNats(Path(workdir) / "nats").start()
        try:
            url = server.url if server is not None else str(nats_url)
            ingester = IngesterProcess(url, Path(workdir) / "log.duckdb").start()
            try:
                yield LogStack(url, None if server is None else server.pid, ingester.pid)
            finally:
                ingester.stop()
        finally:
            if server is not None:
                server.stop()


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
