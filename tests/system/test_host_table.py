"""Many conversations in one event loop (``HostedConversations``), without Ray: real NATS, a real
ingester process and the simulator over HTTP.

What a host must keep of an actor per conversation: one activation per conversation however
many first messages race, a mailbox processed in order, a cap with the least recently used
passivated, a fenced-off conversation dropped (and rebuilt by its next message) without
touching its neighbours, and a slow model call that holds up nobody else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from mirror.actors.conversation import Conversation
from mirror.actors.errors import Fenced
from mirror.actors.placement.table import HostedConversations
from mirror.actors.results import TurnResult
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.errors import LLMError
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.nats.server import EmbeddedNats
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.stack import conversation_runtime

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def runtime(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="table", latency="fixed:5",
                              mode="controller_only") as settings:
        yield settings


async def test_racing_first_messages_activate_once_and_queue_in_order(runtime: RuntimeSettings) -> None:
    table = HostedConversations(runtime)
    key = StreamKey("acme", "race")
    try:
        def turn(n: int) -> Callable[[Conversation], Awaitable[TurnResult]]:
            return lambda conversation: conversation.turn(TurnRequest(f"message {n}"))

        replies = await asyncio.gather(*(table.call(key, turn(n)) for n in range(8)))
        assert table.stats.activations == 1
        # One mailbox in arrival order: turn numbers follow the order the calls were made in.
        assert [reply.turn for reply in replies] == list(range(8))
        assert [reply.seq for reply in replies] == sorted(reply.seq for reply in replies)
    finally:
        await table.close()


async def test_conversations_activated_at_once_share_one_set_of_clients(runtime: RuntimeSettings) -> None:
    """The clients (and so the fair share of the model's slots) are opened once per host, however
    many first messages race: a set per racer was as many fair shares, each with every slot."""
    table = HostedConversations(runtime)
    keys = [StreamKey("acme", f"burst{index}") for index in range(12)]
    try:
        await asyncio.gather(*(table.call(key, lambda c: c.turn(TurnRequest("first"))) for key in keys))
        shares = {id(await table.call(key, lambda c: asyncio.sleep(0, c.llm.share))) for key in keys}
        assert len(shares) == 1
        figures = table.figures()["model_slots"]
        assert figures["slots"] == runtime.llm.max_concurrency
        assert figures["tenants"]["acme"]["admitted"] >= len(keys)  # every Talker call went through the one share
    finally:
        await table.close()


async def test_the_cap_passivates_the_least_recently_used_and_they_come_back_with_state(runtime: RuntimeSettings) -> None:
    table = HostedConversations(runtime, max_live=3)
    keys = [StreamKey("acme", f"cap{index}") for index in range(6)]
    try:
        for key in keys:
            await table.call(key, lambda c: c.turn(TurnRequest("first", sync=True)))
        # Each eviction was begun by the activation that crowded it out; wait for their tasks.
        await asyncio.gather(*table._passivating.values())
        assert table.live_keys() == keys[3:]
        assert table.stats.evictions == 3 and table.stats.passivations == 3
        again = await table.call(keys[0], lambda c: c.turn(TurnRequest("second", sync=True)))
        assert again.turn == 1  # re-activated from its snapshot with its first turn
        rebuilt = await table.call(keys[0], lambda c: asyncio.sleep(0, c.rebuilt))
        assert rebuilt is not None and rebuilt.snapshot_seq is not None and rebuilt.log_tail_events == 0
    finally:
        await table.close()
    assert table.live_keys() == []


async def test_first_messages_racing_past_the_cap_are_all_answered(runtime: RuntimeSettings) -> None:
    """An activation can be crowded out before its caller resumes (`mirror bench actors` at a
    small cap found it: KeyError on the turn path); the call then activates it again."""
    table = HostedConversations(runtime, max_live=1)
    keys = [StreamKey("acme", f"crowd{index}") for index in range(8)]
    try:
        replies = await asyncio.gather(*(table.call(key, lambda c: c.turn(TurnRequest("first"))) for key in keys))
        assert [reply.turn for reply in replies] == [0] * len(keys)
        assert len(table.live_keys()) == 1
    finally:
        await table.close()


async def test_a_fenced_conversation_is_dropped_and_rebuilt_while_its_neighbour_answers(runtime: RuntimeSettings) -> None:
    table = HostedConversations(runtime)
    victim, neighbour = StreamKey("acme", "fenced"), StreamKey("acme", "neighbour")
    try:
        await table.call(victim, lambda c: c.turn(TurnRequest("hello", sync=True)))
        await table.call(neighbour, lambda c: c.turn(TurnRequest("hello", sync=True)))
        # The victim's own thinking (monologue, narrative, memory step) appends after its turn;
        # once it is done, the victim has nothing left to write, so the intruder is the only
        # other writer and the one the victim's next turn is fenced by (not the other way round).
        assert await table.call(victim, lambda c: c.wait_idle(60))
        intruder = await Conversation(victim, runtime).start()  # a second writer moves the stream on
        await intruder.turn(TurnRequest("I was here first", sync=True))
        assert await intruder.wait_idle(30)
        await intruder.stop()
        with pytest.raises(Fenced):
            await table.call(victim, lambda c: c.turn(TurnRequest("stale")))
        assert victim not in table.live_keys() and neighbour in table.live_keys()
        assert (await table.call(neighbour, lambda c: c.turn(TurnRequest("still here")))).turn == 1
        rebuilt = await table.call(victim, lambda c: c.turn(TurnRequest("again")))
        assert rebuilt.turn == 2  # rebuilt from the log: its own turn and the intruder's before it
    finally:
        await table.close()


@pytest.fixture
def slow_runtime(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[tuple[RuntimeSettings, SimLLMServer]]:
    """A runtime whose simulator can be told to hang a call (4 s, then a 504)."""
    with SimLLMServer(SimSettings(latency="fixed:5", timeout_hang_s=4.0)) as sim, \
            conversation_runtime(nats_server.url, tmp_path, shard="slow", mode="baseline", memory=False,
                                 reflection=False) as base:  # the Talker's calls alone: the script's fault is the slow turn's
        yield replace(base, llm=replace(base.llm, base_url=sim.base_url, max_retries=0, timeout_s=10.0)), sim


async def until_the_model_holds_a_call(sim: SimLLMServer, timeout: float = 60) -> None:
    """Until the scripted ``timeout`` fault is taken and its call is held (in flight)."""
    deadline = time.monotonic() + timeout
    while True:
        stats = await asyncio.to_thread(sim.stats)
        if not stats["script"] and stats["faults"].get("timeout") == 1 and stats["in_flight"] == 1:
            return
        assert time.monotonic() < deadline, f"the slow call never reached the model: {stats}"
        await asyncio.sleep(0.01)


async def test_a_slow_model_call_holds_up_no_other_conversation(slow_runtime: tuple[RuntimeSettings, SimLLMServer]) -> None:
    runtime, sim = slow_runtime
    table = HostedConversations(runtime)
    slow, quick = StreamKey("acme", "slow"), StreamKey("acme", "quick")
    try:
        await table.call(quick, lambda c: c.turn(TurnRequest("warm up")))
        await asyncio.to_thread(sim.script, "timeout")  # the next chat call hangs 4 s, then fails
        slow_turn = asyncio.create_task(table.call(slow, lambda c: c.turn(TurnRequest("take your time"))))
        await until_the_model_holds_a_call(sim)  # the slow call is waiting on the model now
        started = time.perf_counter()
        reply = await table.call(quick, lambda c: c.turn(TurnRequest("are you there?")))
        took = time.perf_counter() - started
        assert reply.turn == 1 and not slow_turn.done()
        assert took < 2.0, f"a neighbour's turn took {took:.2f} s behind a slow model call"
        with pytest.raises(LLMError):  # the hung call ends in the client's typed error (a 504, no retry)
            await slow_turn
    finally:
        await table.close()
