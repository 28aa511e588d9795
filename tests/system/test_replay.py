"""Replay against the real parts: conversations driven through the live runtime (real NATS, a
real ingester process writing DuckDB, the simulator over HTTP), then looked back at.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.actors.conversation import Conversation
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.llm import ChatMessage, ChatRequest
from mirror.cognition.openai_client import OpenAIChatClient
from mirror.cognition.prompts import DEFAULT_PROMPT_SETS, default_prompt_set, load_prompt_set
from mirror.cognition.turn import TurnRequest
from mirror.events.bus import Head
from mirror.events.codec import encode
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Belief, Edge, MemoryStep, Monologue, Narrative, Recall, ThinkerFailed, Turn
from mirror.projections.conversation import fold
from mirror.projections.state import initial_state
from mirror.replay import (
    History,
    NonDeterminism,
    RecomputeError,
    RecomputePlan,
    RecordedLLM,
    RecordingMiss,
    UnknownPosition,
    diff,
    recompute_conversation,
    verify_events,
)
from mirror.replay.verify import memory_steps, thinking_steps
from tests.support.stack import conversation_runtime, nats_of


@pytest.fixture(scope="module")
def runtime(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeSettings]:
    directory = tmp_path_factory.mktemp("replay")
    # Reflection off: these tests count thinking and memory steps (test_reflection.py replays reflection).
    with conversation_runtime(nats_server.url, directory, shard="replay", snapshot_every=5, reflection=False) as settings:
        yield settings


@asynccontextmanager
async def log_of(settings: RuntimeSettings, *keys: StreamKey) -> AsyncIterator[tuple[JetStreamBus, LogClient]]:
    """The bus and the log, once the log holds everything the stream has for ``keys``."""
    bus = await JetStreamBus.connect(nats_of(settings).url)
    client = LogClient(bus.nc, shard=nats_of(settings).shard)
    for key in keys:
        assert await client.wait_committed((await bus.head(key)).fence, timeout=30)
    try:
        yield bus, client
    finally:
        await bus.close()


async def sim(settings: RuntimeSettings, path: str, body: Any = None) -> Any:
    async with httpx.AsyncClient(base_url=settings.llm.base_url.removesuffix("/v1")) as client:
        response = await (client.get(path) if body is None else client.post(path, json=body))
        response.raise_for_status()
        return response.json()


async def talk_through(settings: RuntimeSettings, key: StreamKey, messages: list[str], *, sync: bool = True) -> Any:
    conversation = await Conversation(key, settings).start()
    try:
        for message in messages:
            await conversation.turn(TurnRequest(message, sync=sync))
        assert await conversation.wait_idle(60)
        return conversation.state
    finally:
        await conversation.stop()


MESSAGES = ["I never eat peanuts: I am allergic.", "Tell me about rivers.", "And mountains?",
            "Which one is older?", "Suggest a snack with peanut butter."]


def reply_of(event: Event) -> str:
    assert isinstance(event.payload, Turn)
    return event.payload.reply


def edited_prompts(tmp_path: Path, template: str, extra: str) -> Any:
    directory = tmp_path / "prompts"
    shutil.copytree(DEFAULT_PROMPT_SETS / "default", directory)
    path = directory / template
    path.write_text(path.read_text() + "\n" + extra + "\n")
    return load_prompt_set(directory)


async def test_state_at_every_seq_equals_the_fold_of_its_prefix(runtime: RuntimeSettings) -> None:
    key = StreamKey("replay", "prefix")
    final = await talk_through(runtime, key, MESSAGES, sync=False)
    async with log_of(runtime, key) as (_, log):
        events = await log.read(key)
        history = History(log, snapshot_every=4)
        assert await history.state_at(key) == final
        for k in range(0, len(events) + 1):
            expected = fold(events[:k]) if k else initial_state(key)
            assert await history.state_at(key, k) == expected, k
        with pytest.raises(UnknownPosition, match=f"ends at seq {len(events)}"):
            await history.state_at(key, len(events) + 1)
        middle = events[len(events) // 2]
        assert (await history.state_at(key, at_time=middle.timestamp)).last_seq >= middle.seq
        assert (await history.state_at(key, at_time=events[0].timestamp - 1)).last_seq == 0


async def test_diff_shows_the_narrative_and_turns_that_changed(runtime: RuntimeSettings) -> None:
    key = StreamKey("replay", "diffs")
    await talk_through(runtime, key, MESSAGES[:3])
    async with log_of(runtime, key) as (_, log):
        history = History(log)
        events = await log.read(key)
        narratives = [e.seq for e in events if isinstance(e.payload, Narrative)]
        before, after = await history.state_at(key, narratives[0]), await history.state_at(key, narratives[-1])
        change = diff(before, after)
        assert change.changed and change.narrative_changed and change.turns_added == 2
        assert any(line.startswith("+") for line in change.narrative_diff)
        assert "narrative" in change.summary() and change.as_dict()["narrative_after"] == after.narrative
        assert not diff(after, after).changed


async def test_replay_with_unchanged_prompts_reproduces_every_event_without_a_model_call(
    runtime: RuntimeSettings,
) -> None:
    key = StreamKey("replay", "faithful")
    await sim(runtime, "/_sim/reset", {})
    # A monologue that is not JSON, then a controller that gets no answer, then clean thinking.
    await sim(runtime, "/_sim/script", {"faults": ["ok", "garbage", "ok", "500", "500", "ok", "ok"]})
    await talk_through(runtime, key, MESSAGES, sync=True)
    async with log_of(runtime, key) as (_, log):
        events = await log.read(key)
    assert any(isinstance(e.payload, ThinkerFailed) for e in events)
    stats_before = await sim(runtime, "/_sim/stats")
    report = await verify_events(key, initial_state(key), events, default_prompt_set())
    assert report.ok, report.as_dict()["divergences"][:2]
    assert report.model_calls == 0 and report.embedding_calls == 0 and report.unverifiable == 0
    recalls = sum(isinstance(e.payload, Recall) for e in events)
    assert recalls == len(MESSAGES) - 1  # every turn after the first recalled the first one's belief
    assert report.steps == len(MESSAGES) + len(thinking_steps(events)) + len(memory_steps(events)) + recalls
    assert len(memory_steps(events)) == len(MESSAGES)  # each turn remembered once
    stats_after = await sim(runtime, "/_sim/stats")
    assert (stats_after["chat_calls"], stats_after["embedding_calls"]) == (
        stats_before["chat_calls"], stats_before["embedding_calls"])


async def test_a_divergent_log_raises_a_typed_non_determinism_error(runtime: RuntimeSettings) -> None:
    key = StreamKey("replay", "tampered")
    await talk_through(runtime, key, MESSAGES[:2])
    async with log_of(runtime, key) as (_, log):
        events = await log.read(key)
    narrative = next(e for e in events if isinstance(e.payload, Narrative))
    assert isinstance(narrative.payload, Narrative)
    forged = replace(narrative, payload=replace(narrative.payload, text="I decided something else entirely."))
    tampered = [forged if e.seq == narrative.seq else e for e in events]
    report = await verify_events(key, initial_state(key), tampered, default_prompt_set())
    # The first divergence is the forged event; later steps saw the forged narrative, so they
    # cannot be answered from the recording either.
    assert report.divergences[0].seq == narrative.seq and "text" in report.divergences[0].reason
    assert all(d.seq > narrative.seq for d in report.divergences[1:])
    with pytest.raises(NonDeterminism, match=f"seq {narrative.seq}"):
        report.raise_for_divergence()


async def test_a_changed_prompt_shows_only_where_that_prompt_was_used(
    runtime: RuntimeSettings, tmp_path: Path
) -> None:
    key = StreamKey("replay", "reprompt")
    await talk_through(runtime, key, MESSAGES)
    prompts = edited_prompts(tmp_path, "controller.md", "I keep my narrative to three sentences.")
    assert prompts.version != default_prompt_set().version
    async with log_of(runtime, key) as (bus, log):
        main_before = [encode(e) for e in await log.read(key)]
        llm = OpenAIChatClient(runtime.llm)
        plan = RecomputePlan(prompts)
        result = await recompute_conversation(key, plan, history=History(log), bus=bus, live=llm)
        await llm.aclose()
        branch = replace(key, branch=plan.branch_name)
        assert await log.wait_committed((await bus.head(branch)).fence, timeout=30)
        main_after = [encode(e) for e in await log.read(key)]
        history = History(log)
        branch_events = await history.events(branch)
        recorded = await log.read(key)
        verify = await verify_events(branch, await history.state_at(branch, 1), (await log.read(branch))[1:], prompts)
    assert main_after == main_before  # main is never written
    assert result.turns == len(MESSAGES) and result.resumed_at_turn == 0
    own = branch_events[1:]  # after the fork event
    assert [e.type for e in own] == [e.type for e in recorded]
    for old, new in zip(recorded, own, strict=True):
        if isinstance(old.payload, (Turn, Monologue, Belief, Edge, MemoryStep, Recall)):
            # the monologue and memory prompts did not change: same thoughts, same beliefs, same recalls
            assert new.payload == old.payload
        else:
            assert new.payload != old.payload and new.provenance is not None and new.provenance.prompt_set == prompts.version
    narratives = sum(isinstance(e.payload, Narrative) for e in recorded)
    assert result.model_calls == narratives  # only controller requests changed
    assert result.embedding_calls == 0  # every statement's vector was recorded
    assert result.diff is not None and result.diff["narrative_changed"]
    assert verify.ok and verify.model_calls == 0  # the branch itself replays deterministically


async def test_recompute_resumes_a_half_done_branch_without_duplicates(
    runtime: RuntimeSettings, tmp_path: Path
) -> None:
    key = StreamKey("replay", "resume")
    await talk_through(runtime, key, MESSAGES)
    prompts = edited_prompts(tmp_path, "monologue.md", "I think in short sentences.")

    class Interrupted(Exception):
        pass

    class Failing:
        """The live model, until it is cut off after ``budget`` calls (an interrupted run)."""

        def __init__(self, live: Any, budget: int) -> None:
            self.live, self.budget = live, budget

        async def chat(self, request: Any) -> Any:
            if self.budget == 0:
                raise Interrupted
            self.budget -= 1
            return await self.live.chat(request)

        async def embed(self, texts: Any) -> Any:
            return await self.live.embed(texts)

    async with log_of(runtime, key) as (bus, log):
        llm = OpenAIChatClient(runtime.llm)
        half = RecomputePlan(prompts, branch="resumed")
        with pytest.raises(Interrupted):
            await recompute_conversation(key, half, history=History(log), bus=bus, live=Failing(llm, 5))
        resumed = await recompute_conversation(key, half, history=History(log), bus=bus, live=llm)
        clean = await recompute_conversation(key, replace(half, branch="clean"), history=History(log), bus=bus,
                                             live=llm)
        await llm.aclose()
        for branch in ("resumed", "clean"):
            assert await log.wait_committed((await bus.head(replace(key, branch=branch))).fence, timeout=30)
        got = await log.read(replace(key, branch="resumed"))
        want = await log.read(replace(key, branch="clean"))
    assert resumed.resumed_at_turn >= 1 and clean.resumed_at_turn == 0
    assert [e.seq for e in got] == list(range(1, len(got) + 1))
    assert [(e.type, e.payload) for e in got[1:]] == [(e.type, e.payload) for e in want[1:]]


async def test_recompute_refuses_bad_requests_and_writes_nothing(runtime: RuntimeSettings, tmp_path: Path) -> None:
    key = StreamKey("replay", "refused")
    await talk_through(runtime, key, MESSAGES[:1])
    async with log_of(runtime, key) as (bus, log):
        history = History(log)
        last = await log.last_seq(key)
        with pytest.raises(RecomputeError, match="past its end"):
            await recompute_conversation(key, RecomputePlan(default_prompt_set(), from_seq=last + 2),
                                         history=history, bus=bus, live=RecordedLLM([]))
        with pytest.raises(RecomputeError, match="never writes main"):
            RecomputePlan(default_prompt_set(), branch="main")
        with pytest.raises(RecordingMiss):  # no live model: a changed request has no answer
            await RecordedLLM([]).chat(ChatRequest((ChatMessage("user", "hi"),), model="m", temperature=0.7,
                                                   max_tokens=1))
        assert [s.branches for s in await log.conversations("replay") if s.conversation == "refused"] == [("main",)]


async def test_counterfactual_recompute_regenerates_replies_and_mode_changes_the_thinking(
    runtime: RuntimeSettings, tmp_path: Path
) -> None:
    key = StreamKey("replay", "whatif")
    await talk_through(runtime, key, MESSAGES[:3])
    prompts = edited_prompts(tmp_path, "talker.md", "I answer in one short sentence.")
    async with log_of(runtime, key) as (bus, log):
        llm = OpenAIChatClient(runtime.llm)
        history = History(log)
        counterfactual = await recompute_conversation(
            key, RecomputePlan(prompts, counterfactual=True, from_seq=2), history=history, bus=bus, live=llm)
        lean = await recompute_conversation(
            key, RecomputePlan(default_prompt_set(), mode="controller_only"), history=history, bus=bus, live=llm)
        await llm.aclose()
        branches = {result.branch: replace(key, branch=result.branch) for result in (counterfactual, lean)}
        for branch in branches.values():
            assert await log.wait_committed((await bus.head(branch)).fence, timeout=30)
        recorded = await log.read(key)
        what_if = await history.events(branches[counterfactual.branch])
        lean_events = await log.read(branches[lean.branch])
    # Forked after seq 1: the first turn is inherited, the other two were answered again.
    assert counterfactual.fork_seq == 1 and what_if[:1] == recorded[:1] and what_if[1].type == "fork"
    assert counterfactual.replies is not None
    assert [r["recorded"] for r in counterfactual.replies] == [reply_of(e) for e in recorded if e.type == "turn"][1:]
    assert all(r["regenerated"] != r["recorded"] for r in counterfactual.replies)
    new_turns = [e for e in what_if[2:] if e.type == "turn"]
    assert [reply_of(e) for e in new_turns] == [r["regenerated"] for r in counterfactual.replies]
    assert all(e.causation is None and e.provenance is not None and e.provenance.prompt_set == prompts.version
               for e in new_turns)
    # controller_only: no monologue on the branch, a narrative after every turn.
    memory = ("belief", "edge", "memory_step", "recall")
    assert [e.type for e in lean_events[1:] if e.type not in memory] == ["turn", "narrative"] * 3
    assert [e.type for e in lean_events[1:] if e.type == "memory_step"] == ["memory_step"] * 3


async def test_a_changed_memory_prompt_re_runs_memory_with_recorded_vectors(
    runtime: RuntimeSettings, tmp_path: Path
) -> None:
    key = StreamKey("replay", "rememory")
    await talk_through(runtime, key, MESSAGES[:3])
    prompts = edited_prompts(tmp_path, "memory.md", "I keep only what the person says about themselves.")
    async with log_of(runtime, key) as (bus, log):
        llm = OpenAIChatClient(runtime.llm)
        embeddings_before = (await sim(runtime, "/_sim/stats"))["embedding_calls"]
        result = await recompute_conversation(key, RecomputePlan(prompts), history=History(log), bus=bus, live=llm)
        await llm.aclose()
        branch = replace(key, branch=result.branch)
        assert await log.wait_committed((await bus.head(branch)).fence, timeout=30)
        recorded, rethought = await log.read(key), (await log.read(branch))[1:]
    # Only the extraction requests changed (one per turn); the simulator reads the exchange, not
    # the prompt, so the statements are the same and every vector comes from the log.
    assert result.model_calls == 3 and result.embedding_calls == 0
    assert (await sim(runtime, "/_sim/stats"))["embedding_calls"] == embeddings_before
    beliefs = [e.payload for e in recorded if isinstance(e.payload, Belief)]
    assert [e.payload for e in rethought if isinstance(e.payload, Belief)] == beliefs and beliefs
    steps = [e for e in rethought if isinstance(e.payload, MemoryStep)]
    assert all(e.provenance is not None and e.provenance.prompt_set == prompts.version for e in steps)


async def test_the_latest_state_includes_every_acknowledged_event(runtime: RuntimeSettings) -> None:
    """The ingester commits in batches (~50 ms late at a trickle); a reader given the stream's
    heads waits for what the bus acknowledged, and one whose log lags too long gets what is committed."""
    from mirror.events.envelope import make_event
    from mirror.replay import History

    key = StreamKey("replay", "read-your-writes")
    bus = await JetStreamBus.connect(nats_of(runtime).url)
    try:
        log = LogClient(bus.nc, shard=nats_of(runtime).shard)

        async def acknowledged(k: StreamKey) -> int | None:
            return (await bus.head(k)).last_seq

        history = History(log, stream_head=acknowledged)
        head = (await bus.head(key)).with_last_seq(0)
        for seq in range(1, 4):
            [result] = await bus.append_many([(key, [make_event(key, seq, Turn(f"q{seq}", f"a{seq}"), turn=seq - 1)], head)])
            assert isinstance(result, Head), result  # the only writer: never fenced
            head = result
            state = await history.state_at(key)  # asked at once, before the ingester's linger is over
            assert state.last_seq == seq and state.turn_count == seq
        lagging = History(log, stream_head=lambda k: _never_committed(), settle_timeout_s=0.1)
        assert (await lagging.state_at(key)).last_seq == 3
    finally:
        await bus.close()


async def _never_committed() -> int:
    return 10**9


async def test_a_resumed_recompute_finishes_a_turn_whose_recall_landed_alone(
    runtime: RuntimeSettings, tmp_path: Path
) -> None:
    """A run stopped between the two publishes of a turn's append leaves a ``recall`` with no
    ``turn``; the next run appends the turn after it instead of recalling again."""
    key = StreamKey("replay", "orphan-recall")
    await talk_through(runtime, key, MESSAGES[:3])
    prompts = edited_prompts(tmp_path, "controller.md", "I keep the narrative short.")
    async with log_of(runtime, key) as (bus, log):
        llm = OpenAIChatClient(runtime.llm)
        whole = await recompute_conversation(key, RecomputePlan(prompts, branch="whole"), history=History(log),
                                             bus=bus, live=llm)
        branch = replace(key, branch=whole.branch)
        assert await log.wait_committed((await bus.head(branch)).fence, timeout=30)
        complete = await log.read(branch)
        # The same branch cut just after its last recall, as a run stopped mid-append leaves it.
        cut = max(e.seq for e in complete if isinstance(e.payload, Recall))
        assert complete[cut].type == "turn"  # (seqs start at 1: index cut is the event after the recall)
        halted = replace(key, branch="halted")
        copied = [replace(e, branch="halted") for e in complete[:cut]]
        await bus.append(halted, copied, Head(0, 0))
        assert await log.wait_committed((await bus.head(halted)).fence, timeout=30)
        resumed = await recompute_conversation(key, RecomputePlan(prompts, branch="halted"), history=History(log),
                                               bus=bus, live=llm)
        await llm.aclose()
        assert await log.wait_committed((await bus.head(halted)).fence, timeout=30)
        finished = await log.read(halted)
    assert resumed.resumed_at_turn == whole.turns - 1
    assert [(e.seq, e.type) for e in finished] == [(e.seq, e.type) for e in complete]
    assert sum(isinstance(e.payload, Recall) for e in finished) == sum(isinstance(e.payload, Recall) for e in complete)


async def test_a_resumed_recompute_finishes_a_memory_step_cut_after_its_first_belief(
    runtime: RuntimeSettings, tmp_path: Path
) -> None:
    """A run stopped between the publishes of a memory step leaves its first belief without the
    ``memory_step`` that marks the turn remembered; the next run appends the rest of that step
    instead of remembering the turn again (which would reinforce the belief that landed)."""
    from mirror.actors.clients import memory_embedder

    key = StreamKey("replay", "cut-memory")
    await talk_through(runtime, key, MESSAGES[:3])
    prompts = edited_prompts(tmp_path, "monologue.md", "I think in short sentences.")
    embedder = memory_embedder(runtime)
    async with log_of(runtime, key) as (bus, log):
        llm = OpenAIChatClient(runtime.llm)
        whole = await recompute_conversation(key, RecomputePlan(prompts, branch="whole-memory"),
                                             history=History(log), bus=bus, live=llm, embedder=embedder)
        branch = replace(key, branch=whole.branch)
        assert await log.wait_committed((await bus.head(branch)).fence, timeout=30)
        complete = await log.read(branch)
        # The same branch cut just after the first belief of a memory step, before its memory_step.
        cut = next(e.seq for e in complete if isinstance(e.payload, (Belief, Edge)))
        assert isinstance(complete[cut].payload, (Belief, Edge, MemoryStep))  # the step goes on after it
        halted = replace(key, branch="halted-memory")
        await bus.append(halted, [replace(e, branch=halted.branch) for e in complete[:cut]], Head(0, 0))
        assert await log.wait_committed((await bus.head(halted)).fence, timeout=30)
        resumed = await recompute_conversation(key, RecomputePlan(prompts, branch=halted.branch),
                                               history=History(log), bus=bus, live=llm, embedder=embedder)
        await llm.aclose()
        if embedder is not None:
            await embedder.aclose()
        assert await log.wait_committed((await bus.head(halted)).fence, timeout=30)
        finished = await log.read(halted)
    assert resumed.resumed_at_turn >= 1
    assert [(e.seq, e.type, e.turn) for e in finished] == [(e.seq, e.type, e.turn) for e in complete]
    assert [e.payload for e in finished] == [e.payload for e in complete]  # no belief reinforced by a second step


async def test_a_recompute_of_recorded_turns_alone_embeds_each_text_once(runtime: RuntimeSettings) -> None:
    """Turns recorded without thinking or memory (as ``mirror bench recompute`` seeds them): the
    branch remembers every turn and recalls from the second on, each turn's memory step beside its
    thinking and the next message embedded meanwhile. One embedding call per memory step and per
    recall with a vector, none wasted; the branch replays with zero calls."""
    from mirror.actors.clients import memory_embedder
    from mirror.events.envelope import make_event

    key = StreamKey("replay", "turns-alone")
    messages = ["I never eat peanuts: I am allergic.", "I live in Lisbon by the sea.", "Suggest a snack for the beach."]
    async with log_of(runtime) as (bus, log):
        turns = [make_event(key, seq, Turn(message, f"Noted ({seq})."), turn=seq - 1)
                 for seq, message in enumerate(messages, start=1)]
        head = await bus.append(key, turns, (await bus.head(key)).with_last_seq(0))
        assert await log.wait_committed(head.fence, timeout=30)
        llm, embedder = OpenAIChatClient(runtime.llm), memory_embedder(runtime)
        assert embedder is not None
        before = await sim(runtime, "/_sim/stats")
        try:
            result = await recompute_conversation(key, RecomputePlan(default_prompt_set()), history=History(log),
                                                  bus=bus, live=llm, embedder=embedder)
        finally:
            await llm.aclose()
            await embedder.aclose()
        after = await sim(runtime, "/_sim/stats")
        branch = replace(key, branch=result.branch)
        assert await log.wait_committed((await bus.head(branch)).fence, timeout=30)
        events = await log.read(branch)
        verify = await verify_events(branch, await History(log).state_at(branch, 1), events[1:], default_prompt_set())
    steps = [e.payload for e in events if isinstance(e.payload, MemoryStep)]
    recalls = [e.payload for e in events if isinstance(e.payload, Recall)]
    assert len(steps) == len(messages) and len(recalls) == len(messages) - 1
    assert all(recall.query_embedding for recall in recalls)  # every recall had its vector
    embedded = sum(1 for step in steps if step.candidates) + len(recalls)
    assert result.embedding_calls == embedded == after["embedding_calls"] - before["embedding_calls"]
    assert result.model_calls == after["chat_calls"] - before["chat_calls"]
    assert verify.ok and verify.model_calls == 0 and verify.embedding_calls == 0
