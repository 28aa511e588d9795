"""The ingester as a Ray actor: one per shard, owning its DuckDB file and serving the log's reads.

It runs the same loop as ``mirror ingest`` (:func:`mirror.events.duckdb.ingester.run_ingester`: pull,
commit batch + offset in one transaction, ack; the read API on ``_MIRROR.log.<shard>.<op>``)
inside the actor's event loop, so readers keep using ``LogClient`` over NATS and cannot tell the
two apart. Ray restarts it after a crash (``max_restarts=-1``); the new incarnation resumes
from the offset committed in DuckDB, which makes a crash cost nothing but the restart.

Invariants:

- One writer per file. The actor is named ``ingester-<shard>`` in the ``mirror`` namespace, so
  a second one for the same shard cannot be created, and it is pinned to the node whose disk
  holds the file (a restart elsewhere would open an empty log).
- The DuckDB lock is the dead process's: a worker killed with SIGKILL holds no lock once the
  kernel has reaped it, and Ray restarts an actor only after its worker died. Should the new
  incarnation still meet the lock (an old worker in its last moments), it waits for it,
  bounded by ``lock_wait_s``, instead of failing.
- The actor belongs to the driver that created it (the ``mirror up`` process), not detached:
  the embedded stack's Ray head lives exactly as long as that process, and ``stop()`` drains
  and closes the file before the stack shuts Ray down.

Without Ray (a deployment that runs ``mirror ingest`` under its own supervisor) nothing here
is imported.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from mirror import metrics, tracing
from mirror.actors.conversation_actor import NAMESPACE
from mirror.actors.metrics_targets import metrics_target
from mirror.events.duckdb.ingester import IngesterSettings, run_ingester
from mirror.events.errors import LogLocked

from .errors import IngesterUnavailable

log = logging.getLogger(__name__)

RETRY_INITIAL_S = 0.2
RETRY_MAX_S = 5.0


def ingester_actor_name(shard: str) -> str:
    return f"ingester-{shard}"


@ray.remote(max_restarts=-1, max_task_retries=0)
class IngesterActor:
    """Runs ``run_ingester`` until ``stop()``; started again by Ray whenever its worker dies."""

    async def __init__(  # type: ignore[misc]  # Ray runs an async constructor in the actor's loop
        self, nats_url: str, db_path: str, settings: IngesterSettings, log_path: str | None = None,
        lock_wait_s: float = 30.0,
    ) -> None:
        if log_path:
            _log_to_file(log_path)
        self.nats_url = nats_url
        self.db_path = db_path
        self.settings = settings
        self.lock_wait_s = lock_wait_s
        self.last_error: BaseException | None = None
        self._stop = asyncio.Event()
        self._started = asyncio.Event()
        # Not awaited: the constructor must not fail because NATS or the file is not ready yet;
        # the supervisor keeps trying and ready() reports why it is not serving.
        self._supervisor = asyncio.create_task(self._supervise(), name=f"ingester-{settings.shard}")
        metrics.configure(enabled=settings.metrics)
        tracing.configure(settings.traces, "ingester")
        self.metrics_address = metrics.serve(ray.util.get_node_ip_address())
        log.info("%s runs in Ray worker pid %d", ingester_actor_name(settings.shard), os.getpid())

    async def _supervise(self) -> None:
        """Run the ingester; after a failure, log it and run it again with a growing pause."""
        pause = RETRY_INITIAL_S
        locked_since: float | None = None
        while not self._stop.is_set():
            try:
                await run_ingester(self.nats_url, self.db_path, self.settings, stop=self._stop, started=self._started)
                return
            except LogLocked as exc:
                self.last_error = exc
                locked_since = locked_since or time.monotonic()
                waited = time.monotonic() - locked_since
                if waited < self.lock_wait_s:  # the previous owner is on its way out: look again soon
                    log.info("the event log is still locked (a previous ingester exiting?); waiting")
                    pause = RETRY_INITIAL_S
                else:
                    log.error("%s (waited %.0f s)", exc, waited)
            except Exception as exc:  # the supervisor must outlive any one failure
                self.last_error = exc
                log.exception("ingester %s failed; starting it again in %.1f s", self.settings.shard, pause)
            self._started.clear()
            try:
                await asyncio.wait_for(self._stop.wait(), pause)
            except TimeoutError:
                pass
            pause = min(pause * 2, RETRY_MAX_S)

    async def ready(self, timeout: float = 60.0) -> int:
        """Wait until it consumes and serves reads; returns the worker's pid."""
        try:
            await asyncio.wait_for(self._started.wait(), timeout)
        except TimeoutError:
            raise IngesterUnavailable(self.settings.shard, self.db_path, repr(self.last_error)) from None
        return os.getpid()

    async def pid(self) -> int:
        return os.getpid()

    async def metrics_target(self) -> dict[str, Any] | None:
        return metrics_target(self.metrics_address, "ingester", ingester_actor_name(self.settings.shard))

    async def stop(self) -> None:
        """Stop fetching, commit what was fetched, close the file (its lock is released here)."""
        self._stop.set()
        await self._supervisor


def _log_to_file(path: str) -> None:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("mirror")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


class RayIngester:
    """The driver's handle on one shard's ingester actor: start it, wait until it serves, stop it.

    Same surface as :class:`mirror.stack.processes.IngesterProcess`, which runs the ingester as
    a plain child process where there is no Ray.
    """

    def __init__(
        self, nats_url: str, db_path: str | Path, *, shard: str = "0", log_path: str | Path | None = None,
        settings: IngesterSettings | None = None,
    ) -> None:
        self.nats_url = nats_url
        self.db_path = Path(db_path).resolve()
        self.settings = settings or IngesterSettings(shard=shard)
        self.log_path = Path(log_path).resolve() if log_path else None
        self.actor: Any = None

    @property
    def name(self) -> str:
        return ingester_actor_name(self.settings.shard)

    def start(self, timeout: float = 60.0) -> RayIngester:
        here = ray.get_runtime_context().get_node_id()
        self.actor = IngesterActor.options(  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime; mypy keeps a decorated class's own type
            name=self.name, namespace=NAMESPACE,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
        ).remote(self.nats_url, str(self.db_path), self.settings, str(self.log_path) if self.log_path else None)
        try:
            ray.get(self.actor.ready.remote(timeout))
        except BaseException:
            self.kill()
            raise
        return self

    @property
    def pid(self) -> int:
        return int(ray.get(self.actor.pid.remote()))

    def stop(self, timeout: float | None = None) -> None:
        """Drain and close the file, then end the actor for good (no restart)."""
        if self.actor is None:
            return
        try:
            ray.get(self.actor.stop.remote(), timeout=timeout or self.settings.stop_timeout_s + 10)
        except (ray.exceptions.RayError, TimeoutError) as exc:
            log.warning("ingester %s did not stop cleanly (%r); its worker is killed", self.name, exc)
        self.kill()

    def kill(self) -> None:
        if self.actor is not None:
            ray.kill(self.actor, no_restart=True)
            self.actor = None


__all__ = ["IngesterActor", "RETRY_INITIAL_S", "RETRY_MAX_S", "RayIngester", "ingester_actor_name"]
