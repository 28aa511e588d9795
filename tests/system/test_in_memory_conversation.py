"""A whole conversation on the in-memory infrastructure: turns, thinking and memory, with no
nats-server, no DuckDB and no Ray — only the simulator, over loopback HTTP as always.

What it shows: the runtime reaches the bus and the log through their ports alone (the adapters
are chosen in one place, the settings' infrastructure), the log is the fold of the bus, and a
passivated conversation comes back from its snapshot by the same rebuild path.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mirror.actors.placement.local import LocalPlacement
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Belief, Monologue, Narrative, Recall, Turn
from mirror.projections.conversation import fold
from mirror.projections.snapshot import state_from_snapshot
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL
from tests.support.stack import REFLECTION

KEY = StreamKey("acme", "in-memory")


def _nats_servers() -> set[int]:
    """The pids of this process's nats-server children (Linux ``/proc``)."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # ended meanwhile
        name, _, rest = text.partition("(")[2].rpartition(")")
        if name == "nats-server" and int(rest.split()[1]) == os.getpid():
            children.add(int(stat.parent.name))
    return children


@pytest.fixture
async def placement(sim: SimLLMServer) -> AsyncIterator[tuple[LocalPlacement, InMemoryInfrastructure]]:
    infrastructure = InMemoryInfrastructure()
    settings = RuntimeSettings(infrastructure, LLMSettings(base_url=sim.base_url, model=SIM_MODEL, max_retries=1,
                                                           backoff_initial_s=0.01),
                               reflection=REFLECTION)
    local = LocalPlacement(settings)
    try:
        yield local, infrastructure
    finally:
        await local.close()


async def test_turns_thinking_and_memory_run_on_the_in_memory_bus_and_log(
    placement: tuple[LocalPlacement, InMemoryInfrastructure],
) -> None:
    local, infrastructure = placement
    servers_before = _nats_servers()  # the session's, if another test started one
    conversation = local.handle(KEY)
    first = await conversation.turn(TurnRequest("My name is Ada and I am allergic to peanuts."))
    assert first.seq == 1 and first.reply
    second = await conversation.turn(TurnRequest("Suggest a snack for me.", sync=True))
    assert second.recall_seq == second.seq - 1  # the first turn's belief was recalled for the second
    assert await conversation.wait_idle(timeout=30)
    assert _nats_servers() == servers_before  # none was started for this conversation

    events = await infrastructure.event_log.read(KEY)
    kinds = {type(event.payload) for event in events}
    assert {Turn, Monologue, Narrative, Belief, Recall} <= kinds  # the Talker, the Thinker and memory all ran
    assert [event.seq for event in events] == list(range(1, len(events) + 1))  # gapless
    live = state_from_snapshot(await conversation.state_bytes())
    assert fold(events) == live and live.narrative and live.beliefs
    assert await infrastructure.event_log.committed_offset() == infrastructure.bus.position  # caught up


async def test_a_passivated_conversation_comes_back_from_its_snapshot(
    placement: tuple[LocalPlacement, InMemoryInfrastructure],
) -> None:
    local, infrastructure = placement
    conversation = local.handle(KEY)
    await conversation.turn(TurnRequest("I live in Turin.", sync=True))
    assert await conversation.wait_idle(timeout=30)
    before = state_from_snapshot(await conversation.state_bytes())
    await conversation.passivate()

    again = local.handle(KEY)
    report = await again.rebuild_report()  # activates it: the rebuild starts from the snapshot
    assert report is not None and report.snapshot_seq == before.last_seq and report.log_tail_events == 0
    assert state_from_snapshot(await again.state_bytes()) == before
    reply = await again.turn(TurnRequest("Where do I live?"))
    assert reply.seq > before.last_seq
    stats = await infrastructure.event_log.stats()
    assert stats.snapshots_discarded == 0 and stats.events == len(await infrastructure.event_log.read(KEY))
