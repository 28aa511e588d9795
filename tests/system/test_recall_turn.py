"""Recall on the turn path, live: real NATS, a real ingester process, the simulator over HTTP.

A fact stated early becomes a belief (the memory stage), and a later turn recalls it: the
``recall`` event lands with the ``turn`` in one append and names the belief, the Talker's
request (rebuilt, and checked against the fingerprint the turn recorded) holds the fact, and
the recall counts in state grow. Replay re-runs every recall with zero model and embedding
calls; an edited recall is a divergence; a dead embedder does not stop a turn; and the memory
API answers what the Talker got.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.actors.conversation import Conversation
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.embeddings import OpenAIEmbedder
from mirror.cognition.memory.turn import TURN_RECALL, replay_recall
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.cognition.pipeline import talker_request
from mirror.cognition.prompts import DEFAULT_PROMPT_SETS, default_prompt_set, load_prompt_set
from mirror.cognition.turn import TurnRequest
from mirror.events.envelope import Event
from mirror.events.ids import StreamKey
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Recall, ThinkerFailed, Turn
from mirror.processes import free_port
from mirror.projections.conversation import fold
from mirror.projections.state import ConversationState, initial_state
from mirror.replay import History, RecomputePlan, recompute_conversation
from mirror.replay.verify import config_from, verify_events
from tests.support.stack import conversation_runtime, nats_of
from tests.system.test_conversation import log_events, sim_stats

FACT = "I have a severe peanut allergy."
LATER = "Could you suggest a peanut snack for my hike?"


@pytest.fixture
def runtime(nats_server: EmbeddedNats, tmp_path: Path) -> Iterator[RuntimeSettings]:
    with conversation_runtime(nats_server.url, tmp_path, shard="recall", latency="fixed:5") as settings:
        yield settings


async def converse(runtime: RuntimeSettings, key: StreamKey, messages: list[str],
                   conversation: Conversation | None = None) -> tuple[ConversationState, list[Event]]:
    """Each message as a sync turn (the previous one thought through first), then the log."""
    conversation = conversation or await Conversation(key, runtime).start()
    try:
        for message in messages:
            await conversation.turn(TurnRequest(message, sync=True))
        assert await conversation.wait_idle(30)
        state = conversation.state
    finally:
        await conversation.stop()
    return state, await log_events(runtime, key)


def recalled(event: Event) -> Recall:
    assert isinstance(event.payload, Recall)
    return event.payload


def state_before(events: list[Event], seq: int, key: StreamKey) -> ConversationState:
    return fold([event for event in events if event.seq < seq], initial_state(key))


async def test_a_fact_stated_early_is_recalled_later_and_replayed_with_no_calls(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "recalls")
    state, events = await converse(runtime, key, [FACT, "What a lovely morning it is.", LATER])
    assert fold(events) == state
    (belief,) = [b for b in state.beliefs.values() if b.statement == FACT]
    recalls = [event for event in events if isinstance(event.payload, Recall)]
    assert recalls, "no turn recalled anything"
    # Every recall lands right before its turn, with the same timestamp (the recall's `now`).
    by_seq = {event.seq: event for event in events}
    for event in recalls:
        turn = by_seq[event.seq + 1]
        assert isinstance(turn.payload, Turn) and turn.payload.user_message == recalled(event).query
        assert turn.timestamp == event.timestamp and recalled(event).query_embedding
    last = recalls[-1]
    assert recalled(last).query == LATER and belief.belief_id in recalled(last).belief_ids
    # Recall counts live in state: one per recall naming the belief (and the stage before).
    named = sum(belief.belief_id in recalled(event).belief_ids for event in recalls)
    assert named >= 2 and state.beliefs[belief.belief_id].recall_count == named
    # The Talker's request held the fact: rebuilt with the replayed block, it has the
    # fingerprint the turn recorded; without the block it would not.
    turn = by_seq[last.seq + 1]
    basis = state_before(events, last.seq, key)
    block = replay_recall(basis, recalled(last), last.timestamp).block
    assert FACT in block
    assert isinstance(turn.payload, Turn)
    config = config_from(turn.provenance, turn.payload.mode, talker=True)
    prompts = default_prompt_set()
    request = talker_request(state_before(events, turn.seq, key), LATER, prompts, config, block)
    assert turn.provenance is not None and request.fingerprint() == turn.provenance.request_fingerprint
    assert FACT in request.messages[0].content
    bare = talker_request(state_before(events, turn.seq, key), LATER, prompts, config)
    assert bare.fingerprint() != turn.provenance.request_fingerprint
    # Replay: every recall re-run from its recorded vector, no model and no embedding call.
    before = sim_stats(runtime)
    report = await verify_events(key, initial_state(key), events, prompts)
    after = sim_stats(runtime)
    assert report.ok, report.as_dict()
    assert report.model_calls == 0 and report.embedding_calls == 0
    assert (after["chat_calls"], after["embedding_calls"]) == (before["chat_calls"], before["embedding_calls"])


async def test_an_edited_recall_is_a_divergence(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "edited")
    _, events = await converse(runtime, key, [FACT, LATER])
    (recall,) = [event for event in events if isinstance(event.payload, Recall)]
    assert recalled(recall).belief_ids
    edited = replace(recall, payload=replace(recalled(recall), belief_ids=()))
    report = await verify_events(key, initial_state(key), [edited if e is recall else e for e in events],
                                 default_prompt_set())
    assert [(d.seq, d.reason) for d in report.divergences] == [(recall.seq, "recall differs in belief_ids")]
    assert report.divergences[0].recorded["belief_ids"] == []
    assert report.model_calls == 0 and report.embedding_calls == 0


async def test_a_dead_embedder_still_answers_and_records_a_keyword_only_recall(runtime: RuntimeSettings) -> None:
    key = StreamKey("acme", "no-embedder")
    await converse(runtime, key, [FACT])
    conversation = await Conversation(key, runtime).start()
    dead = LLMSettings(base_url=f"http://127.0.0.1:{free_port()}/v1", model="text-embedding-3-small",
                       max_retries=0, timeout_s=1.0)
    assert conversation.embedder is not None
    await conversation.embedder.aclose()
    conversation.embedder = OpenAIEmbedder(dead)  # nothing listens there: every call fails
    answered = await conversation.turn(TurnRequest(LATER))
    assert answered.reply and answered.recall_seq == answered.seq - 1
    _, events = await converse(runtime, key, [], conversation)
    recall = next(event for event in events if event.seq == answered.recall_seq)
    assert isinstance(recall.payload, Recall)
    # Recorded as asked-and-failed: the model named, no vector, no fingerprint; the message
    # shares "peanut" with the fact, so the keyword retriever still found it.
    assert recalled(recall).query_embedding == b"" and recalled(recall).query_fingerprint == ""
    assert recalled(recall).embedding_model == "text-embedding-3-small"
    assert recalled(recall).belief_ids
    report = await verify_events(key, initial_state(key), events, default_prompt_set())
    # The memory stage after that turn failed on the same embedder; replay fails it again as recorded.
    assert any(isinstance(e.payload, ThinkerFailed) and e.payload.stage == "memory" for e in events)
    assert report.ok, report.as_dict()
    assert report.model_calls == 0 and report.embedding_calls == 0


async def test_the_memory_api_answers_what_the_talker_recalled(runtime: RuntimeSettings, tmp_path: Path) -> None:
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    key = StreamKey("acme", "api-recall")
    _, events = await converse(runtime, key, [FACT, "I also like long hikes in the hills.", LATER])
    recall = [event for event in events if isinstance(event.payload, Recall)][-1]
    token = TenantRegistry(tmp_path / "tenants.json").add("acme")
    settings = GatewaySettings(runtime=runtime, tenants_file=str(tmp_path / "tenants.json"))
    with GatewayServer(create_app(settings)) as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, headers={"Authorization": f"Bearer {token}"}) as client:
            response = await client.get(f"/v1/conversations/{key.conversation}/memory", params={
                "query": recalled(recall).query, "at": recall.seq - 1, "now": repr(recall.timestamp)})
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    assert answer["limit"] == TURN_RECALL.limit
    assert [item["belief_id"] for item in answer["items"]] == list(recalled(recall).belief_ids)
    assert [review["review_id"] for review in answer["reviews"]] == list(recalled(recall).review_ids)
    assert [[e["src"], e["relation"], e["dst"]] for e in answer["edges"]] == [list(e) for e in recalled(recall).edges]
    assert answer["query_fingerprint"] == recalled(recall).query_fingerprint
    basis = state_before(events, recall.seq, key)
    assert answer["rendered"] == replay_recall(basis, recalled(recall), recall.timestamp).block != ""


async def test_recompute_recalls_on_the_branch_and_only_counterfactual_reasks_the_talker(
    runtime: RuntimeSettings, tmp_path: Path,
) -> None:
    key = StreamKey("acme", "recompute-recall")
    _, events = await converse(runtime, key, [FACT, LATER])
    (recall,) = [event for event in events if isinstance(event.payload, Recall)]
    directory = tmp_path / "prompts"
    shutil.copytree(DEFAULT_PROMPT_SETS / "default", directory)
    memory_section = directory / "talker_memory.md"
    memory_section.write_text(memory_section.read_text() + "\nI mention a remembered fact only when it matters.\n")
    prompts = load_prompt_set(directory)  # only the Talker's memory section changed
    bus = await JetStreamBus.connect(nats_of(runtime).url)
    log = LogClient(bus.nc, shard=nats_of(runtime).shard)
    llm = OpenAIChatClient(runtime.llm)
    try:
        kept = await recompute_conversation(key, RecomputePlan(prompts), history=History(log), bus=bus, live=llm)
        what_if = await recompute_conversation(key, RecomputePlan(prompts, counterfactual=True), history=History(log),
                                               bus=bus, live=llm)
        kept_branch = replace(key, branch=kept.branch)
        assert await log.wait_committed((await bus.head(kept_branch)).fence, timeout=30)
        branch_events = await log.read(kept_branch)
    finally:
        await llm.aclose()
        await bus.close()
    # Kept replies: the branch recalls what main recalled (same beliefs, the vector from the
    # log), and nothing is asked: the Talker is not, and no other prompt changed.
    (branch_recall,) = [event for event in branch_events if isinstance(event.payload, Recall)]
    assert recalled(branch_recall) == recalled(recall)
    assert kept.model_calls == 0 and kept.embedding_calls == 0
    # Counterfactual: the first turn recalled nothing (its request is unchanged: the recorded
    # answer), the second's block went through the changed section: asked again.
    assert what_if.replies is not None and what_if.embedding_calls == 0
    first, second = what_if.replies
    assert first["regenerated"] == first["recorded"]
    assert second["regenerated"] != second["recorded"] and what_if.model_calls >= 1
