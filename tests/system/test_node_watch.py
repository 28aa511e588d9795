"""The node watch against a real local Ray: the node table it reads, the node a conversation host
reports, a call in flight on a live node that is left alone, and a call on a node the table does
not hold alive that is ended. A node really declared dead (a machine cut off the network) is
tests/system/test_machines.py's ``test_a_turn_in_flight_to_a_machine_cut_off_is_answered_503``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.actors.placement.handles import Placement
from mirror.actors.results import TurnResult
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.nats.server import EmbeddedNats
from mirror.gateway.errors import HostLost
from mirror.gateway.node_watch import NodeOf, NodeWatch, ray_alive_nodes
from tests.support.stack import conversation_runtime

pytestmark = pytest.mark.timeout(300)

LATENCY_MS = 600
POLL_S = 0.05


@pytest.fixture
def runtime(nats_server: EmbeddedNats, tmp_path: Path, ray_cluster: None) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="watch", latency=f"fixed:{LATENCY_MS}",
                              mode="baseline", hosts=1) as settings:
        yield settings


def test_a_call_on_a_live_node_runs_to_its_end_and_one_on_a_node_not_alive_is_host_lost(runtime: RuntimeSettings) -> None:
    import ray

    here = ray.get_runtime_context().get_node_id()
    placement = Placement(runtime)
    conversation = placement.handle(StreamKey("watch", "slow"))

    async def scenario() -> None:
        assert here in await ray_alive_nodes()
        assert await conversation.node_id() == here  # asked of the host ...
        assert placement._nodes == {0: here}  # ... once: then known for the slot
        watch = NodeWatch(poll_s=POLL_S)
        node = NodeOf(conversation.node_id())
        await asyncio.sleep(0)
        async with watch.watching(node):  # a turn that waits on the model for many polls
            result = await conversation.turn(TurnRequest("a slow one"))
        assert isinstance(result, TurnResult) and result.seq >= 1
        assert watch.polls >= 3 and not watch.dead
        gone = NodeOf(ghost())
        await asyncio.sleep(0)
        with pytest.raises(HostLost) as lost:
            async with watch.watching(gone):
                await conversation.turn(TurnRequest("never answered here"))
        assert lost.value.started and lost.value.node == "f" * 56
        with pytest.raises(HostLost) as refused:  # known dead now: refused before it is sent
            async with watch.watching(gone):
                raise AssertionError("sent to a dead node")
        assert not refused.value.started

    asyncio.run(scenario())


async def ghost() -> str:
    """An id no node of the cluster has (Ray's node ids are 56 hex digits)."""
    return "f" * 56
