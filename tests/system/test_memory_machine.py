"""Model-based: random statements, restatements and contradictions through the real actor.

A Hypothesis state machine talks to a live :class:`Conversation` (real NATS, a real ingester
process, the simulator over HTTP) with memory on, and keeps a plain model: the facts said so far
and their negations. After every step: no belief ever disappears, a restatement never makes a
second belief, and every ``contradict`` pair has exactly one review item. At the end the log
replays through ``replay verify`` with no divergence and zero model and zero embedding calls
(counted on the simulator).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import TurnRequest
from mirror.events.nats.jetstream import JetStreamBus
from mirror.events.nats.log_service import LogClient
from mirror.events.nats.server import EmbeddedNats
from mirror.events.payloads import Belief
from mirror.projections.conversation import fold
from mirror.projections.state import initial_state
from mirror.replay.verify import verify_events
from tests.support.machines import ConversationMachine
from tests.support.stack import conversation_runtime, nats_of

THINGS = ("tea", "peanuts", "rain", "the sea")
"""Few enough that a statement's opposite is always among the 5 nearest beliefs the check asks
about (gate.CONTRADICTION_NEIGHBOURS): same-polarity siblings are nearer than the opposite."""


@pytest.fixture(scope="module")
def runtime(nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RuntimeSettings]:
    directory = tmp_path_factory.mktemp("memory-machine")
    with conversation_runtime(nats_server.url, directory, shard="memorymachine", mode="baseline") as settings:
        yield settings


def statement(thing: str, negated: bool) -> str:
    return f"I do not like {thing}." if negated else f"I like {thing}."


def test_memory_keeps_every_belief_and_one_review_per_contradiction(runtime: RuntimeSettings) -> None:
    sim_admin = runtime.llm.base_url.removesuffix("/v1")

    class Remembering(ConversationMachine):
        live_runtime = runtime
        tenant = "memory-machine"

        def __init__(self) -> None:
            super().__init__()
            self.said: list[tuple[str, bool]] = []
            self.seen_beliefs: set[str] = set()

        def say(self, thing: str, negated: bool) -> None:
            self.run(self.conversation.turn(TurnRequest(statement(thing, negated), sync=True)))
            assert self.run(self.conversation.wait_idle(60))
            self.said.append((thing, negated))

        @rule(thing=st.sampled_from(THINGS))
        def state_a_fact(self, thing: str) -> None:
            self.say(thing, False)

        @precondition(lambda self: bool(self.said))
        @rule(data=st.data())
        def restate(self, data: st.DataObject) -> None:
            self.say(*data.draw(st.sampled_from(self.said)))

        @precondition(lambda self: bool(self.said))
        @rule(data=st.data())
        def contradict(self, data: st.DataObject) -> None:
            thing, negated = data.draw(st.sampled_from(self.said))
            self.say(thing, not negated)

        @invariant()
        def memory_is_current_and_nothing_is_lost(self) -> None:
            state = self.conversation.state
            if state.turn_count:
                assert state.memory_turn == state.turn_count - 1
            assert self.seen_beliefs <= set(state.beliefs)
            self.seen_beliefs = set(state.beliefs)
            statements = [belief.statement for belief in state.beliefs.values()]
            assert len(statements) == len(set(statements)), "a restatement made a second belief"
            assert set(statements) == {statement(thing, negated) for thing, negated in self.said}

        @invariant()
        def each_contradiction_has_one_review(self) -> None:
            state = self.conversation.state
            for (new, opposed), item in state.review_items.items():
                assert (item.belief_id, item.opposed_id) == (new, opposed)
                assert {state.beliefs[new].statement, state.beliefs[opposed].statement} in [
                    {statement(thing, False), statement(thing, True)} for thing in THINGS
                ]
            # ... and a fact said both ways was found contradictory once, whichever came first
            both = {thing for thing, negated in self.said if (thing, not negated) in self.said}
            reviewed = [state.beliefs[item.belief_id].statement.removesuffix(".").split("like ", 1)[1]
                        for item in state.review_items.values()]
            assert sorted(reviewed) == sorted(both)

        def teardown(self) -> None:
            try:
                self.run(self.conversation.stop())
                self.run(self.check())
            finally:
                self.loop.close()

        async def check(self) -> None:
            bus = await JetStreamBus.connect(nats_of(runtime).url)
            try:
                log = LogClient(bus.nc, shard=nats_of(runtime).shard)
                assert await log.wait_committed((await bus.head(self.key)).fence, timeout=30)
                events = await log.read(self.key)
            finally:
                await bus.close()
            state = fold(events) if events else initial_state(self.key)
            pairs = [(e.payload.belief_id, opposed) for e in events
                     if isinstance(e.payload, Belief) and e.payload.operation == "contradict"
                     for opposed in e.payload.related]
            assert len(pairs) == len(set(pairs)) == len(state.review_items)  # one item per CONTRADICTS pair
            assert set(pairs) == set(state.review_items)
            before = httpx.get(f"{sim_admin}/_sim/stats").json()
            report = await verify_events(self.key, initial_state(self.key), events, default_prompt_set())
            after = httpx.get(f"{sim_admin}/_sim/stats").json()
            assert report.ok, report.as_dict()["divergences"][:2]
            assert report.model_calls == 0 and report.embedding_calls == 0
            assert (after["chat_calls"], after["embedding_calls"]) == (before["chat_calls"], before["embedding_calls"])

    run_state_machine_as_test(
        Remembering, settings=settings(max_examples=12, stateful_step_count=8, deadline=None)
    )
