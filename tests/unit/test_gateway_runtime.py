"""The gateway's shared runtime without a cluster: the bound on finished recompute jobs, and how
``ask`` re-asks a passivating actor. Conversations come in through ``create_app``'s
``conversations`` port: here scripted handles whose ``turn`` answers from a script."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mirror.actors.errors import Fenced, Passivated
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.errors import BusUnavailable
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.gateway.errors import ConversationNotLive, ConversationRefencing
from mirror.gateway.runtime import ASK_ATTEMPTS, FinishedJobs, GatewayRuntime
from mirror.gateway.settings import GatewaySettings

KEY = StreamKey("acme", "talk")


def test_finished_jobs_keep_only_the_newest() -> None:
    jobs = FinishedJobs(limit=3)
    for index in range(5):
        jobs.record("acme", f"job{index}", {"job": f"job{index}", "status": "done"})
    assert len(jobs) == 3
    assert [jobs.get("acme", f"job{index}") is not None for index in range(5)] == [False, False, True, True, True]
    jobs.record("acme", "job2", {"job": "job2", "status": "failed"})  # finished again: now the newest
    jobs.record("acme", "job5", {"job": "job5", "status": "done"})
    assert jobs.get("acme", "job3") is None and jobs.get("acme", "job2") == {"job": "job2", "status": "failed"}
    assert jobs.get("globex", "job4") is None  # per tenant


def test_a_bound_below_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="max_finished_jobs"):
        GatewaySettings(RuntimeSettings(NatsInfrastructure("nats://127.0.0.1:1"), None), str(tmp_path / "t.json"),  # type: ignore[arg-type]  # no LLM: nothing here calls one
                        max_finished_jobs=0)


class ActorCallFailed(Exception):
    """What a Ray actor call raises: the actor's own error as ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class ScriptedHandle:
    """A conversation handle whose ``turn`` answers with the next outcome of its script."""

    def __init__(self, script: ScriptedActors, key: StreamKey) -> None:
        self.script = script
        self.key = key
        self.forgotten = False

    async def turn(self, message: str, *, sync: bool = False, mode: str | None = None,
                   memory: bool | None = None) -> Any:
        outcome = self.script.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def node_id(self) -> str | None:
        return None  # in this process: nothing for the node watch

    def forget(self) -> None:
        self.forgotten = True
        self.script.forgotten.append(self.key)


class ScriptedActors:
    """``conversations(key)``: every handle's ``turn`` answers with the next outcome of one script."""

    def __init__(self, *outcomes: Any) -> None:
        self.outcomes = list(outcomes)
        self.handles_made = 0
        self.forgotten: list[StreamKey] = []

    def __call__(self, key: StreamKey) -> Any:
        self.handles_made += 1
        return ScriptedHandle(self, key)


def turn(message: str) -> Callable[[Any], Awaitable[Any]]:
    """What a route asks of a conversation: a turn."""
    return lambda conversation: conversation.turn(TurnRequest(message))


async def broker_up() -> None:
    """The bus check of a gateway whose broker is up (there is none here: nothing is appended)."""


def runtime(tmp_path: Path, actors: ScriptedActors, bus_ready: Callable[[], Awaitable[object]] = broker_up) -> GatewayRuntime:
    settings = GatewaySettings(RuntimeSettings(NatsInfrastructure("nats://127.0.0.1:1"), None), str(tmp_path / "t.json"))  # type: ignore[arg-type]  # no LLM: nothing here calls one
    return GatewayRuntime.build(settings, actors, bus_ready=bus_ready)


def test_a_broker_that_is_down_fails_the_call_before_any_actor_is_asked(tmp_path: Path) -> None:
    async def broker_down() -> None:
        raise BusUnavailable("127.0.0.1:4222", 1.0)

    actors = ScriptedActors({"reply": "never"})
    with pytest.raises(BusUnavailable, match="NATS at 127.0.0.1:4222"):
        asyncio.run(runtime(tmp_path, actors, broker_down).ask(KEY, turn("hello")))
    assert actors.handles_made == 0


def test_a_bus_error_from_inside_the_actor_reaches_the_gateway_as_itself(tmp_path: Path) -> None:
    """So the app's handler answers it 503 with Retry-After, as if the gateway had seen it."""
    down = BusUnavailable("127.0.0.1:4222", 1.0)
    actors = ScriptedActors(ActorCallFailed(down))
    with pytest.raises(BusUnavailable) as raised:
        asyncio.run(runtime(tmp_path, actors).ask(KEY, turn("hello")))
    assert raised.value is down


def test_ask_re_asks_a_passivating_actor_through_a_fresh_handle(tmp_path: Path) -> None:
    actors = ScriptedActors(ActorCallFailed(Passivated(KEY)), ActorCallFailed(Passivated(KEY)), {"reply": "hi"})
    assert asyncio.run(runtime(tmp_path, actors).ask(KEY, turn("hello"))) == {"reply": "hi"}
    assert actors.handles_made == 3 and not actors.outcomes


def test_ask_gives_up_after_its_attempts_with_a_503(tmp_path: Path) -> None:
    """Still passivating (or its process unavailable: a machine cut off) after every attempt: a
    dependency that is down (answered 503 with Retry-After: ``test_error_answers.py``), not an internal error."""
    errors = [ActorCallFailed(Passivated(KEY)) for _ in range(ASK_ATTEMPTS + 1)]
    actors = ScriptedActors(*errors)
    with pytest.raises(ConversationNotLive):
        asyncio.run(runtime(tmp_path, actors).ask(KEY, turn("hello")))
    assert actors.handles_made == ASK_ATTEMPTS and len(actors.outcomes) == 1


def test_a_fenced_actor_is_asked_again_and_answered_by_its_next_incarnation(tmp_path: Path) -> None:
    """Fenced: another writer moved on, or the stream went backwards under it; the next
    incarnation rebuilds from the log and re-fences, and nothing of the refused call landed."""
    fenced = ScriptedActors(ActorCallFailed(Fenced(KEY, "another writer appended")), {"reply": "again"})
    assert asyncio.run(runtime(tmp_path, fenced).ask(KEY, turn("hello"))) == {"reply": "again"}
    assert fenced.handles_made == 2


def test_a_conversation_fenced_at_every_attempt_is_a_503_with_retry_after(tmp_path: Path) -> None:
    fenced = ScriptedActors(*[ActorCallFailed(Fenced(KEY, "stream ends at seq 9")) for _ in range(ASK_ATTEMPTS)])
    with pytest.raises(ConversationRefencing) as raised:
        asyncio.run(runtime(tmp_path, fenced).ask(KEY, turn("hello")))
    assert "re-fenced" in str(raised.value) and fenced.handles_made == ASK_ATTEMPTS


def test_other_errors_are_raised_at_once(tmp_path: Path) -> None:
    broken = ScriptedActors(RuntimeError("boom"), {"reply": "never"})
    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(runtime(tmp_path, broken).ask(KEY, turn("hello")))
    assert broken.handles_made == 1


def test_a_handle_is_reused_until_a_call_through_it_fails(tmp_path: Path) -> None:
    actors = ScriptedActors({"reply": "1"}, {"reply": "2"})
    gateway = runtime(tmp_path, actors)

    async def twice() -> list[Any]:
        return [await gateway.ask(KEY, turn("a")), await gateway.ask(KEY, turn("b"))]

    assert asyncio.run(twice()) == [{"reply": "1"}, {"reply": "2"}] and actors.handles_made == 1


@pytest.mark.parametrize("gone", ["unschedulable", "died", "other"])
def test_a_host_that_is_gone_for_good_is_forgotten_and_asked_again(tmp_path: Path, gone: str) -> None:
    """A host pinned to a dead node is unschedulable (Ray destroys it); one killed for good has
    died: either way the placement drops its handle and the call is asked again, which makes the
    host anew. Any other error reaches the caller, and the host is kept."""
    from ray.exceptions import ActorDiedError, ActorUnschedulableError

    error = {"unschedulable": ActorUnschedulableError("its node is gone"), "died": ActorDiedError(),
             "other": RuntimeError("boom")}[gone]
    actors = ScriptedActors(error, {"reply": "hi"})
    ask = runtime(tmp_path, actors).ask(KEY, turn("hello"))
    if gone == "other":
        with pytest.raises(RuntimeError, match="boom"):
            asyncio.run(ask)
        assert actors.forgotten == []
    else:
        assert asyncio.run(ask) == {"reply": "hi"}
        assert actors.forgotten == [KEY] and actors.handles_made == 2
