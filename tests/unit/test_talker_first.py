"""Thinking gives way to the process's busy turns (:mod:`mirror.cognition.talker_first`).

The ordering is checked by counting the loop's turns, never by the clock: each wait bound is an
hour, so a step that ran early could only have done so by breaking the ordering. A turn waiting
on its model call is not busy (thinking fills that wait); a Thinker call that answers while a
turn is busy returns after it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from mirror.cognition.fair_share import TALKER, THINKER, AdmittedLLM, FairShare
from mirror.cognition.llm import ChatMessage, ChatRequest, ChatResponse
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.talker_first import TalkerFirst
from mirror.cognition.turn import no_recall
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import Head
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.projections.state import initial_state

from .test_verify_log import ScriptedModel

KEY = StreamKey("acme", "first")
HOUR = 3600.0
LOOP_TURNS = 50
"""Turns of the event loop given to a step that must not run: far more than it needs to run."""


async def spin(turns: int = LOOP_TURNS) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


class GatedModel(ScriptedModel):
    """A scripted model whose calls wait until :attr:`open` is set (a model still answering)."""

    def __init__(self) -> None:
        super().__init__()
        self.open = asyncio.Event()
        self.open.set()
        self.asked = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        self.asked += 1
        await self.open.wait()
        return await super().chat(request)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise AssertionError("no memory here")


async def test_a_thinking_step_waits_while_a_turn_is_busy_and_not_while_it_waits_on_its_model() -> None:
    first = TalkerFirst(max_wait_s=HOUR)
    order: list[str] = []
    busy, model_call, done = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def turn() -> None:
        with first.turn():
            busy.set()
            await model_call.wait()
            with first.waiting():  # the model is answering: nothing of the turn runs
                order.append("turn waits on its model")
                await done.wait()
            order.append("turn replies")

    async def step() -> None:
        await first.quiet()
        order.append("thinking step")

    answering = asyncio.create_task(turn())
    await busy.wait()
    thinking = asyncio.create_task(step())
    await spin()
    assert order == [] and first.busy == 1  # the turn is busy: the step has not started
    model_call.set()
    await thinking
    assert order == ["turn waits on its model", "thinking step"]
    done.set()
    await answering
    assert first.busy == 0 and first.waited == 1


async def test_outside_a_turn_waiting_changes_nothing_and_quiet_returns_at_once() -> None:
    first = TalkerFirst(max_wait_s=HOUR)
    with first.waiting():
        assert first.busy == 0
    await first.quiet()
    assert first.waited == 0


async def test_the_think_loop_starts_no_step_and_appends_nothing_while_a_turn_is_busy() -> None:
    infrastructure = InMemoryInfrastructure()
    connections = await infrastructure.connect(name="test")
    model, first = GatedModel(), TalkerFirst(max_wait_s=HOUR)
    share = FairShare(4)
    talker = AdmittedLLM(model, share, KEY.tenant, TALKER, first)
    thinker = AdmittedLLM(model, share, KEY.tenant, THINKER, first)
    writer = ConversationWriter(connections.bus, KEY, initial_state(KEY), Head(0, 0))
    prompts, config = default_prompt_set(), MirrorConfig(model="scripted", memory=False, reflection=False)
    await writer.take_turn("I keep bees.", llm=talker, prompts=prompts, config=config, recaller=no_recall)
    seq, asked = writer.state.last_seq, model.asked

    release, busy = asyncio.Event(), asyncio.Event()

    async def other_turn() -> None:  # another conversation's turn of the same process, busy
        with first.turn():
            busy.set()
            await release.wait()

    held = asyncio.create_task(other_turn())
    await busy.wait()
    thinking = asyncio.create_task(writer.think_until_current(thinker, prompts, config, attempts=1,
                                                              yield_to=first.quiet))
    await spin()
    assert (model.asked, writer.state.last_seq) == (asked, seq)  # no step started: no model call, nothing appended
    release.set()
    await asyncio.gather(held, thinking)
    assert model.asked > asked and writer.state.narrative  # then it thought the turn through

    # A step whose model answers while a turn is busy: its answer is written after the turn (the
    # Thinker's model port alone holds it here: the loop is given no yield_to).
    await writer.take_turn("They sting sometimes.", llm=talker, prompts=prompts, config=config, recaller=no_recall)
    seq, asked, thought = writer.state.last_seq, model.asked, writer.state.thought_turn
    model.open.clear()
    thinking = asyncio.create_task(writer.think_until_current(thinker, prompts, config, attempts=1))
    while model.asked == asked:  # the step's model call is out
        await asyncio.sleep(0)
    release.clear()
    busy.clear()
    held = asyncio.create_task(other_turn())
    await busy.wait()
    model.open.set()  # the model answers while the turn is busy
    await spin()
    assert writer.state.last_seq == seq  # the answer waits: nothing parsed into events, nothing appended
    release.set()
    await asyncio.gather(held, thinking)
    assert writer.state.last_seq > seq and writer.state.thought_turn != thought and writer.state.thought_turn is not None


async def test_a_talker_call_is_not_busy_so_thinking_fills_its_wait() -> None:
    model, first = GatedModel(), TalkerFirst(max_wait_s=HOUR)
    talker = AdmittedLLM(model, FairShare(2), KEY.tenant, TALKER, first)
    model.open.clear()
    request = ChatRequest(messages=(ChatMessage("user", "hello"),), model="scripted", temperature=0.0, max_tokens=16)

    async def turn() -> ChatResponse:
        with first.turn():
            return await talker.chat(request)

    answering = asyncio.create_task(turn())
    while model.asked == 0:
        await asyncio.sleep(0)
    assert first.busy == 0  # the turn is waiting on its model call
    await first.quiet()  # at once
    assert first.waited == 0
    model.open.set()
    await answering
    assert first.busy == 0


async def test_the_wait_is_bounded_and_leaves_nothing_behind() -> None:
    """A host whose turns never pause still thinks: past ``max_wait_s`` (here none) a step goes ahead."""
    first = TalkerFirst(max_wait_s=0.0)
    release, busy = asyncio.Event(), asyncio.Event()

    async def turn() -> None:
        with first.turn():
            busy.set()
            await release.wait()

    held = asyncio.create_task(turn())
    await busy.wait()
    for _ in range(3):
        await first.quiet()  # returns although the turn is still busy
    assert first.busy == 1 and first.waited == 3 and not first._waiters  # no waiter kept for the next quiet moment
    release.set()
    await held
