"""The gateway's node watch and what the runtime does with a lost machine, without a cluster.

The node table comes in through the watch's ``alive_nodes`` port (here a set the test edits; the
Ray-backed reader is tested against a real local Ray in tests/system/test_node_watch.py), the
conversations through the runtime's ``conversations`` port: handles whose ``turn`` waits until
released, each on a node the test names."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from pathlib import Path
from typing import Any

import pytest

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.gateway.error_table import answer
from mirror.gateway.errors import HostLost
from mirror.gateway.node_watch import NodeOf, NodeWatch
from mirror.gateway.runtime import GatewayRuntime
from mirror.gateway.settings import GatewaySettings

KEY = StreamKey("acme", "talk")
POLL_S = 0.02


class Cluster:
    """The node table the watch reads: which nodes are alive, and how often it was read."""

    def __init__(self, *alive: str) -> None:
        self.alive = set(alive)
        self.reads = 0

    async def alive_nodes(self) -> Collection[str]:
        self.reads += 1
        return set(self.alive)


class NodeHandle:
    """A conversation on ``node``: its turns wait for ``release`` (the model is slow), then answer."""

    def __init__(self, key: StreamKey, node: str, made: list[NodeHandle]) -> None:
        self.key = key
        self.node = node
        self.release = asyncio.Event()
        self.turns: list[str] = []
        self.forgotten = False
        made.append(self)

    async def node_id(self) -> str | None:
        return self.node

    async def turn(self, request: TurnRequest) -> dict[str, Any]:
        self.turns.append(request.message)
        await self.release.wait()
        return {"reply": f"from {self.node}"}

    def forget(self) -> None:
        self.forgotten = True


def runtime(tmp_path: Path, cluster: Cluster, nodes: list[str], made: list[NodeHandle]) -> GatewayRuntime:
    """A gateway whose n-th handle runs on ``nodes[n]`` (the last one for every later handle)."""
    settings = GatewaySettings(RuntimeSettings(NatsInfrastructure("nats://127.0.0.1:1"), None), str(tmp_path / "t.json"))  # type: ignore[arg-type]  # no LLM: nothing here calls one

    def conversations(key: StreamKey) -> Any:
        return NodeHandle(key, nodes[min(len(made), len(nodes) - 1)], made)

    async def broker_up() -> None:
        return None

    gateway = GatewayRuntime.build(settings, conversations, bus_ready=broker_up)
    gateway.node_watch = NodeWatch(cluster.alive_nodes, poll_s=POLL_S)
    return gateway


def turn(message: str) -> Any:
    return lambda conversation: conversation.turn(TurnRequest(message))


async def until(predicate: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.005)


def test_a_turn_in_flight_on_a_node_declared_dead_is_host_lost_and_its_host_forgotten(tmp_path: Path) -> None:
    cluster, made = Cluster("node-a"), list[NodeHandle]()

    async def scenario() -> None:
        gateway = runtime(tmp_path, cluster, ["node-a", "node-b"], made)
        asking = asyncio.create_task(gateway.ask(KEY, turn("hello")))
        await until(lambda: made and made[0].turns and cluster.reads >= 2)  # watched, and the node still alive
        assert not asking.done()
        cluster.alive.discard("node-a")
        with pytest.raises(HostLost) as lost:
            await asking
        assert lost.value.started and lost.value.node == "node-a"
        assert made[0].forgotten and len(made) == 1  # not sent again: a turn without a key may have run
        assert gateway.node_watch.in_flight() == 0
        status = answer(lost.value)
        assert (status.status, status.headers.get("Retry-After"), status.code) == (503, "2", "host_lost")

    asyncio.run(scenario())


def test_a_keyed_turn_in_flight_on_a_lost_node_is_sent_once_more_elsewhere(tmp_path: Path) -> None:
    cluster, made = Cluster("node-a", "node-b"), list[NodeHandle]()

    async def scenario() -> None:
        gateway = runtime(tmp_path, cluster, ["node-a", "node-b"], made)
        asking = asyncio.create_task(gateway.ask(KEY, turn("hello"), resend_safe=True))
        await until(lambda: made and made[0].turns and cluster.reads >= 1)
        cluster.alive.discard("node-a")
        await until(lambda: len(made) == 2 and made[1].turns == ["hello"])
        made[1].release.set()
        assert await asking == {"reply": "from node-b"}
        assert made[0].turns == ["hello"] and made[0].forgotten

    asyncio.run(scenario())


def test_resend_safety_is_asked_when_the_node_is_lost(tmp_path: Path) -> None:
    """A streamed turn is safe to send again only until its first piece: the runtime asks then."""
    cluster, made = Cluster("node-a", "node-b"), list[NodeHandle]()
    began = False

    async def scenario() -> None:
        nonlocal began
        gateway = runtime(tmp_path, cluster, ["node-a", "node-b"], made)
        asking = asyncio.create_task(gateway.ask(KEY, turn("hello"), resend_safe=lambda: not began))
        await until(lambda: made and made[0].turns)
        began = True  # the client has seen pieces of the reply
        cluster.alive.discard("node-a")
        with pytest.raises(HostLost):
            await asking
        assert len(made) == 1

    asyncio.run(scenario())


def test_a_call_to_a_node_known_dead_is_never_sent_there_and_goes_elsewhere(tmp_path: Path) -> None:
    cluster, made = Cluster("node-b"), list[NodeHandle]()

    async def scenario() -> None:
        gateway = runtime(tmp_path, cluster, ["node-a", "node-b"], made)
        assert await gateway.node_watch.is_dead(await known("node-a"))  # another call found it dead
        first = asyncio.create_task(gateway.ask(KEY, turn("hello")))  # no key: only a call never sent moves
        await until(lambda: made)
        await asyncio.sleep(0)
        # The first handle's node is not known when its first call starts (asked in the background):
        # that call is watched from the first poll on, and found on a dead node then.
        with pytest.raises(HostLost) as lost:
            await first
        assert lost.value.started
        second = asyncio.create_task(gateway.ask(KEY, turn("again")))
        await until(lambda: len(made) == 2 and made[1].turns)
        made[1].release.set()
        assert await second == {"reply": "from node-b"}
        # The handle of a known-dead node, cached by another key, is refused before sending:
        stale = NodeHandle(StreamKey("acme", "other"), "node-a", [])
        gateway._handles[stale.key] = stale  # type: ignore[assignment]  # a handle of this test's kind
        gateway._nodes[stale.key] = NodeOf(stale.node_id())
        await asyncio.sleep(0)
        third = asyncio.create_task(gateway.ask(stale.key, turn("never sent there")))
        await until(lambda: len(made) == 3 and made[2].turns)
        made[2].release.set()
        assert await third == {"reply": "from node-b"}
        assert stale.turns == [] and stale.forgotten

    asyncio.run(scenario())


async def made_node(node: str | None) -> str | None:
    return node


async def known(node: str | None) -> NodeOf:
    """A node already answered (its question's task has run)."""
    answered = NodeOf(made_node(node))
    await asyncio.sleep(0)
    return answered


def test_the_watch_reads_the_node_table_only_while_calls_are_in_flight() -> None:
    cluster = Cluster("node-a")

    async def scenario() -> None:
        watch = NodeWatch(cluster.alive_nodes, poll_s=POLL_S)
        node = await known("node-a")
        for _ in range(3):
            async with watch.watching(node):
                await until(lambda: cluster.reads >= 1)
        await until(lambda: watch._poller is None)
        reads = cluster.reads
        await asyncio.sleep(10 * POLL_S)  # idle: a read here would fail the next assertion
        assert cluster.reads == reads
        # A call whose node is not known yet (or never: this process) is not watched.
        async with watch.watching(await known(None)):
            await asyncio.sleep(3 * POLL_S)
        assert cluster.reads == reads

    asyncio.run(scenario())


def test_a_caller_cancelling_its_call_is_a_cancel_not_a_lost_host() -> None:
    cluster = Cluster("node-a")

    async def scenario() -> None:
        watch = NodeWatch(cluster.alive_nodes, poll_s=POLL_S)
        node = await known("node-a")

        async def call() -> None:
            async with watch.watching(node):
                await asyncio.Event().wait()

        task = asyncio.create_task(call())
        await until(lambda: watch.in_flight() == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert watch.in_flight() == 0

    asyncio.run(scenario())


def test_rays_own_error_for_a_call_on_a_dead_node_is_host_lost_too(tmp_path: Path) -> None:
    """Ray fails a call in flight to a host pinned to a node it declared dead (unschedulable: it
    cannot be restarted there) before the watch's next poll: the runtime asks the node table then,
    and answers HostLost rather than sending the turn to a new host as if it had never run."""
    from ray.exceptions import ActorUnschedulableError

    cluster, made = Cluster("node-a", "node-b"), list[NodeHandle]()

    async def scenario() -> None:
        gateway = runtime(tmp_path, cluster, ["node-a", "node-b"], made)
        gateway.node_watch.poll_s = 3600.0  # no poll comes first here

        async def turn_then_node_dies(conversation: Any) -> Any:
            conversation.turns.append("hello")
            await conversation.release.wait()
            raise ActorUnschedulableError("the node the actor was pinned to is dead")

        asking = asyncio.create_task(gateway.ask(KEY, turn_then_node_dies))
        await until(lambda: made and made[0].turns and made[0].node == "node-a")
        cluster.alive.discard("node-a")
        made[0].release.set()
        with pytest.raises(HostLost) as lost:
            await asking
        assert lost.value.started and made[0].forgotten and len(made) == 1
        assert "node-a" in gateway.node_watch.dead

    asyncio.run(scenario())
