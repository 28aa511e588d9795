"""A persona conversation against real NATS, a real ingester and the simulator over HTTP: the
cycle's events land in order, the background steps follow the reply, a restart keeps the
character, another mind later is refused, and ``replay verify`` re-runs it all with zero calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from mirror.actors.conversation import Conversation
from mirror.actors.errors import SettingConflict
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.persona import EXAMPLES, read_persona
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import (
    Appraisal,
    EmotionUpdate,
    Episode,
    GoalUpdate,
    Greeting,
    Interpretation,
    PersonaChosen,
    Plan,
    RelationshipUpdate,
    Retrieval,
    Turn,
)
from mirror.projections.conversation import fold
from mirror.projections.state import initial_state
from mirror.replay.verify import verify_events
from tests.support.stack import conversation_runtime
from tests.system.test_conversation import log_events

PATH_TYPES = [Interpretation, Retrieval, Appraisal, Plan, Turn]
BACKGROUND_TYPES = [EmotionUpdate, RelationshipUpdate, GoalUpdate, Episode]


@pytest.fixture
def runtime(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="persona", latency="fixed:5", reflection=False) as settings:
        yield settings


def wren() -> MindChoice:
    return MindChoice("persona", read_persona(EXAMPLES / "wren.json"))


async def test_a_persona_turn_records_every_step_then_the_background_updates(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "wren-1")
    conversation = await Conversation(key, runtime).start()
    try:
        first = await conversation.turn(TurnRequest("Hello, who are you?", mind=wren()))
        assert first.reply and first.steps_ms is not None
        assert set(first.steps_ms) == {"think", "retrieval", "appraisal", "plan", "formulation"}
        assert await conversation.wait_idle(30)
        await conversation.turn(TurnRequest("Tell me about the lighthouse."))
        assert await conversation.wait_idle(30)
        state = conversation.state
    finally:
        await conversation.stop()
    assert state.persona is not None and state.persona.name == "Wren Halloway"
    assert state.persona.emotion_turn == state.persona.goal_turn == state.persona.episode_turn == 1
    assert [episode.turn for episode in state.persona.episodes] == [0, 1]
    assert all(0.0 <= value <= 1.0 for value in state.persona.emotions.values())
    events = await log_events(runtime, key)
    types = [type(event.payload) for event in events]
    assert types == [PersonaChosen, Greeting, *PATH_TYPES, *BACKGROUND_TYPES, *PATH_TYPES, *BACKGROUND_TYPES]
    assert state.greeting is not None and state.greeting.startswith("*Wren looks up")
    assert fold(events) == state
    report = await verify_events(key, initial_state(key), events, default_prompt_set())
    assert report.ok, report.divergences
    assert report.model_calls == 0 and report.embedding_calls == 0


async def test_a_restarted_persona_stays_the_character_and_refuses_another_mind(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "wren-2")
    conversation = await Conversation(key, runtime).start()
    try:
        await conversation.turn(TurnRequest("Good evening.", mind=wren()))
        assert await conversation.wait_idle(30)
    finally:
        await conversation.stop()
    again = await Conversation(key, runtime).start()
    try:
        assert again.state.persona is not None and again.state.persona.name == "Wren Halloway"
        seq = again.state.last_seq
        with pytest.raises(SettingConflict, match="mind"):
            await again.turn(TurnRequest("Be yourself.", mind=MindChoice("mirror")))
        odile = read_persona(EXAMPLES / "odile.png")
        with pytest.raises(SettingConflict, match="persona"):
            await again.turn(TurnRequest("Be Odile.", mind=MindChoice("persona", odile)))
        assert again.state.last_seq == seq  # refused: nothing appended
        reply = await again.turn(TurnRequest("Still there?"))
        assert reply.steps_ms is not None
    finally:
        await again.stop()


async def test_a_mirror_conversation_refuses_to_become_a_persona(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "plain")
    conversation = await Conversation(key, runtime).start()
    try:
        await conversation.turn(TurnRequest("Hello."))
        with pytest.raises(SettingConflict, match="mind"):
            await conversation.turn(TurnRequest("Now be Wren.", mind=wren()))
    finally:
        await conversation.stop()
