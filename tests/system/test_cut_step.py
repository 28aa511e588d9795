"""A thinking step cut between its two events (a crash after the monologue's publish, before the
narrative's) is finished, not thought over again: the next step asks the controller alone, from
the threads the log holds, and the log ends as an uninterrupted step would have left it — the
same seqs, the same narrative — and replays with zero model calls. Against the simulator over
loopback HTTP, through the conversation writer the live conversation and recompute share."""

from __future__ import annotations

import pytest

from mirror.cognition.pipeline import MirrorConfig, threads_of_a_cut_step
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import no_recall
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import Head, InMemoryBus
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Monologue, Narrative
from mirror.projections.conversation import fold
from mirror.projections.state import initial_state
from mirror.replay.verify import verify_events
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL, sim_client

KEY = StreamKey("acme", "cut")
PROMPTS = default_prompt_set()
CONFIG = MirrorConfig(model=SIM_MODEL, mode="full", memory=False, seed=3)


async def _writer(events: list[Event]) -> tuple[InMemoryBus, ConversationWriter]:
    """A writer over a bus that holds ``events`` (what a crashed run left)."""
    bus = InMemoryBus()
    head = Head(0, 0)
    if events:
        head = await bus.append(KEY, events, head.with_last_seq(0))
    return bus, ConversationWriter(bus, KEY, fold(events, initial_state(KEY)), head.with_last_seq(len(events)))


async def _log(bus: InMemoryBus) -> list[Event]:
    return [event async for _, event in bus.tail(KEY, 0)]


def _comparable(events: list[Event]) -> list[tuple[object, ...]]:
    return [(event.seq, event.type, event.turn, event.payload) for event in events]


async def test_a_step_cut_after_its_monologue_is_finished_by_the_controller_alone(sim: SimLLMServer) -> None:
    async with sim_client(sim) as llm:
        bus, writer = await _writer([])
        for message in ("My sister moved to Lisbon.", "Where should I visit her?"):
            await _talked(writer, llm, message)
            await writer.think_until_current(llm, PROMPTS, CONFIG, attempts=3)
        whole = await _log(bus)
        assert [event.type for event in whole[-3:]] == ["turn", "monologue", "narrative"]

        cut = whole[:-1]  # the crash: the last step's narrative never reached the bus
        state = fold(cut, initial_state(KEY))
        assert threads_of_a_cut_step(state) is not None and threads_of_a_cut_step(fold(whole)) is None
        bus, writer = await _writer(cut)
        calls_before = sim.stats()["chat_calls"]
        await writer.think_until_current(llm, PROMPTS, CONFIG, attempts=3)
        assert sim.stats()["chat_calls"] - calls_before == 1  # the controller, not a new monologue
    finished = await _log(bus)
    assert _comparable(finished) == _comparable(whole)
    narrative = finished[-1]
    assert isinstance(narrative.payload, Narrative) and narrative.payload.monologue_seq == whole[-2].seq
    assert narrative.causation == cut[-1].id  # it saw the monologue the crash left

    report = await verify_events(KEY, initial_state(KEY), finished, PROMPTS)
    assert report.ok and report.model_calls == 0, report.as_dict()


@pytest.mark.parametrize("after", ["a narrative", "a failure", "a new turn"])
async def test_a_monologue_is_a_cut_step_only_when_nothing_came_after_it(after: str, sim: SimLLMServer) -> None:
    async with sim_client(sim) as llm:
        bus, writer = await _writer([])
        await _talked(writer, llm, "I like tea.")
        await writer.think_until_current(llm, PROMPTS, CONFIG, attempts=3)
        whole = await _log(bus)
        monologue_at = next(index for index, event in enumerate(whole) if isinstance(event.payload, Monologue))
        if after == "a narrative":
            state = fold(whole)
        elif after == "a failure":
            sim.script("500")  # the controller finishing the cut step fails: [monologue, thinker_failed]
            bus, writer = await _writer(whole[: monologue_at + 1])
            await writer.think_until_current(llm, PROMPTS, CONFIG, attempts=1)
            state = writer.state
            assert state.last_failure is not None and state.last_failure.stage == "controller"
        else:
            bus, writer = await _writer(whole[: monologue_at + 1])
            await _talked(writer, llm, "And coffee?")
            state = writer.state
    assert threads_of_a_cut_step(state) is None


async def _talked(writer: ConversationWriter, llm: object, message: str) -> None:
    """A turn through the writer's turn code, recalling nothing."""
    await writer.take_turn(message, llm=llm, prompts=PROMPTS, config=CONFIG, recaller=no_recall)  # type: ignore[arg-type]  # the sim's client is an LLM
