"""What a client sees when something fails: every kind of error, on the native routes and the
OpenAI-compatible ones, answered with the status, the ``Retry-After`` and the body pinned in
``error_answers.json`` (recorded from the gateway before its errors were answered from one table,
:mod:`mirror.gateway.error_table`, so that refactor is shown to change nothing a client sees).

The app is the real one (``create_app``) over the in-memory bus and log, with one conversation
that has a turn; the conversation's process is a scripted handle raising what a Ray actor call
raises (the actor's own error as ``cause``, after a pickle round trip). ``MIRROR_PIN_ERRORS=1``
records the file again (then read the diff: it must be empty unless an answer is meant to change).
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import mirror.cognition
from mirror.actors.errors import Fenced, Passivated, SettingConflict
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.errors import (
    AdmissionRefused,
    LLMBadResponse,
    LLMRateLimited,
    LLMUnavailable,
    ReflectionFailed,
    ReflectionRefused,
)
from mirror.cognition.llm import ChatRequest, ChatResponse
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import default_prompt_set
from mirror.cognition.turn import no_recall
from mirror.cognition.writer import ConversationWriter
from mirror.events.bus import Head
from mirror.events.errors import BusUnavailable, LogUnavailable
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.events.payloads import Provenance
from mirror.gateway.app import create_app
from mirror.gateway.settings import GatewaySettings
from mirror.gateway.tenants import TenantRegistry
from mirror.projections.state import initial_state

PINNED = Path(__file__).with_name("error_answers.json")
MODEL_URL = "http://127.0.0.1:9/v1"
KEY = StreamKey("acme", "talk")
HEADERS = ("retry-after", "www-authenticate", "content-type")


class ActorCallFailed(Exception):
    """What a Ray actor call raises: the actor's own error as ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class Hangs(Exception):
    """Scripted: the call never answers (the gateway's ``actor_timeout_s`` ends it)."""


class FailingConversation:
    """A conversation handle whose every call fails with ``error``, carried as Ray carries it."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def _fail(self, *_: Any, **__: Any) -> Any:
        if isinstance(self.error, Hangs):
            await asyncio.Event().wait()
        raise ActorCallFailed(pickle.loads(pickle.dumps(self.error)))

    turn = reflect = summary = state_bytes = choose = _fail

    async def node_id(self) -> str | None:
        return None  # in this process: nothing for the node watch

    def forget(self) -> None:
        pass


class ScriptedModel:
    """The LLM port in process, for the one turn the conversation has."""

    async def chat(self, request: ChatRequest) -> ChatResponse:
        content = "I answer."
        return ChatResponse(content, Provenance(request.model, request.prompt_set, request.fingerprint(),
                                                {"temperature": float(request.temperature)}, response=content))

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise AssertionError("this conversation keeps no memory: nothing is embedded")


async def _one_turn(infrastructure: InMemoryInfrastructure) -> None:
    connections = await infrastructure.connect(name="test")
    writer = ConversationWriter(connections.bus, KEY, initial_state(KEY), Head(0, 0))
    await writer.take_turn("hello", llm=ScriptedModel(), prompts=default_prompt_set(),
                           config=MirrorConfig(model="m", memory=False), recaller=no_recall)


def _gateway(tmp_path: Path, error: BaseException) -> tuple[FastAPI, dict[str, str]]:
    tenants = tmp_path / "tenants.json"
    token = TenantRegistry(tenants).add("acme")
    infrastructure = InMemoryInfrastructure()
    asyncio.run(_one_turn(infrastructure))
    settings = GatewaySettings(RuntimeSettings(infrastructure, LLMSettings(base_url=MODEL_URL, model="m")),
                               str(tenants), actor_timeout_s=0.2)
    app = create_app(settings, lambda key: FailingConversation(error))  # type: ignore[arg-type,return-value]  # a scripted handle
    return app, {"Authorization": f"Bearer {token}"}


def _chat(**extra: Any) -> dict[str, Any]:
    return {"model": "mirror", "messages": [{"role": "user", "content": "hello"}], "user": "talk", **extra}


NO_ERROR = RuntimeError("not raised")
WREN = json.loads((Path(mirror.cognition.__file__).parent / "persona" / "examples" / "wren.json").read_text())
TURN = ("POST", "/v1/conversations/talk/turns", {"message": "hello"})
CHAT = ("POST", "/v1/chat/completions", _chat())
CONFLICT = SettingConflict(KEY, "mode", "full", "baseline")
CASES: dict[str, tuple[tuple[str, str, Any], BaseException, bool]] = {
    # name: (request, what the conversation raises, whether to send the bearer token)
    "no token": (("GET", "/v1/conversations", None), NO_ERROR, False),
    "bad conversation id": (("GET", "/v1/conversations/bad%20id", None), NO_ERROR, True),
    "unknown conversation": (("GET", "/v1/conversations/nope/state", None), NO_ERROR, True),
    "body that does not parse": (("POST", "/v1/conversations/talk/turns", {"mess": 1}), NO_ERROR, True),
    "empty message": (("POST", "/v1/conversations/talk/turns", {"message": " "}), NO_ERROR, True),
    "state past the end": (("GET", "/v1/conversations/talk/state?at=99", None), NO_ERROR, True),
    "state of a branch with no events": (("GET", "/v1/conversations/talk/state?branch=ghost", None), NO_ERROR, True),
    "state at a bad time": (("GET", "/v1/conversations/talk/state?at_time=soon", None), NO_ERROR, True),
    "diff past the end": (("GET", "/v1/conversations/talk/diff?to=99", None), NO_ERROR, True),
    "why of a belief never seen": (("GET", "/v1/conversations/talk/why?belief=b1", None), NO_ERROR, True),
    "why past the end": (("GET", "/v1/conversations/talk/why?seq=99", None), NO_ERROR, True),
    "beliefs past the end": (("GET", "/v1/conversations/talk/beliefs?at=99", None), NO_ERROR, True),
    "portrait past the end": (("GET", "/v1/conversations/talk/portrait?at=99", None), NO_ERROR, True),
    "reflections past the end": (("GET", "/v1/conversations/talk/reflections?at=99", None), NO_ERROR, True),
    "a reflection not made": (("GET", "/v1/conversations/talk/reflections/3", None), NO_ERROR, True),
    "persona state past the end": (("GET", "/v1/conversations/talk/persona?at=99", None), NO_ERROR, True),
    "persona not stored": (("GET", "/v1/personas/ghost", None), NO_ERROR, True),
    "persona with a bad name": (("GET", "/v1/personas/bad%20name", None), NO_ERROR, True),
    "persona that does not parse": (("POST", "/v1/personas", {"name": 3}), NO_ERROR, True),
    "persona card inline that does not parse": (
        ("POST", "/v1/conversations/talk", {"mind": "persona", "persona": {"x": 1}}), NO_ERROR, True),
    "mind choice that is not one": (("POST", "/v1/conversations/talk", {"mind": "mirror", "persona": WREN}),
                                    NO_ERROR, True),
    "setting conflict": (TURN, CONFLICT, True),
    "fenced at every attempt": (TURN, Fenced(KEY, "stream ends at seq 9"), True),
    "passivating at every attempt": (TURN, Passivated(KEY), True),
    "no answer in time": (TURN, Hangs(), True),
    "broker down inside": (TURN, BusUnavailable("127.0.0.1:4222", 1.0), True),
    "log down inside": (TURN, LogUnavailable("the ingester of shard 'memory' is not answering"), True),
    "model unreachable": (TURN, LLMUnavailable(MODEL_URL, 2, "ConnectError: refused").during("talker"), True),
    "model rate limited": (TURN, LLMRateLimited(MODEL_URL, 5, "slow down", retry_after_s=7.5).during("talker"), True),
    "model answered nonsense": (TURN, LLMBadResponse("body is not JSON", base_url=MODEL_URL).during("talker"), True),
    "unexpected": (TURN, KeyError("lost"), True),
    "fair share of the tenant used up": (TURN, AdmissionRefused("acme", "tenant", 2, 16, 16).during("talker"), True),
    "stack overloaded": (TURN, AdmissionRefused("acme", "stack", 1, 16, 16).during("talker"), True),
    "reflection in the cooldown": (("POST", "/v1/conversations/talk/reflect", None),
                                   ReflectionRefused("acme/talk/main", "cooldown", "4 more turn(s) first", turns_left=4),
                                   True),
    "reflection off": (("POST", "/v1/conversations/talk/reflect", None),
                       ReflectionRefused("acme/talk/main", "off", "reflection is off"), True),
    "reflection failed": (("POST", "/v1/conversations/talk/reflect", None),
                          ReflectionFailed("acme/talk/main", 7, "LLMTimeout", "no answer"), True),
    "openai no token": (CHAT, NO_ERROR, False),
    "openai body that does not parse": (("POST", "/v1/chat/completions", {"model": "mirror"}), NO_ERROR, True),
    "openai no conversation": (("POST", "/v1/chat/completions", _chat(user=None)), NO_ERROR, True),
    "openai bad conversation id": (("POST", "/v1/chat/completions", _chat(user="bad id")), NO_ERROR, True),
    "openai unknown model": (("POST", "/v1/chat/completions", _chat(model="gpt-4")), NO_ERROR, True),
    "openai persona not stored": (("POST", "/v1/chat/completions", _chat(model="persona:ghost")), NO_ERROR, True),
    "openai persona with a bad name": (("POST", "/v1/chat/completions", _chat(model="persona:bad name")), NO_ERROR,
                                       True),
    "openai unsupported parameter": (("POST", "/v1/chat/completions", _chat(n=2)), NO_ERROR, True),
    "openai bad conversation id in the path": (("POST", "/c/bad%20id/v1/chat/completions", _chat(user=None)), NO_ERROR,
                                               True),
    "openai bad conversation id in metadata": (
        ("POST", "/v1/chat/completions", _chat(metadata={"conversation_id": "a/b"})), NO_ERROR, True),
    "openai setting conflict": (CHAT, CONFLICT, True),
    "openai fenced at every attempt": (CHAT, Fenced(KEY, "stream ends at seq 9"), True),
    "openai passivating at every attempt": (CHAT, Passivated(KEY), True),
    "openai no answer in time": (CHAT, Hangs(), True),
    "openai broker down inside": (CHAT, BusUnavailable("127.0.0.1:4222", 1.0), True),
    "openai model unreachable": (CHAT, LLMUnavailable(MODEL_URL, 2, "ConnectError: refused").during("talker"), True),
    "openai model rate limited": (CHAT, LLMRateLimited(MODEL_URL, 5, "slow", retry_after_s=7.5).during("talker"), True),
    "openai model answered nonsense": (CHAT, LLMBadResponse("not JSON", base_url=MODEL_URL).during("talker"), True),
    "openai unexpected": (CHAT, KeyError("lost"), True),
    "openai fair share of the tenant used up": (CHAT, AdmissionRefused("acme", "tenant", 2, 16, 16).during("talker"),
                                                True),
    "openai stack overloaded": (CHAT, AdmissionRefused("acme", "stack", 1, 16, 16).during("talker"), True),
}


def answer(tmp_path: Path, name: str) -> dict[str, Any]:
    (method, path, body), error, with_token = CASES[name]
    app, headers = _gateway(tmp_path, error)

    async def call() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.request(method, path, json=body, headers=headers if with_token else {})

    response = asyncio.run(call())
    return {"status": response.status_code, "headers": {name: response.headers[name] for name in HEADERS
                                                         if name in response.headers},
            "body": response.json()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_kind_of_error_is_answered_as_pinned(tmp_path: Path, name: str) -> None:
    got = answer(tmp_path, name)
    if os.environ.get("MIRROR_PIN_ERRORS") == "1":
        pinned = json.loads(PINNED.read_text()) if PINNED.exists() else {}
        pinned[name] = got
        PINNED.write_text(json.dumps(dict(sorted(pinned.items())), indent=1, ensure_ascii=False) + "\n")
    assert got == json.loads(PINNED.read_text())[name]


def test_every_pinned_answer_has_its_case() -> None:
    assert sorted(json.loads(PINNED.read_text())) == sorted(CASES)


def test_a_subclass_takes_its_nearest_row_in_its_mro() -> None:
    """``LLMTimeout`` has no row of its own: ``LLMError``'s answers it (503 with Retry-After, as
    ``LLMUnavailable``); an error of no row's class is the ``Exception`` row's 500."""
    from mirror.cognition.errors import LLMError, LLMTimeout
    from mirror.gateway.error_table import TABLE, answer, rule_for

    timeout = LLMTimeout(MODEL_URL, 2, 60.0)
    assert rule_for(timeout) is TABLE[LLMError]
    assert (answer(timeout).status, answer(timeout).headers) == (503, {"Retry-After": "2"})
    assert answer(ZeroDivisionError("x")).status == 500 and answer(ZeroDivisionError("x")).unexpected


def test_the_memory_api_s_embedder_failures_keep_their_answers() -> None:
    """The embedder's own errors (no app-level pin: they need beliefs with vectors): as the memory route answered them."""
    from mirror.gateway.error_table import answer
    from mirror.gateway.errors import EmbedderFailed, EmbedderUnavailable, QueryDoesNotFit

    down = answer(EmbedderUnavailable("e5", LLMUnavailable(MODEL_URL, 1, "ConnectError: refused")))
    assert (down.status, dict(down.headers)) == (503, {"Retry-After": "5"})
    assert down.detail.startswith(f"the embedder (e5) is unavailable: LLM at {MODEL_URL} unavailable")
    failed = answer(EmbedderFailed("e5", LLMBadResponse("no data", base_url=MODEL_URL)))
    assert (failed.status, dict(failed.headers), failed.detail.startswith("the embedder (e5) gave no usable vector: ")) == (
        502, {}, True)
    mismatch = answer(QueryDoesNotFit("e5", "3 dimensions, not 4"))
    assert (mismatch.status, mismatch.detail) == (
        409, "the query's embedding does not fit this conversation's beliefs (embedder model 'e5'): 3 dimensions, not 4")
