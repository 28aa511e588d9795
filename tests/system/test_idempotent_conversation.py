"""Idempotent turns at the conversation (the in-memory bus and log, the simulator over HTTP): a
request's idempotency key is recorded in its ``turn`` event, so a retry is answered by that turn
and appends nothing — also while the first is still running, and after the conversation was
passivated and rebuilt from the log; a key reused for another request is refused, and a key past
the window is a new turn.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator

import pytest

from mirror.actors.conversation import Conversation
from mirror.actors.errors import IdempotencyKeyReused
from mirror.actors.placement.local import LocalPlacement
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Turn
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.sim import SIM_MODEL
from tests.support.stack import REFLECTION


@pytest.fixture(scope="module")
def slow_sim() -> Iterator[SimLLMServer]:
    """A simulator slow enough (300 ms a call) that a duplicate arrives while the first turn runs."""
    with SimLLMServer(SimSettings(latency="fixed:300")) as server:
        yield server


def settings_of(sim: SimLLMServer, infrastructure: InMemoryInfrastructure, **settings: object) -> RuntimeSettings:
    runtime = RuntimeSettings(infrastructure, LLMSettings(base_url=sim.base_url, model=SIM_MODEL, max_retries=1,
                                                          backoff_initial_s=0.01),
                              reflection=REFLECTION, mode="baseline", memory=False)
    return dataclasses.replace(runtime, **settings)  # type: ignore[arg-type]  # RuntimeSettings fields


def placement_of(sim: SimLLMServer, infrastructure: InMemoryInfrastructure, **settings: object) -> LocalPlacement:
    return LocalPlacement(settings_of(sim, infrastructure, **settings))


async def turns_of(infrastructure: InMemoryInfrastructure, key: StreamKey) -> list[Turn]:
    return [event.payload for event in await infrastructure.event_log.read(key) if isinstance(event.payload, Turn)]


async def test_a_retry_is_answered_by_the_turn_its_key_names_and_appends_nothing(slow_sim: SimLLMServer) -> None:
    infrastructure = InMemoryInfrastructure()
    local = placement_of(slow_sim, infrastructure)
    key = StreamKey("acme", "retried")
    try:
        handle = local.handle(key)
        first = await handle.turn(TurnRequest("Where is the lighthouse?", idempotency_key="k-1"))
        again = await handle.turn(TurnRequest("Where is the lighthouse?", idempotency_key="k-1"))
        streamed = [item async for item in handle.turn_stream(TurnRequest("Where is the lighthouse?",
                                                                            idempotency_key="k-1"))]
        assert not first.replayed and again.replayed and streamed[-1].replayed  # type: ignore[union-attr]  # the last item is the result
        assert (again.seq, again.turn, again.reply) == (first.seq, first.turn, first.reply)
        assert "".join(piece for piece in streamed if isinstance(piece, str)) == first.reply
        with pytest.raises(IdempotencyKeyReused, match="'k-1' was used by the turn at seq 1.*another message"):
            await handle.turn(TurnRequest("Where is the harbour?", idempotency_key="k-1"))
        with pytest.raises(IdempotencyKeyReused, match="mode 'full', not 'baseline'"):
            await handle.turn(TurnRequest("Where is the lighthouse?", mode="full", idempotency_key="k-1"))
        later = await handle.turn(TurnRequest("And the harbour?", idempotency_key="k-2"))
        assert later.seq == first.seq + 1 and not later.replayed  # refusals appended nothing
        turns = await turns_of(infrastructure, key)
        assert [(turn.user_message, turn.idempotency_key) for turn in turns] == [
            ("Where is the lighthouse?", "k-1"), ("And the harbour?", "k-2")]
    finally:
        await local.close()


async def test_duplicates_that_arrive_together_run_one_turn(slow_sim: SimLLMServer) -> None:
    infrastructure = InMemoryInfrastructure()
    local = placement_of(slow_sim, infrastructure)
    key = StreamKey("acme", "together")
    try:
        handle = local.handle(key)
        await handle.summary()  # activated: the duplicates race for the turn, not the activation
        calls = slow_sim.stats()["chat_calls"]
        results = await asyncio.gather(*(handle.turn(TurnRequest("Tell me about the tides.", idempotency_key="same"))
                                         for _ in range(4)))
        assert len({(result.seq, result.reply) for result in results}) == 1
        assert sum(not result.replayed for result in results) == 1  # one ran; three were answered by it
        assert len(await turns_of(infrastructure, key)) == 1
        assert slow_sim.stats()["chat_calls"] == calls + 1  # one Talker call: the turn ran once
    finally:
        await local.close()


async def test_duplicates_reaching_the_conversation_at_once_wait_for_the_first(slow_sim: SimLLMServer) -> None:
    """No mailbox in front (a dedicated actor runs calls concurrently): the conversation itself waits."""
    infrastructure = InMemoryInfrastructure()
    key = StreamKey("acme", "bare")
    conversation = await Conversation(key, settings_of(slow_sim, infrastructure)).start()
    try:
        calls = slow_sim.stats()["chat_calls"]
        results = await asyncio.gather(*(conversation.turn(TurnRequest("Tell me about the tides.",
                                                                       idempotency_key="same")) for _ in range(3)))
        assert len({(result.seq, result.reply) for result in results}) == 1
        assert [result.replayed for result in results].count(False) == 1
        assert slow_sim.stats()["chat_calls"] == calls + 1 and len(await turns_of(infrastructure, key)) == 1
    finally:
        await conversation.stop()


async def test_a_key_outlives_the_conversations_incarnation_but_not_its_window(slow_sim: SimLLMServer) -> None:
    infrastructure = InMemoryInfrastructure()
    key = StreamKey("acme", "rebuilt")
    local = placement_of(slow_sim, infrastructure)
    try:
        first = await local.handle(key).turn(TurnRequest("Remember the blue boat.", idempotency_key="boat"))
        await local.handle(key).passivate()  # the next call rebuilds it from its snapshot and the log
        again = await local.handle(key).turn(TurnRequest("Remember the blue boat.", idempotency_key="boat"))
        assert again.replayed and (again.seq, again.reply) == (first.seq, first.reply)
        assert (await local.handle(key).rebuild_report()) is not None
    finally:
        await local.close()
    expired = placement_of(slow_sim, infrastructure, idempotency_window_s=0.0)  # every key is past its window
    try:
        late = await expired.handle(key).turn(TurnRequest("Remember the blue boat.", idempotency_key="boat"))
        assert not late.replayed and late.seq > first.seq
        assert [turn.idempotency_key for turn in await turns_of(infrastructure, key)] == ["boat", "boat"]
    finally:
        await expired.close()
