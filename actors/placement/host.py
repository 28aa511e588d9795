"""The conversation host: one Ray actor running many conversations (:class:`HostedConversations`).

A host is a detached named actor (``conversation-host-<settings tag>-<i>`` in the ``mirror``
namespace), restarted by Ray after a crash (``max_restarts=-1``). When its node is gone, its next
caller makes it again on a live node (:func:`_node_of`): its conversations are then re-activated
from the log by their next message, exactly as a dedicated actor's would be. It asks Ray for no
CPU (its work is I/O and short folds; a node's hosts share its cores). Each method takes the
conversation's key first; :class:`~mirror.actors.placement.handles.HostedConversation` turns
that into the :class:`~mirror.actors.handle.ConversationHandle` every caller uses.
"""

from __future__ import annotations

import gc
import hashlib
import os
import resource
from collections.abc import AsyncIterator
from typing import Any

import ray

from mirror import metrics, tracing
from mirror.actors.conversation import RebuildReport
from mirror.actors.directory import NAMESPACE
from mirror.actors.log_file import append_warnings_to
from mirror.actors.metrics_targets import metrics_target
from mirror.actors.results import ConversationSummary, ReflectionResult, TurnResult
from mirror.actors.settings import RuntimeSettings
from mirror.actors.token_stream import StreamItem
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey

from .table import HostedConversations

HOST_PREFIX = "conversation-host-"
MAX_CALLS_IN_FLIGHT = 100_000
"""Calls one host runs at once (each an asyncio task; a turn waiting on the model costs nothing)."""


def settings_tag(settings: RuntimeSettings) -> str:
    """8 hex digits of the settings' hash: hosts started with other settings are other hosts.

    A host is detached and outlives the gateway that made it; without the tag a gateway
    restarted with a new model URL or shard map would find the old host by name and run its
    conversations with the old settings. With it, the old hosts get no more traffic (their
    conversations passivate when idle; the fence keeps the one writer per conversation)."""
    return hashlib.blake2b(repr(settings).encode(), digest_size=4).hexdigest()


def host_name(index: int, settings: RuntimeSettings) -> str:
    return f"{HOST_PREFIX}{settings_tag(settings)}-{index}"


@ray.remote(max_restarts=-1, max_task_retries=0, max_concurrency=MAX_CALLS_IN_FLIGHT, num_cpus=0)  # type: ignore[call-overload]  # Ray's typed overloads omit actor options such as max_concurrency
class ConversationHost:
    """Many virtual conversation actors in one Ray actor (see the module docstring)."""

    def __init__(self, index: int, settings: RuntimeSettings) -> None:
        gc.freeze()  # as ConversationActor: what is imported lives as long as the process
        append_warnings_to(settings.warnings_log)
        self.index = index
        self.table = HostedConversations(settings, name=host_name(index, settings))
        metrics.configure(enabled=settings.metrics)
        tracing.configure(settings.traces, "host")
        metrics.watch(self.table.metrics_figures)  # live, activated, the fair share's queues: read when scraped
        self.metrics_address = metrics.serve(ray.util.get_node_ip_address())

    async def metrics_target(self) -> dict[str, Any] | None:
        return metrics_target(self.metrics_address, "host", host_name(self.index, self.table.settings))

    async def turn(self, key: StreamKey, request: TurnRequest) -> TurnResult:
        return await self.table.turn(key, request)

    async def turn_stream(self, key: StreamKey, request: TurnRequest) -> AsyncIterator[StreamItem]:
        """A Ray streaming generator (``num_returns="streaming"``): the reply's pieces, then the TurnResult."""
        async for item in self.table.turn_stream(key, request):
            yield item

    async def choose(self, key: StreamKey, mind: MindChoice) -> ConversationSummary:
        return await self.table.choose(key, mind)

    async def reflect(self, key: StreamKey) -> ReflectionResult:
        return await self.table.reflect(key)

    async def summary(self, key: StreamKey) -> ConversationSummary:
        return await self.table.summary(key)

    async def wait_idle(self, key: StreamKey, timeout: float | None = None) -> bool:
        return await self.table.wait_idle(key, timeout)

    async def state_bytes(self, key: StreamKey) -> bytes:
        return await self.table.state_bytes(key)

    async def rebuild_report(self, key: StreamKey) -> RebuildReport | None:
        return await self.table.rebuild_report(key)

    async def pid(self, key: StreamKey | None = None) -> int:
        return os.getpid()

    async def node_id(self) -> str:
        """The node this host runs on (pinned there: see :func:`_node_of`)."""
        return str(ray.get_runtime_context().get_node_id())

    async def passivate(self, key: StreamKey) -> None:
        await self.table.passivate(key)

    async def stop(self, key: StreamKey) -> None:
        await self.table.passivate(key)

    async def live(self) -> list[StreamKey]:
        return self.table.live_keys()

    async def stats(self) -> dict[str, Any]:
        return {**self.table.figures(), "pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id(),
                "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "rss_mb": _rss_mb(), "cpu_s": round(_cpu_s(), 3)}

    async def shutdown(self) -> None:
        """Passivate everything (snapshots written) and leave; Ray does not restart it."""
        await self.table.close()
        ray.actor.exit_actor()


def _cpu_s() -> float:
    """CPU seconds (user + system) this host's process has used."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _rss_mb() -> float:
    """The process's resident memory now (Linux ``/proc``; the peak from ``getrusage`` elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return round(pages * os.sysconf("SC_PAGE_SIZE") / 2**20, 1)
    except OSError:
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def conversation_host(index: int, settings: RuntimeSettings) -> Any:
    """The host ``index``, created if there is none (detached, dealt round the cluster's nodes)."""
    return ConversationHost.options(  # type: ignore[attr-defined]  # ray.remote classes gain .options at runtime
        name=host_name(index, settings), namespace=NAMESPACE, get_if_exists=True, lifetime="detached",
        scheduling_strategy=_node_of(index),
    ).remote(index, settings)


def _node_of(index: int) -> Any:
    """Host ``index`` goes to the ``index mod n``-th alive node (by id), and only there.

    Why not Ray's ``SPREAD``: it is best effort, and with hosts that ask for no CPU it put all
    four of a two-node test cluster's hosts on one node. Why not soft affinity: Ray may then
    place a host elsewhere when its node is busy, and did (a loaded head's hosts all went to the
    worker). With hard affinity a host whose node is gone cannot be restarted: Ray declares it
    dead, the caller forgets it (:meth:`Placement.forget`) and the next call makes it again,
    dealt round the nodes alive then. Every gateway deals the same way."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = sorted(node["NodeID"] for node in ray.nodes() if node["Alive"])
    if not nodes:
        return "SPREAD"
    return NodeAffinitySchedulingStrategy(node_id=nodes[index % len(nodes)], soft=False)


__all__ = ["ConversationHost", "HOST_PREFIX", "MAX_CALLS_IN_FLIGHT", "conversation_host", "host_name", "settings_tag"]
