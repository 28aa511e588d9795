"""A model that is down or failing, in process: its errors cross Ray with their fields, the
client gives up soon on a server that is not there, and the gateway answers a JSON 502 or 503
naming the model's URL and the stage (never a bare 500), with one log line for whoever runs it.

The conversation behind the gateway is a scripted handle (as in ``test_gateway_runtime.py``),
raising what a Ray actor call raises: the actor's own error as ``cause``, after a pickle round
trip, as Ray carries it. Over real processes (``mirror up``): ``tests/system/test_up_failures.py``.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.errors import (
    LLMBadResponse,
    LLMError,
    LLMRateLimited,
    LLMRequestRejected,
    LLMTimeout,
    LLMUnavailable,
    StructuredOutputError,
    UnknownAnalyzer,
)
from mirror.cognition.llm import ChatMessage, ChatRequest
from mirror.cognition.openai_client import LLMSettings, OpenAIChatClient
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.gateway.app import create_app
from mirror.gateway.error_table import model_failure_status
from mirror.gateway.settings import GatewaySettings
from mirror.gateway.tenants import TenantRegistry
from mirror.processes import free_port
from mirror.stack.log_relay import LogRelay
from mirror.stack.model_check import model_server_problem

MODEL_URL = "http://127.0.0.1:9/v1"
ERRORS: list[LLMError | UnknownAnalyzer] = [
    LLMUnavailable(MODEL_URL, 2, "ConnectError: refused"),
    LLMUnavailable(MODEL_URL, 5, "500: boom", status=500),
    LLMTimeout(MODEL_URL, 2, 60.0),
    LLMRateLimited(MODEL_URL, 5, "slow down", retry_after_s=7.5),
    LLMRequestRejected(MODEL_URL, 404, "no such model"),
    LLMBadResponse("body is not JSON", base_url=MODEL_URL),
    StructuredOutputError("not an object", "[1, 2]", path="$", schema_name="threads"),
    UnknownAnalyzer("klingon", ("en",)),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda error: type(error).__name__)
def test_cognition_errors_survive_a_pickle_round_trip_with_their_fields(error: Any) -> None:
    """Ray pickles an actor's error to its caller; without ``__reduce__`` these came back as
    Ray's ``UnserializableException`` (their constructors take fields, not the message)."""
    if isinstance(error, LLMError):
        error.during("talker")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error) and str(again) == str(error) and again.__dict__ == error.__dict__
    assert getattr(again, "stage", None) == getattr(error, "stage", None)


def test_the_first_stage_named_stays() -> None:
    error = LLMBadResponse("empty", base_url=MODEL_URL).during("talker").during("gateway")
    assert error.stage == "talker" and LLMBadResponse("empty").stage is None


@pytest.mark.parametrize(("error", "status", "retry_after"), [
    (ERRORS[0], 503, 2),  # nothing listening: later may work
    (LLMUnavailable(MODEL_URL, 5, "503: loading", status=503), 503, 2),
    (ERRORS[1], 502, None),  # the model's own 500: an answer, and a failure
    (ERRORS[2], 503, 2),
    (ERRORS[3], 503, 8),  # the provider's Retry-After, rounded up
    (ERRORS[4], 502, None),
    (ERRORS[5], 502, None),
    (ERRORS[6], 502, None),
])
def test_what_a_failed_model_call_is_answered_with(error: LLMError, status: int, retry_after: int | None) -> None:
    assert model_failure_status(error) == (status, retry_after)


def test_a_server_that_is_not_there_is_given_up_on_after_one_retry() -> None:
    """max_retries=4 would be five attempts and ~3 s of backoff; a refused connection gets one retry."""
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    settings = LLMSettings(base_url=url, model="m", max_retries=4, backoff_initial_s=0.05)
    request = ChatRequest(model="m", messages=(ChatMessage("user", "hello"),))

    async def call() -> tuple[LLMUnavailable, int]:
        async with OpenAIChatClient(settings) as client:
            with pytest.raises(LLMUnavailable) as raised:
                await client.chat(request)
            return raised.value, client.retries

    error, retries = asyncio.run(call())
    assert retries == 1 and error.attempts == 2 and error.status is None and type(error) is LLMUnavailable
    assert url in str(error) and "ConnectError" in str(error)
    problem = model_server_problem(settings, timeout_s=2)  # what `mirror up` warns of at start
    assert problem is not None and problem.startswith("cannot be reached (ConnectError"), problem


class ActorCallFailed(Exception):
    """What a Ray actor call raises: the actor's own error as ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class FailingConversation:
    """A conversation handle whose turn fails with ``error``, carried as Ray carries it (pickled)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    async def turn(self, message: str, **_: Any) -> Any:
        raise ActorCallFailed(pickle.loads(pickle.dumps(self.error)))

    async def node_id(self) -> str | None:
        return None  # in this process: nothing for the node watch

    def forget(self) -> None:
        pass


async def broker_up() -> None:
    """The bus check of a gateway whose broker is up (there is none here: nothing is appended)."""


def gateway(tmp_path: Path, error: BaseException) -> tuple[FastAPI, dict[str, str]]:
    tenants = tmp_path / "tenants.json"
    token = TenantRegistry(tenants).add("acme")
    settings = GatewaySettings(RuntimeSettings(NatsInfrastructure("nats://127.0.0.1:1"),
                                               LLMSettings(base_url=MODEL_URL, model="m")), str(tenants))
    app = create_app(settings, lambda key: FailingConversation(error))  # type: ignore[arg-type,return-value]  # a scripted handle: turn and forget are all the gateway calls
    app.state.runtime.bus_ready = broker_up
    return app, {"Authorization": f"Bearer {token}"}


def post_turn(app: FastAPI, headers: dict[str, str]) -> httpx.Response:
    """A turn, through the app in this process (no server: httpx calls the ASGI app)."""

    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
            return await client.post("/v1/conversations/talk/turns", json={"message": "hello"}, headers=headers)

    return asyncio.run(post())


@pytest.mark.parametrize(("error", "status"), [
    (LLMUnavailable(MODEL_URL, 2, "ConnectError: refused").during("talker"), 503),
    (LLMBadResponse("body is not JSON: '<html>'", base_url=MODEL_URL).during("talker"), 502),
    (StructuredOutputError("not an object", "[]"), 502),  # no URL of its own: the runtime's is named
])
def test_a_turn_whose_model_failed_is_a_json_answer_naming_the_model_and_the_stage(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, error: LLMError, status: int) -> None:
    app, headers = gateway(tmp_path, error)
    with caplog.at_level(logging.WARNING, logger="mirror.gateway.failures"):
        answer = post_turn(app, headers)
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["model_url"] == MODEL_URL and MODEL_URL in body["detail"] and body["error"] == type(error).__name__
    assert body["stage"] == error.stage and (error.stage is None or f"the {error.stage}'s model call" in body["detail"])
    assert ("Retry-After" in answer.headers) == (status == 503)
    (line,) = [record.getMessage() for record in caplog.records]
    assert line.startswith(f"POST /v1/conversations/talk/turns answered {status}: ") and MODEL_URL in line


def test_an_unexpected_error_is_a_json_500_and_a_logged_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    app, headers = gateway(tmp_path, KeyError("lost"))
    with caplog.at_level(logging.WARNING, logger="mirror.gateway.failures"):
        answer = post_turn(app, headers)
    assert answer.status_code == 500 and answer.json()["detail"].startswith("internal error: ActorCallFailed")
    assert any(record.getMessage().startswith("POST /v1/conversations/talk/turns answered 500") for record in caplog.records)


def test_the_relay_logs_each_record_s_first_line_again_here(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """What a Ray process appended to the warnings file, at its level and under its logger; a
    traceback's lines stay in the file; what was there before the relay started is not relayed."""
    path = tmp_path / "warnings.log"
    path.write_text("2026-11-25 14:00:00,000 WARNING mirror.old: from an earlier run\n")
    relay = LogRelay(path, interval_s=0.01).start()
    try:
        with caplog.at_level(logging.WARNING), path.open("a") as file:
            file.write("2026-11-25 14:38:47,089 WARNING mirror.gateway.failures: POST /v1/x answered 503: the talker's\n"
                       "2026-11-25 14:38:47,090 ERROR mirror.gateway.failures: POST /v1/y answered 500: internal error\n"
                       "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nKeyError: 'lost'\n"
                       "2026-11-25 14:38:47,091 WARNING mirror.half")  # a line still being written: later
            file.flush()
            deadline = time.monotonic() + 30
            while relay.relayed < 2:
                assert time.monotonic() < deadline, "the relay did not relay the two records"
                time.sleep(0.01)
            file.write(": done\n")
    finally:
        relay.stop()  # relays what is there first
    assert [(record.name, record.levelname, record.getMessage()) for record in caplog.records] == [
        ("mirror.gateway.failures", "WARNING", "POST /v1/x answered 503: the talker's"),
        ("mirror.gateway.failures", "ERROR", "POST /v1/y answered 500: internal error"),
        ("mirror.half", "WARNING", "done"),
    ]
