"""The turn is written once (:mod:`mirror.cognition.turn`): the live writer, ``replay verify`` and
recompute all run the same code, so a change to it is seen by verify without a line of
``replay/`` changing; a :class:`TurnRequest` is one checked value.

The change is made the way a developer makes one — the turn module's code is different — by
swapping the Talker the turn module calls for one that words replies otherwise; nothing in
``replay/`` is touched, and verify reports the divergence at each turn.
"""

from __future__ import annotations

import dataclasses

import pytest

import mirror.cognition.turn as turn_code
from mirror.cognition.persona.choice import InvalidMindChoice, MindChoice
from mirror.cognition.pipeline import MODES, MirrorConfig, Talk
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.stages import STAGE, STAGES, StageContext, stages_behind
from mirror.cognition.turn import InvalidTurnRequest, TurnRequest, no_recall
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import Head
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Turn
from mirror.projections.state import initial_state
from mirror.replay import verify_conversations
from tests.unit.test_verify_log import MESSAGES, TENANT, ScriptedModel, converse


async def test_a_change_to_the_turn_code_is_seen_by_verify_and_by_the_live_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    infrastructure = InMemoryInfrastructure()
    key = StreamKey(TENANT, "once")
    model = ScriptedModel()
    log = await converse(infrastructure, key, model)
    (clean,) = await verify_conversations(log, TENANT, "once", prompts=default_prompt_set())
    assert clean.ok and clean.model_calls == 0 and clean.steps > len(MESSAGES)

    original = turn_code.talk

    async def louder(*args: object, **kwargs: object) -> Talk:  # the turn's code, changed
        said = await original(*args, **kwargs)  # type: ignore[arg-type]  # the same arguments, passed on
        turn = dataclasses.replace(said.turn, reply=said.reply + "!")
        return Talk(turn.reply, turn, said.provenance)

    monkeypatch.setattr(turn_code, "talk", louder)
    (changed,) = await verify_conversations(log, TENANT, "once", prompts=default_prompt_set())
    turns = [event.seq for event in await log.read(key) if isinstance(event.payload, Turn)]
    assert not changed.ok and changed.model_calls == 0
    assert sorted({divergence.seq for divergence in changed.divergences}) == turns
    assert all("reply" in divergence.reason for divergence in changed.divergences)

    # the live turn runs the same code: a new conversation's reply comes out changed too
    other = await converse(infrastructure, StreamKey(TENANT, "after"), model)
    replies = [event.payload.reply for event in await other.read(StreamKey(TENANT, "after"))
               if isinstance(event.payload, Turn)]
    assert replies and all(reply.endswith("!") for reply in replies)


def test_a_turn_request_is_one_checked_value() -> None:
    request = TurnRequest("hello", mode="full", memory=False, mind=MindChoice("mirror"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.message = "other"  # type: ignore[misc]  # frozen: that is the point
    assert request.streamed().stream and not request.stream and request.streamed().message == "hello"
    with pytest.raises(InvalidTurnRequest, match="unknown mode 'fast'"):
        TurnRequest("hello", mode="fast")
    with pytest.raises(InvalidTurnRequest, match="text, not int"):
        TurnRequest(3)  # type: ignore[arg-type]  # what a careless caller passes
    with pytest.raises(InvalidMindChoice):
        TurnRequest("hello", mind=MindChoice("persona"))
    assert all(TurnRequest("x", mode=mode).mode == mode for mode in MODES)


async def test_the_stages_are_one_table_the_loop_and_the_status_read() -> None:
    """A state with a turn: which stages are behind follows the configuration, in table order."""
    names = [stage.name for stage in STAGES]
    assert names == ["emotion", "relationship", "goal", "importance", "thinking", "memory", "insight", "reflection"]
    assert set(STAGE) == set(names)
    model = ScriptedModel()
    state = initial_state(StreamKey(TENANT, "table"))
    infrastructure = InMemoryInfrastructure()
    connections = await infrastructure.connect(name="test")
    writer = ConversationWriter(connections.bus, state.key, state, Head(0, 0))
    config = MirrorConfig(model="scripted", memory=False, reflection=True)
    await writer.take_turn("I like rivers.", llm=model, prompts=default_prompt_set(), config=config, recaller=no_recall)
    context = StageContext(model, default_prompt_set(), config)
    assert stages_behind(writer.state, context) == ["thinking", "insight"]
    assert stages_behind(writer.state, dataclasses.replace(context, config=dataclasses.replace(
        config, mode="baseline", reflection=False))) == []


async def test_a_turn_the_thinker_overtook_verifies_from_the_state_its_talker_was_asked_from() -> None:
    """Live, the Talker and the Thinker write concurrently: turn 2's Talker is asked from the state
    after turn 1, the Thinker's monologue and narrative for turn 1 land while it waits for the
    model, and turn 2 is appended after them. Verify makes turn 2 from the state its request was
    asked from (the reply's narrative_seq is the one it saw: none), with zero model calls."""
    infrastructure = InMemoryInfrastructure()
    key = StreamKey(TENANT, "overtaken")
    connections = await infrastructure.connect(name="test")
    prompts, model = default_prompt_set(), ScriptedModel()
    config = MirrorConfig(model="scripted", memory=False)
    writer = ConversationWriter(connections.bus, key, initial_state(key), Head(0, (await connections.bus.head(key)).fence))
    await writer.take_turn(MESSAGES[0], llm=model, prompts=prompts, config=config, recaller=no_recall)
    asked_from = writer.state  # the Talker of turn 2 is asked from here ...
    composed = await turn_code.compose_mirror_turn(asked_from, MESSAGES[1], llm=model, prompts=prompts, config=config,
                                                   now=1.0, recaller=no_recall)
    await writer.think_until_current(model, prompts, config, attempts=1)  # ... while the Thinker appends
    await writer.append(composed.build(key))
    events = await connections.log(TENANT).read(key)
    assert [type(event.payload).__name__ for event in events][-1] == "Turn" and events[-1].seq > asked_from.last_seq + 1
    last = events[-1].payload
    assert isinstance(last, Turn) and last.narrative_seq is None  # it saw no narrative
    (report,) = await verify_conversations(connections.log(TENANT), TENANT, "overtaken", prompts=prompts)
    assert report.ok and report.model_calls == 0 and report.steps >= 3, report.divergences
