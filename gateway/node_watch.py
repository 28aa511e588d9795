"""Calls in flight to a machine that Ray has declared dead end within a poll: :class:`NodeWatch`.

Why: a call to a conversation's host on a machine that was cut off the network waits on a
connection that neither answers nor breaks. Ray's control store declares the silent node dead
after its health checks (~16 s as docs/operations.md sets them), but nothing ends the call's wait
then: the gateway's ``actor_timeout_s`` (300 s) would. The watch knows which node each call's
process runs on (:meth:`~mirror.actors.handle.ConversationHandle.node_id`, asked once per handle
in the background, see :class:`NodeOf`) and, while calls are in flight, reads the control store's
node table once per ``poll_s``; a call on a node that is no longer alive is cancelled and raises
:class:`~mirror.gateway.errors.HostLost` (``started=True``: it may have run; the runtime decides
whether it may be sent again). A node once seen dead stays dead (Ray gives a node that rejoins a
new id), so a later call to a handle still pointing there fails before it is sent
(``started=False``: sending it elsewhere is always safe).

Cost on a call's path: a set insert and removal, nothing over the network. The poll runs only
while calls are in flight, once per period however many they are, and asks the node table on a
worker thread (it is a blocking call to the control store).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection
from types import TracebackType

from mirror.gateway.errors import HostLost

log = logging.getLogger(__name__)

__all__ = ["AliveNodes", "NodeOf", "NodeWatch", "POLL_S", "ray_alive_nodes"]

POLL_S = 1.0
"""How often the node table is read while calls are in flight: the watch's part of the delay."""
DEAD_REMEMBERED = 1024
"""Dead nodes remembered (the oldest forgotten first): a handle outlives its node by one call at most."""

AliveNodes = Callable[[], Awaitable[Collection[str]]]
"""``await alive_nodes()``: the ids of the nodes the control store holds alive now."""


async def ray_alive_nodes() -> Collection[str]:
    """The alive nodes of the Ray cluster this process is connected to (``ray.nodes()``)."""
    import ray  # ray costs ~0.5 s to import: see routes/recompute.py

    nodes = await asyncio.to_thread(ray.nodes)
    return {node["NodeID"] for node in nodes if node["Alive"]}


class NodeOf:
    """The node a handle's process runs on, asked once in the background: a call never waits for it.

    ``id`` is ``None`` until the answer comes, and for good when the process runs in this one
    (the local placement) or the question failed: such a call is not watched, and is bounded by
    the gateway's ``actor_timeout_s`` as before."""

    __slots__ = ("_task",)

    def __init__(self, ask: Awaitable[str | None]) -> None:
        self._task: asyncio.Future[str | None] = asyncio.ensure_future(ask)
        self._task.add_done_callback(_consume)

    @property
    def id(self) -> str | None:
        task = self._task
        if not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result()


def _consume(task: asyncio.Future[str | None]) -> None:
    """A failed question is an unwatched call, not an error to log at garbage collection."""
    if not task.cancelled() and task.exception() is not None:
        log.debug("the node of a conversation's process is unknown: %r", task.exception())


class _Watched:
    """One call on one node (the context manager :meth:`NodeWatch.watching` returns)."""

    __slots__ = ("_cancelling", "_task", "lost", "node", "watch")

    def __init__(self, watch: NodeWatch, node: NodeOf) -> None:
        self.watch = watch
        self.node = node
        self.lost: str | None = None
        """The node's id once the watch found it dead and cancelled the call."""
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0

    async def __aenter__(self) -> _Watched:
        node = self.node.id
        if node is not None and node in self.watch.dead:
            raise HostLost(node, started=False)
        task = asyncio.current_task()
        assert task is not None, "a call is watched from inside a task"
        self._task, self._cancelling = task, task.cancelling()
        self.watch.enter(self)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.watch.leave(self)
        if self.lost is None or self._task is None:
            return
        if exc_type is asyncio.CancelledError and self._task.uncancel() <= self._cancelling:
            raise HostLost(self.lost, started=True) from None  # our cancel, not the caller's

    def cancel(self, node: str) -> None:
        if self.lost is None and self._task is not None:
            self.lost = node
            self._task.cancel(f"node {node} is dead")


class NodeWatch:
    """The gateway's watch over the nodes its calls run on (see the module docstring)."""

    def __init__(self, alive_nodes: AliveNodes = ray_alive_nodes, *, poll_s: float = POLL_S) -> None:
        self.alive_nodes = alive_nodes
        self.poll_s = poll_s
        self._calls: set[_Watched] = set()
        self._dead: OrderedDict[str, None] = OrderedDict()
        self._poller: asyncio.Task[None] | None = None
        self.polls = 0
        """Node table reads so far (the test of "no poll while idle" counts them)."""

    @property
    def dead(self) -> Collection[str]:
        """The nodes seen dead (the newest :data:`DEAD_REMEMBERED`)."""
        return self._dead.keys()

    def in_flight(self) -> int:
        return len(self._calls)

    def watching(self, node: NodeOf) -> _Watched:
        """``async with watch.watching(node): await call``: the call raises
        :class:`~mirror.gateway.errors.HostLost` within a poll of its node being declared dead,
        and at once when it is known dead already (then it is never sent)."""
        return _Watched(self, node)

    async def is_dead(self, node: NodeOf) -> bool:
        """Whether ``node`` is dead now, asked of the control store at once (a failed call's check:
        Ray's own error for a call whose node died may come before the next poll)."""
        if node.id is None:
            return False
        if node.id not in self._dead:
            await self._read(node.id)
        return node.id in self._dead

    def enter(self, call: _Watched) -> None:
        self._calls.add(call)
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll(), name="node-watch")

    def leave(self, call: _Watched) -> None:
        self._calls.discard(call)

    async def _poll(self) -> None:
        try:
            while self._calls:
                await asyncio.sleep(self.poll_s)
                watched = {node for call in self._calls if (node := call.node.id) is not None}
                if watched:
                    await self._read(*watched)
                for call in list(self._calls):
                    node = call.node.id
                    if node is not None and node in self._dead:
                        call.cancel(node)
        finally:
            self._poller = None

    async def _read(self, *nodes: str) -> None:
        """Read the node table once; every one of ``nodes`` not alive in it is dead from now on."""
        self.polls += 1
        try:
            alive = await self.alive_nodes()
        except Exception as exc:  # the control store unreachable: no node is declared dead meanwhile
            log.warning("could not read the cluster's node table (%r); calls in flight wait on", exc)
            return
        for node in nodes:
            if node not in alive and node not in self._dead:
                log.warning("node %s is dead: the calls in flight to it are answered now", node)
                self._dead[node] = None
                while len(self._dead) > DEAD_REMEMBERED:
                    self._dead.popitem(last=False)
