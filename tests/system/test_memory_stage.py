"""The memory stage's whole steps against the simulator over loopback HTTP — beliefs from stated
facts, reinforcement on restatement, contradictions kept for review, all-or-nothing failure and
its retry, and replay with zero model and zero embedding calls. (The gate and verdict rules alone:
``tests/unit/test_memory_stage.py``.)"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

import pytest

from mirror.cognition.embeddings import OpenAIEmbedder
from mirror.cognition.errors import LLMError
from mirror.cognition.llm import LLM, ChatRequest, ChatResponse
from mirror.cognition.memory.extract import CONTRADICTION_SCHEMA, MEMORY_SCHEMA
from mirror.cognition.memory.stage import EMBEDDING_FAILED, memory_behind
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.pipeline import MONOLOGUE_SCHEMA, MirrorConfig
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import no_recall
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import InMemoryBus
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.payloads import Belief, Monologue, Narrative, ThinkerFailed
from mirror.projections.conversation import fold
from mirror.projections.state import initial_state
from mirror.replay.verify import verify_events
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL, sim_client

KEY = StreamKey("acme", "memory")
PROMPTS = default_prompt_set()
DIMENSIONS = 64
EMBED_MODEL = "sim-embed"


# ------------------------------------------------------------------------ whole steps, simulator


def embedder_of(sim: SimLLMServer, base_url: str | None = None) -> OpenAIEmbedder:
    return OpenAIEmbedder(LLMSettings(base_url=base_url or sim.base_url, model=EMBED_MODEL, max_retries=0,
                                      timeout_s=5.0, connect_timeout_s=1.0), dimensions=DIMENSIONS)


async def conversation(sim: SimLLMServer, messages: list[str], *, mode: str = "full",
                       embedder: OpenAIEmbedder | None = None, attempts: int = 3,
                       steered: Steered | None = None, overlap: bool = False) -> list[Event]:
    """Turns through the conversation writer (the live path's), thinking and remembering after each
    (``overlap``: recompute's loop, the memory step beside the thinking); ``steered`` stands
    between the pipeline and the simulator."""
    bus = InMemoryBus()
    writer = ConversationWriter(bus, KEY, initial_state(KEY), (await bus.head(KEY)).with_last_seq(0))
    config = MirrorConfig(model=SIM_MODEL, mode=mode, seed=3)  # type: ignore[arg-type]
    async with sim_client(sim) as client:
        llm: LLM = client
        if steered is not None:
            steered.llm, llm = client, steered
        own = embedder or embedder_of(sim)
        try:
            for message in messages:
                await writer.take_turn(message, llm=llm, prompts=PROMPTS, config=config, recaller=no_recall)
                await writer.think_until_current(llm, PROMPTS, config, attempts=attempts, embedder=own,
                                                 overlap_memory=overlap)
        finally:
            await own.aclose()
    return await _all(bus)


class Refused(LLMError):
    """The failure :class:`Steered` makes a call end in (its kind is what ``thinker_failed`` records)."""


class Steered:
    """The LLM port in front of the simulator, by request kind (the JSON schema's name, else "text"):
    the first call of each kind in ``fail`` is refused; with ``meet``, each monologue call waits
    until that turn's memory extraction has been asked too (both in flight at once), or fails the
    test after 10 s. Counts the calls in flight."""

    def __init__(self, *, fail: tuple[str, ...] = (), meet: bool = False) -> None:
        self.llm: LLM | None = None
        self.fail, self.meet = set(fail), meet
        self.extraction = asyncio.Event()
        self.in_flight = self.most_in_flight = 0

    async def chat(self, request: ChatRequest) -> ChatResponse:
        assert self.llm is not None
        kind = request.json_schema.name if request.json_schema is not None else "text"
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if kind == MEMORY_SCHEMA.name:
                self.extraction.set()
            elif kind == MONOLOGUE_SCHEMA.name and self.meet:
                await asyncio.wait_for(self.extraction.wait(), 10)
                self.extraction.clear()
            if kind in self.fail:
                self.fail.discard(kind)
                raise Refused(f"no {kind} this time")
            return await self.llm.chat(request)
        finally:
            self.in_flight -= 1

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        assert self.llm is not None
        return await self.llm.embed(texts)


async def _all(bus: InMemoryBus) -> list[Event]:
    return [event async for _, event in bus.tail(KEY, 0)]


def kinds(events: list[Event]) -> list[str]:
    return [event.type for event in events]


async def test_a_stated_fact_becomes_a_belief_and_a_restatement_reinforces_it(sim: SimLLMServer) -> None:
    events = await conversation(sim, ["I have a severe peanut allergy.", "I have a severe peanut allergy."])
    state = fold(events)
    assert state.memory_turn == 1 and not memory_behind(state)
    asserted = [e.payload for e in events if isinstance(e.payload, Belief) and e.payload.operation == "assert"]
    assert [b.statement for b in asserted] == ["I have a severe peanut allergy."]
    (belief,) = [b for b in state.beliefs.values() if "peanut" in b.statement]
    assert belief.confidence == pytest.approx(0.85) and belief.embedding and belief.embedding_model == EMBED_MODEL
    reinforced = [e.payload for e in events if isinstance(e.payload, Belief) and e.payload.operation == "reinforce"]
    assert [r.belief_id for r in reinforced] == [belief.belief_id] and reinforced[0].embedding  # the vector rides along
    # stage order: the controller first, then memory, each turn
    assert kinds(events)[:5] == ["turn", "monologue", "narrative", "belief", "memory_step"]


async def test_a_contradiction_keeps_both_and_opens_a_review(sim: SimLLMServer) -> None:
    events = await conversation(sim, ["I am allergic to peanuts.", "I am not allergic to peanuts."])
    state = fold(events)
    statements = {b.statement for b in state.beliefs.values()}
    assert {"I am allergic to peanuts.", "I am not allergic to peanuts."} <= statements
    (review,) = state.review_items.values()
    assert state.beliefs[review.belief_id].statement == "I am not allergic to peanuts."
    assert state.beliefs[review.opposed_id].statement == "I am allergic to peanuts."
    judged = [e for e in events if isinstance(e.payload, Belief) and e.payload.operation == "contradict"]
    assert len(judged) == 1 and judged[0].provenance is not None  # the contradiction call's answer, once


async def test_memory_runs_in_baseline_mode_and_not_when_turned_off(sim: SimLLMServer) -> None:
    events = await conversation(sim, ["Coffee increases my anxiety."], mode="baseline")
    assert kinds(events) == ["turn", "belief", "edge", "memory_step"]
    assert fold(events).edges[("coffee", "increases", "my anxiety")].origin == "conversation"
    bus = InMemoryBus()
    writer = ConversationWriter(bus, KEY, initial_state(KEY), (await bus.head(KEY)).with_last_seq(0))
    config = MirrorConfig(model=SIM_MODEL, mode="baseline", memory=False)
    async with sim_client(sim) as llm:
        await writer.take_turn("Coffee increases my anxiety.", llm=llm, prompts=PROMPTS, config=config, recaller=no_recall)
        await writer.think_until_current(llm, PROMPTS, config, attempts=3, embedder=embedder_of(sim))
    assert [e.type for e in await _all(bus)] == ["turn"]


@pytest.mark.parametrize("fault", ["malformed", "500", "empty"])
async def test_a_failed_memory_step_writes_no_memory_and_is_retried_alone(sim: SimLLMServer, fault: str) -> None:
    sim.reset()
    sim.script("ok", "ok", "ok", fault)  # talker, monologue, controller answer; the extraction fails
    events = await conversation(sim, ["I live in Lisbon. I love the sea."])
    assert kinds(events) == ["turn", "monologue", "narrative", "thinker_failed", "belief", "belief", "memory_step"]
    failure = events[3].payload
    assert isinstance(failure, ThinkerFailed) and failure.stage == "memory" and failure.for_turn == 0
    assert fold(events[:4]).beliefs == {} and fold(events[:4]).memory_turn is None
    assert fold(events[:4]).thought_turn == 0  # the thinking stands; only memory is behind
    assert sum(isinstance(e.payload, (Monologue, Narrative)) for e in events) == 2  # not re-run
    report = await verify(sim, events)
    assert report.ok, report.as_dict()


async def test_a_failed_contradiction_check_writes_no_memory(sim: SimLLMServer) -> None:
    sim.reset()
    first = await conversation(sim, ["I am allergic to peanuts."], mode="baseline")
    sim.reset()
    sim.script("ok", "ok", "malformed")  # talker, extraction; the contradiction check fails
    bus = InMemoryBus()
    state = fold(first)
    head = await bus.append(KEY, first, (await bus.head(KEY)).with_last_seq(0))
    writer = ConversationWriter(bus, KEY, state, head)
    config = MirrorConfig(model=SIM_MODEL, mode="baseline", seed=3)
    async with sim_client(sim) as llm:
        await writer.take_turn("I am not allergic to peanuts.", llm=llm, prompts=PROMPTS, config=config, recaller=no_recall)
        await writer.think_until_current(llm, PROMPTS, config, attempts=1, embedder=embedder_of(sim))
    events = await _all(bus)
    tail = events[len(first):]
    assert kinds(tail) == ["turn", "thinker_failed"]
    failure = tail[1].payload
    assert isinstance(failure, ThinkerFailed) and failure.stage == "memory"
    assert fold(events).review_items == {} and len(fold(events).beliefs) == 1
    assert memory_behind(fold(events))  # given up after one attempt: the next turn or activation retries
    report = await verify(sim, events)
    assert report.ok, report.as_dict()


async def test_an_embedding_failure_is_a_memory_failure_that_replays_the_same(sim: SimLLMServer) -> None:
    sim.reset()
    unreachable = embedder_of(sim, base_url="http://127.0.0.1:9/v1")  # nothing listens on the discard port
    events = await conversation(sim, ["My sister lives in Porto."], mode="baseline", embedder=unreachable, attempts=2)
    assert kinds(events) == ["turn", "thinker_failed", "thinker_failed"]
    failures = [e.payload for e in events[1:]]
    assert all(isinstance(f, ThinkerFailed) for f in failures)
    assert {f.error_type for f in failures if isinstance(f, ThinkerFailed)} == {EMBEDDING_FAILED}
    assert [f.attempt for f in failures if isinstance(f, ThinkerFailed)] == [1, 2]
    report = await verify(sim, events)
    assert report.ok, report.as_dict()


async def verify(sim: SimLLMServer, events: list[Event]):
    before = sim.stats()
    report = await verify_events(KEY, initial_state(KEY), events, PROMPTS)
    after = sim.stats()
    assert (after["chat_calls"], after["embedding_calls"]) == (before["chat_calls"], before["embedding_calls"])
    assert report.model_calls == 0 and report.embedding_calls == 0
    return report


async def test_replay_verify_re_decides_memory_with_zero_calls_and_catches_an_edit(sim: SimLLMServer) -> None:
    sim.reset()
    events = await conversation(sim, ["I am allergic to peanuts. Stress causes insomnia.",
                                      "I am allergic to peanuts.", "I am not allergic to peanuts."])
    report = await verify(sim, events)
    assert report.ok, report.as_dict()
    memory = [e for e in events if e.type in ("belief", "edge", "memory_step")]
    assert report.steps >= 9 and len(memory) >= 8
    index = next(i for i, e in enumerate(events) if isinstance(e.payload, Belief) and e.payload.operation == "reinforce")
    reinforce = events[index].payload
    assert isinstance(reinforce, Belief)
    edited = replace(events[index], payload=replace(reinforce, operation="assert"))
    report = await verify(sim, [*events[:index], edited, *events[index + 1:]])
    assert [d.seq for d in report.divergences] == [edited.seq]


def comparable(events: list[Event]) -> list[tuple[object, ...]]:
    """What a log says, without the wall clock (timestamps, the calls' latencies)."""
    return [(e.seq, e.type, e.turn, e.payload, e.causation,
             None if e.provenance is None else replace(e.provenance, latency_ms=0.0)) for e in events]


OVERLAP_MESSAGES = ["I am allergic to peanuts. Stress causes insomnia.", "I am allergic to peanuts.",
                    "I am not allergic to peanuts."]


@pytest.mark.parametrize("fail", [(), (MEMORY_SCHEMA.name,), (MONOLOGUE_SCHEMA.name,), (CONTRADICTION_SCHEMA.name,)])
async def test_an_overlapped_memory_step_writes_the_log_the_serial_loop_writes(sim: SimLLMServer,
                                                                              fail: tuple[str, ...]) -> None:
    """Recompute's loop starts a turn's memory step beside its thinking: the same events, in the
    same order, with the same causation (a failed step retried, a thinking retry reusing the
    early step), and the log replays with zero calls."""
    serial_llm, overlapped_llm = Steered(fail=fail), Steered(fail=fail, meet=not fail)
    serial = await conversation(sim, OVERLAP_MESSAGES, steered=serial_llm)
    overlapped = await conversation(sim, OVERLAP_MESSAGES, steered=overlapped_llm, overlap=True)
    assert comparable(overlapped) == comparable(serial)
    if fail:
        assert any(isinstance(e.payload, ThinkerFailed) for e in overlapped)
    else:  # every turn's monologue met its extraction: the two calls were in flight together
        assert overlapped_llm.most_in_flight == 2 and serial_llm.most_in_flight == 1
    if CONTRADICTION_SCHEMA.name in fail:
        # Not verifiable, overlapped or not: a contradiction call refused without an answer and
        # answered on the retry replays with that answer, so verify sees the retry's step where
        # the failure was (the failure records the extraction's provenance, not the check's).
        return
    report = await verify(sim, overlapped)
    assert report.ok, report.as_dict()
