"""Replay of persona conversations against real NATS, a real ingester and the simulator over
HTTP: ``replay verify`` re-runs every step of the cycle (the turn path, the background steps, a
background failure, the ``persona`` event) with zero model and zero embedding calls and finds
nothing, finds an edited appraisal or emotion, and ``recompute`` with a changed persona template
gives a branch whose appraisals differ and which verifies with that template."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirror.actors.clients import memory_embedder
from mirror.actors.conversation import Conversation
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.embeddings import OpenAIEmbedder
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.persona import EXAMPLES, read_persona
from mirror.cognition.persona.background import PERSONA_STAGES, persona_step
from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.persona.prompting import PERSONA_PROMPTS, persona_prompt_set
from mirror.cognition.persona.turn_path import choose_persona, persona_turn
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import TurnRequest
from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Appraisal, EmotionUpdate, Interpretation, PersonaChosen, ThinkerFailed, Turn
from mirror.projections.conversation import apply
from mirror.projections.state import initial_state
from mirror.replay import History, RecomputePlan, diff, recompute_conversation, state_view
from mirror.replay.verify import VerifyReport, verify_events
from mirror.replay.verify_log import verify_branch
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL, sim_client
from tests.support.stack import conversation_runtime
from tests.system.test_conversation import log_events
from tests.system.test_replay import log_of

MESSAGES = ("Hello, who are you?", "Tell me about the lighthouse.", "Do you ever get lonely out there?")


@pytest.fixture
def runtime(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="persona-replay", latency="fixed:2",
                              reflection=False) as settings:
        yield settings


def wren(order: str = "appraisal_first") -> MindChoice:
    return MindChoice("persona", read_persona(EXAMPLES / "wren.json"), order)


async def converse(runtime: RuntimeSettings, key: StreamKey, messages: tuple[str, ...], order: str = "appraisal_first",
                   *, fail_emotion_at: int | None = None) -> list[Event]:
    """A persona conversation of ``messages``, each turn's background steps done before the next;
    ``fail_emotion_at``: the turn whose emotion step gets a malformed answer once (then retried)."""
    conversation = await Conversation(key, runtime).start()
    try:
        for index, message in enumerate(messages):
            if index == fail_emotion_at:  # the path's four calls go through, the emotion step's does not
                httpx.post(f"{runtime.llm.base_url.removesuffix('/v1')}/_sim/script",
                           json={"faults": ["ok"] * 4 + ["malformed"]}).raise_for_status()
            await conversation.turn(TurnRequest(message, mind=wren(order) if index == 0 else None))
            assert await conversation.wait_idle(30)
    finally:
        await conversation.stop()
    return await log_events(runtime, key)


async def verified(key: StreamKey, events: list[Event], persona_directory: Path | None = None) -> VerifyReport:
    return await verify_events(key, initial_state(key), events, default_prompt_set(),
                               persona_prompts=persona_prompt_set(persona_directory))


def edited(events: list[Event], kind: type, change: dict[str, object], which: int = 0) -> tuple[list[Event], int]:
    """``events`` with the ``which``-th event of payload ``kind`` changed; and its seq."""
    seqs = [event.seq for event in events if isinstance(event.payload, kind)]
    seq = seqs[which]
    return [dataclasses.replace(event, payload=dataclasses.replace(event.payload, **change)) if event.seq == seq else event
            for event in events], seq


@pytest.mark.parametrize("order", ["appraisal_first", "plan_first"])
async def test_verify_replays_every_persona_step_with_no_call(runtime: RuntimeSettings, order: str) -> None:
    key = StreamKey("acme", f"wren-{order}")
    events = await converse(runtime, key, MESSAGES, order)
    report = await verified(key, events)
    assert report.ok, report.divergences
    assert report.model_calls == 0 and report.embedding_calls == 0
    # the persona event, its greeting, then per turn its path and four background steps
    assert report.steps == 2 + len(MESSAGES) * 5
    assert report.persona_prompt_set == persona_prompt_set().version
    assert report.unverifiable == 0


async def test_a_failed_background_step_replays_as_it_failed(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "wren-failing")
    events = await converse(runtime, key, MESSAGES[:2], fail_emotion_at=1)
    failures = [event.payload for event in events if isinstance(event.payload, ThinkerFailed)]
    assert [(failure.stage, failure.attempt) for failure in failures] == [("emotion", 1)]
    report = await verified(key, events)
    assert report.ok, report.divergences
    assert report.model_calls == 0 and report.embedding_calls == 0
    assert report.steps == 2 + 2 * 5 + 1  # the failure is a step of its own, not a MIRROR thinking step


async def test_an_edited_appraisal_or_emotion_is_a_divergence(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "wren-edited")
    events = await converse(runtime, key, MESSAGES[:2])
    assert (await verified(key, events)).ok

    changed, seq = edited(events, Appraisal, {"text": "I feel nothing at all about this."})
    report = await verified(key, changed)
    assert report.model_calls == 0
    assert report.divergences[0].seq == seq and "the event was edited" in report.divergences[0].reason

    first = next(event.payload for event in events if isinstance(event.payload, EmotionUpdate))
    emotion = next(iter(first.intensities))
    intensities = {**first.intensities, emotion: round(1.0 - first.intensities[emotion], 4)}
    changed, seq = edited(events, EmotionUpdate, {"intensities": intensities})
    report = await verified(key, changed)
    assert report.model_calls == 0
    assert any(divergence.seq == seq and "payload.intensities" in divergence.reason for divergence in report.divergences)


async def test_an_edited_persona_card_is_a_divergence(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "wren-card")
    events = await converse(runtime, key, MESSAGES[:1])
    chosen = next(event for event in events if isinstance(event.payload, PersonaChosen))
    card = chosen.payload.card.replace("Wren", "Wrenna", 1)  # type: ignore[attr-defined]  # a PersonaChosen (above)
    changed, seq = edited(events, PersonaChosen, {"card": card})
    report = await verified(key, changed)
    assert [divergence.seq for divergence in report.divergences][:1] == [seq]
    assert "version" in report.divergences[0].reason


async def test_verify_with_a_changed_persona_template_names_it(runtime: RuntimeSettings, tmp_path: Path) -> None:
    key = StreamKey("acme", "wren-template")
    events = await converse(runtime, key, MESSAGES[:1])
    directory = changed_persona_prompts(tmp_path, "think.md", "I read every message as a riddle.")
    report = await verified(key, events, directory)
    assert report.model_calls == 0 and not report.ok
    first = next(event.seq for event in events if isinstance(event.payload, Interpretation))
    assert report.divergences[0].seq == first and report.divergences[0].kind == "recording_miss"
    assert "think.md" in report.divergences[0].reason


def changed_persona_prompts(tmp_path: Path, template: str, extra: str) -> Path:
    """A prompt directory whose ``persona/`` holds the built-in persona templates, ``template``
    with ``extra`` added."""
    directory = tmp_path / "prompts"
    (directory / "persona").mkdir(parents=True)
    for path in PERSONA_PROMPTS.glob("*.md"):
        text = path.read_text(encoding="utf-8")
        (directory / "persona" / path.name).write_text(text + f"\n{extra}\n" if path.name == template else text,
                                                       encoding="utf-8")
    return directory


async def test_recompute_with_a_changed_appraisal_template_rethinks_the_persona(runtime: RuntimeSettings,
                                                                                 tmp_path: Path) -> None:
    key = StreamKey("acme", "wren-recompute")
    recorded = await converse(runtime, key, MESSAGES[:2])
    directory = changed_persona_prompts(tmp_path, "appraisal.md", "My gut reaction always mentions the sea.")
    persona_prompts = persona_prompt_set(directory)
    plan = RecomputePlan(default_prompt_set(), persona_prompts=persona_prompts)
    assert plan.branch_name != RecomputePlan(default_prompt_set()).branch_name
    async with log_of(runtime, key) as (bus, log):
        llm, embedder = OpenAIChatClient(runtime.llm), memory_embedder(runtime)  # as the recompute driver's
        try:
            result = await recompute_conversation(key, plan, history=History(log), bus=bus, live=llm, embedder=embedder)
        finally:
            await llm.aclose()
            if embedder is not None:
                await embedder.aclose()
        branch = dataclasses.replace(key, branch=plan.branch_name)
        assert await log.wait_committed((await bus.head(branch)).fence, timeout=30)
        history = History(log)
        own = (await log.read(branch))[1:]  # after the fork event
        checked = await verify_branch(history, branch, persona_prompts=persona_prompts)
        by_itself = await verify_branch(history, branch)  # with the persona set its fork recorded
        unchanged = await verify_branch(history, branch, persona_prompts=persona_prompt_set())  # the built-in one
    assert result.turns == 2 and result.model_calls > 0 and result.error is None
    assert result.diff is not None and "appraisal" in result.diff["persona_changed"]  # the branch's head against main's
    assert [event.type for event in own] == [event.type for event in recorded]
    assert isinstance(own[0].payload, PersonaChosen) and own[0].payload == recorded[0].payload
    old = [event for event in recorded if isinstance(event.payload, Appraisal)]
    new = [event for event in own if isinstance(event.payload, Appraisal)]
    assert all(a.payload != b.payload for a, b in zip(old, new, strict=True))
    assert all(event.provenance is not None and event.provenance.prompt_set == persona_prompts.version for event in new)
    # Without counterfactual the replies are kept: each branch turn is the recorded one, naming it.
    recorded_turns = [event for event in recorded if isinstance(event.payload, Turn)]
    kept = [event for event in own if isinstance(event.payload, Turn)]
    assert [event.payload for event in kept] == [event.payload for event in recorded_turns]
    assert [event.causation for event in kept] == [event.id for event in recorded_turns]
    assert result.replies is None
    first = next(e.payload for e in recorded if isinstance(e.payload, Interpretation))
    assert next(e.payload for e in own if isinstance(e.payload, Interpretation)) == first  # think.md did not change
    assert checked.ok, checked.divergences
    assert checked.model_calls == 0 and checked.embedding_calls == 0 and checked.steps == 2 + 2 * 5
    assert by_itself.ok and by_itself.persona_prompt_set == persona_prompts.version, by_itself.divergences
    assert by_itself.model_calls == 0 and by_itself.steps == checked.steps
    assert not unchanged.ok and unchanged.model_calls == 0
    assert unchanged.divergences[0].kind == "recording_miss" and unchanged.divergences[0].stage == "persona_turn"
    assert "appraisal.md changed since the recording" in unchanged.divergences[0].reason


async def test_time_travel_and_diff_show_the_persona(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "wren-history")
    events = await converse(runtime, key, MESSAGES[:2])
    emotion = next(event for event in events if isinstance(event.payload, EmotionUpdate))
    chosen = next(event for event in events if isinstance(event.payload, PersonaChosen))
    async with log_of(runtime, key) as (_bus, log):
        history = History(log)
        then = await history.state_at(key, emotion.seq)
        start = await history.state_at(key, chosen.seq)
        now = await history.state_at(key)
    view = json.loads(json.dumps(state_view(then)))  # JSON all the way down
    persona = view["persona"]
    assert persona["name"] == "Wren Halloway" and persona["emotion_turn"] == 0
    assert persona["emotions"] == emotion.payload.intensities  # type: ignore[attr-defined]  # an EmotionUpdate (above)
    assert persona["appraisal"]["for_turn"] == 0 and persona["active_hard_goal"] == chosen.payload.hard_goals[0]  # type: ignore[attr-defined]  # a PersonaChosen
    assert state_view(initial_state(key))["persona"] is None
    changed = diff(start, now)
    assert changed.changed and {"appraisal", "plan", "interpretation", "episodes"} <= set(changed.persona_changed)
    assert any(name.startswith("emotions.") for name in changed.persona_changed)
    lines = changed.summary().splitlines()
    assert any(line.strip().startswith("persona (") for line in lines)
    assert diff(now, now).persona_changed == {} and not diff(now, now).changed


async def generated(sim: SimLLMServer, key: StreamKey, messages: list[str], order: str) -> list[Event]:
    """A persona conversation of ``messages`` made by the cycle's own functions against the
    simulator, appended as the actor and the writer append them."""
    prompts = persona_prompt_set()
    config = MirrorConfig(model=SIM_MODEL, mode="baseline", memory=False, reflection=False, seed=3)
    embedder = OpenAIEmbedder(LLMSettings(base_url=sim.base_url, model="sim-embed", max_retries=0), dimensions=16)
    events: list[Event] = []
    state = initial_state(key)

    def append(event: Event) -> None:
        nonlocal state
        state = apply(state, event)
        events.append(event)

    async with sim_client(sim) as llm:
        append(make_event(key, 1, await choose_persona(read_persona(EXAMPLES / "wren.json"), embedder, order), turn=0))
        for message in messages:
            basis = state
            said = await persona_turn(basis, message, llm, embedder, prompts, config)
            for event in said.events(key, basis.last_seq + 1, basis.turn_count, events[-1].id, time.time()):
                append(event)
            for stage in PERSONA_STAGES:
                step = await persona_step(state, stage, llm, embedder, prompts, config)
                for event in step.events(key, state.last_seq + 1, causation=events[-1].id):
                    append(event)
    await embedder.aclose()
    return events


MESSAGE_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=60)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(MESSAGE_TEXT.filter(lambda text: text.strip()), min_size=1, max_size=3),
       order=st.sampled_from(["appraisal_first", "plan_first"]))
def test_verify_of_any_persona_conversation_makes_no_call_and_finds_nothing(
    sim_server: SimLLMServer, messages: list[str], order: str
) -> None:
    key = StreamKey("acme", "generated")

    async def run() -> tuple[VerifyReport, int]:
        events = await generated(sim_server, key, messages, order)
        calls = sim_server.stats()["calls"]
        report = await verified(key, events)
        return report, sim_server.stats()["calls"] - calls

    report, calls = asyncio.run(run())
    assert calls == 0  # the simulator saw no chat and no embedding call during the verify
    assert report.ok, report.divergences
    assert report.model_calls == 0 and report.embedding_calls == 0
    assert report.steps == 1 + 5 * len(messages)


class Interrupted(Exception):
    """The live model cut off mid-run (not a model failure: nothing records it)."""


class CutOff:
    """The live model, until it is cut off after ``budget`` calls (an interrupted recompute)."""

    def __init__(self, live: OpenAIChatClient, budget: int) -> None:
        self.live, self.budget = live, budget

    async def chat(self, request: Any) -> Any:
        if self.budget == 0:
            raise Interrupted
        self.budget -= 1
        return await self.live.chat(request)

    async def embed(self, texts: Any) -> Any:
        return await self.live.embed(texts)


async def test_an_interrupted_persona_recompute_resumes_to_the_branch_one_run_makes(runtime: RuntimeSettings,
                                                                                     tmp_path: Path) -> None:
    key = StreamKey("acme", "wren-resume")
    await converse(runtime, key, MESSAGES[:2])
    directory = changed_persona_prompts(tmp_path, "appraisal.md", "My gut reaction always mentions the sea.")
    half = RecomputePlan(default_prompt_set(), persona_prompts=persona_prompt_set(directory), branch="resumed")
    async with log_of(runtime, key) as (bus, log):
        llm, embedder = OpenAIChatClient(runtime.llm), memory_embedder(runtime)
        try:
            with pytest.raises(Interrupted):  # cut in the first turn's background steps
                await recompute_conversation(key, half, history=History(log), bus=bus, live=CutOff(llm, 5),
                                             embedder=embedder)
            resumed = await recompute_conversation(key, half, history=History(log), bus=bus, live=llm, embedder=embedder)
            clean = await recompute_conversation(key, dataclasses.replace(half, branch="clean"), history=History(log),
                                                 bus=bus, live=llm, embedder=embedder)
        finally:
            await llm.aclose()
            if embedder is not None:
                await embedder.aclose()
        for branch in ("resumed", "clean"):
            assert await log.wait_committed((await bus.head(dataclasses.replace(key, branch=branch))).fence, timeout=30)
        got = await log.read(dataclasses.replace(key, branch="resumed"))
        want = await log.read(dataclasses.replace(key, branch="clean"))
        checked = await verify_branch(History(log), dataclasses.replace(key, branch="resumed"))
    assert resumed.resumed_at_turn == 1 and clean.resumed_at_turn == 0
    assert [e.seq for e in got] == list(range(1, len(got) + 1))
    assert [(e.type, e.payload) for e in got[1:]] == [(e.type, e.payload) for e in want[1:]]
    assert checked.ok and checked.model_calls == 0, checked.divergences
