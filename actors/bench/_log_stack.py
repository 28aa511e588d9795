"""The smallest stack a log benchmark needs: NATS and an ingester process, nothing else.

``bench timetravel`` and ``bench recompute`` append through JetStream and read back through
the log's NATS API, as the gateway does, without a gateway or Ray actors in the way; the
ingester runs in its own process so its work is not charged to the benchmark's GIL.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from mirror.actors.stack.processes import IngesterProcess
from mirror.events.nats.server import EmbeddedNats


@contextmanager
def nats_and_ingester() -> Iterator[str]:
    """Start both in a temporary directory, yield the NATS URL, stop the ingester and then NATS."""
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
