"""The stacks the benchmarks start, each in a throwaway temporary directory.

``nats_and_ingester``: the smallest stack a log benchmark needs (``bench timetravel``,
``bench recompute``) — they append through JetStream and read back through the log's NATS API,
as the gateway does, without a gateway or Ray actors in the way; the ingester runs in its own
process so its work is not charged to the benchmark's GIL.

``sim_stack``: the whole embedded stack on free ports against the simulator at a fixed latency
(``bench turns``, ``bench actors``), so what is measured over that latency is Mirror's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mirror.actors.stack.embedded import EmbeddedStack, StackSettings
from mirror.actors.stack.processes import IngesterProcess
from mirror.events.nats.server import EmbeddedNats, free_port


@contextmanager
def nats_and_ingester() -> Iterator[str]:
    """Start both, yield the NATS URL, stop the ingester and then NATS."""
    with tempfile.TemporaryDirectory(prefix="mirror-bench-") as workdir:
        server = EmbeddedNats(Path(workdir) / "nats").start()
        try:
            ingester = IngesterProcess(server.url, Path(workdir) / "log.duckdb").start()
            try:
                yield server.url
            finally:
                ingester.stop()
        finally:
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
