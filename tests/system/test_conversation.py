"""A live conversation against real NATS, a real ingester process and the simulator over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from mirror.actors.conversation import Conversation
from mirror.actors.errors import Fenced, SettingConflict
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Belief, MemoryStep, Monologue, Narrative, Recall, ThinkerFailed, Turn
from mirror.projections.conversation import fold
from mirror.projections.state import initial_state
from mirror.replay.verify import verify_events
from tests.support.stack import conversation_runtime, nats_of


@pytest.fixture
def runtime(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    # Reflection off: these tests count the thinking and memory stages' events and calls
    # (tests/system/test_reflection.py drives reflection).
    with conversation_runtime(nats_server.url, tmp_path, shard="conv", latency="fixed:20", reflection=False) as settings:
        yield settings


async def log_events(settings: RuntimeSettings, key: StreamKey) -> list:
    bus = await JetStreamBus.connect(nats_of(settings).url)
    client = LogClient(bus.nc, shard=nats_of(settings).shard)
    assert await client.wait_committed((await bus.head(key)).fence, timeout=30)
    events = await client.read(key)
    await bus.close()
    return events


async def test_a_turn_is_acknowledged_then_thought_about(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "live")
    conversation = await Conversation(key, runtime).start()
    try:
        first = await conversation.turn(TurnRequest("I am allergic to peanuts."))
        assert first.reply and first.seq == 1 and first.narrative_seq is None
        assert await conversation.wait_idle(30)
        second = await conversation.turn(TurnRequest("Suggest a snack.", sync=True))
        assert second.narrative_seq == 3  # sync: the first turn was thought through first
        assert await conversation.wait_idle(30)
        state = conversation.state
    finally:
        await conversation.stop()
    events = await log_events(runtime, key)
    # The second turn recalled the first one's belief: its recall lands with it, just before.
    assert [type(e.payload) for e in events] == [Turn, Monologue, Narrative, Belief, MemoryStep,
                                                 Recall, Turn, Monologue, Narrative, Belief, MemoryStep]
    assert events[6].payload.narrative_seq == 3  # the second turn saw the first narrative
    assert fold(events) == state


async def test_a_restarted_conversation_continues_where_the_last_stopped(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "restart")
    first = await Conversation(key, runtime).start()
    await first.turn(TurnRequest("Remember: my name is Ada."))
    await first.wait_idle(30)
    before = first.state
    await first.stop()
    second = await Conversation(key, runtime).start()  # rebuilt from the log and the stream
    try:
        assert second.state == before
        reply = await second.turn(TurnRequest("What is my name?"))
        assert before.beliefs  # so the turn recalled first: recall, then turn, right after the old end
        assert (reply.recall_seq, reply.seq) == (before.last_seq + 1, before.last_seq + 2)
        await second.wait_idle(30)
    finally:
        await second.stop()


async def test_a_conversation_keeps_the_mode_its_first_turn_fixed_across_a_restart(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "moded")
    first = await Conversation(key, runtime).start()  # the stack's default mode is full
    await first.turn(TurnRequest("Hello there.", mode="controller_only"))
    await first.wait_idle(30)
    await first.stop()
    second = await Conversation(key, runtime).start()
    try:
        assert second.config.mode == "controller_only"  # rebuilt from the recorded turn, not the default
        with pytest.raises(SettingConflict, match="runs mode 'controller_only', not 'full'"):
            await second.turn(TurnRequest("Think fully now.", mode="full"))
        with pytest.raises(SettingConflict, match="runs memory True, not False"):
            await second.turn(TurnRequest("Forget it all.", memory=False))
        assert second.state.turn_count == 1  # the refused turn changed nothing
        await second.turn(TurnRequest("Carry on."))
        await second.wait_idle(30)
        assert second.state.mode == "controller_only"
    finally:
        await second.stop()
    events = await log_events(runtime, key)
    assert [e.payload.mode for e in events if isinstance(e.payload, Turn)] == ["controller_only"] * 2
    assert [e.payload.memory for e in events if isinstance(e.payload, Turn)] == [True] * 2
    assert not [e for e in events if isinstance(e.payload, Monologue)]  # controller_only runs no threads


async def test_a_conversation_can_turn_its_memory_off_and_keeps_it_off(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "forgetful")
    first = await Conversation(key, runtime).start()
    await first.turn(TurnRequest("I am allergic to peanuts.", memory=False))
    await first.wait_idle(30)
    await first.stop()
    second = await Conversation(key, runtime).start()
    try:
        assert second.config.memory is False  # rebuilt from the recorded turn, not the stack's setting
        reply = await second.turn(TurnRequest("What can I not eat?"))
        assert reply.recall_seq is None
        await second.wait_idle(30)
    finally:
        await second.stop()
    events = await log_events(runtime, key)
    assert [e.payload.memory for e in events if isinstance(e.payload, Turn)] == [False, False]
    assert not [e for e in events if isinstance(e.payload, Belief | MemoryStep | Recall)]  # nothing remembered
    assert [type(e.payload) for e in events if isinstance(e.payload, Narrative)]  # it still thought (mode full)


async def test_a_stack_without_memory_refuses_a_conversation_that_asks_for_it(
        runtime_without_memory: RuntimeSettings) -> None:
    conversation = await Conversation(StreamKey("acme", "asks-memory"), runtime_without_memory).start()
    try:
        with pytest.raises(SettingConflict, match="runs without memory"):
            await conversation.turn(TurnRequest("Remember this.", memory=True))
        assert conversation.state.turn_count == 0
    finally:
        await conversation.stop()


async def test_two_writers_on_one_conversation_never_fork_it(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "contested")
    one = await Conversation(key, runtime).start()
    two = await Conversation(key, runtime).start()
    try:
        await one.turn(TurnRequest("Hello from one"))
        await one.wait_idle(30)
        with pytest.raises(Fenced):
            await two.turn(TurnRequest("Hello from two"))  # its head is stale: fenced, nothing appended
        with pytest.raises(Fenced):
            await two.turn(TurnRequest("Again"))  # and it stays stopped
        await one.turn(TurnRequest("Still me"))
        await one.wait_idle(30)
    finally:
        await one.stop()
        await two.stop()
    events = await log_events(runtime, key)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert all(e.payload.user_message != "Hello from two" for e in events if isinstance(e.payload, Turn))


def sim_stats(settings: RuntimeSettings) -> dict:
    return httpx.get(settings.llm.base_url.removesuffix("/v1") + "/_sim/stats").json()


async def test_a_stated_fact_becomes_a_belief_a_restatement_reinforces_it_and_replay_calls_nothing(
    runtime: RuntimeSettings,
) -> None:
    key = StreamKey("acme", "remembers")
    conversation = await Conversation(key, runtime).start()
    try:
        await conversation.turn(TurnRequest("I have a severe peanut allergy.", sync=True))
        assert await conversation.wait_idle(30)
        first = conversation.state
        await conversation.turn(TurnRequest("I have a severe peanut allergy.", sync=True))
        assert await conversation.wait_idle(30)
        state = conversation.state
    finally:
        await conversation.stop()
    (belief,) = first.beliefs.values()
    assert belief.statement == "I have a severe peanut allergy." and belief.embedding
    assert list(state.beliefs) == [belief.belief_id]  # restated: the same belief, stronger
    assert state.beliefs[belief.belief_id].confidence > belief.confidence
    assert state.memory_turn == 1
    events = await log_events(runtime, key)
    assert fold(events) == state
    operations = [e.payload.operation for e in events if isinstance(e.payload, Belief)]
    assert operations == ["assert", "reinforce"]
    before = sim_stats(runtime)
    report = await verify_events(key, initial_state(key), events, default_prompt_set())
    after = sim_stats(runtime)
    assert report.ok, report.as_dict()
    assert report.steps == 7 and report.model_calls == 0  # the second turn's recall is a step and report.embedding_calls == 0
    assert (after["chat_calls"], after["embedding_calls"]) == (before["chat_calls"], before["embedding_calls"])


@pytest.fixture
def runtime_without_memory(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="conv", memory=False, reflection=False) as settings:
        yield settings


async def test_memory_can_be_turned_off(runtime_without_memory: RuntimeSettings) -> None:
    settings = runtime_without_memory
    key = StreamKey("acme", "forgets")
    conversation = await Conversation(key, settings).start()
    try:
        await conversation.turn(TurnRequest("I have a severe peanut allergy.", sync=True))
        assert await conversation.wait_idle(30)
    finally:
        await conversation.stop()
    events = await log_events(settings, key)
    assert [type(e.payload) for e in events] == [Turn, Monologue, Narrative]
    assert sim_stats(settings)["embedding_calls"] == 0


async def test_a_failed_memory_step_is_retried_without_thinking_again(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "retries")
    httpx.post(runtime.llm.base_url.removesuffix("/v1") + "/_sim/script",
               json={"faults": ["ok", "ok", "ok", "malformed"]}).raise_for_status()
    conversation = await Conversation(key, runtime).start()
    try:
        await conversation.turn(TurnRequest("My sister lives in Porto."))
        assert await conversation.wait_idle(30)
    finally:
        await conversation.stop()
    events = await log_events(runtime, key)
    assert [type(e.payload) for e in events] == [Turn, Monologue, Narrative, ThinkerFailed, Belief, MemoryStep]
    assert events[3].payload.stage == "memory"
    report = await verify_events(key, initial_state(key), events, default_prompt_set())
    assert report.ok and report.model_calls == 0 and report.embedding_calls == 0, report.as_dict()
