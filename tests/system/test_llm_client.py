"""The LLM port's OpenAI-compatible adapter against the real simulator over HTTP.

Each test starts a :class:`SimLLMServer` on a free loopback port, scripts its faults and reads
its admin stats. No test fakes the transport: the simulator is the only stand-in for a
provider. (The pure parts — fingerprints, strict JSON reading, redaction, ``Retry-After``
parsing — are in ``tests/unit/test_llm_client.py``.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from mirror.cognition import (
    LLM,
    JsonSchema,
    LLMBadResponse,
    LLMError,
    LLMRateLimited,
    LLMRequestRejected,
    LLMSettings,
    LLMTimeout,
    LLMUnavailable,
    OpenAIChatClient,
    StructuredOutputError,
)
from mirror.cognition.errors import EXCERPT_IN_MESSAGE
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.requests import API_KEY, THREADS_SCHEMA, request

# --- against the simulator over HTTP ---------------------------------------------------------

FAST_RETRIES = {"backoff_initial_s": 0.01, "backoff_max_s": 0.05}


@pytest.fixture
def start_sim() -> Iterator[Any]:
    """Start simulators with given settings on free loopback ports; stop them all afterwards."""
    servers: list[SimLLMServer] = []

    def start(**sim_settings: Any) -> SimLLMServer:
        sim_settings.setdefault("latency", "fixed:5")
        server = SimLLMServer(SimSettings(**sim_settings)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
async def make_client() -> AsyncIterator[Any]:
    clients: list[OpenAIChatClient] = []

    def make(base_url: str, **overrides: Any) -> OpenAIChatClient:
        options: dict[str, Any] = {"api_key": API_KEY, "timeout_s": 5.0, **FAST_RETRIES, **overrides}
        client = OpenAIChatClient(LLMSettings(base_url=base_url, model="sim-1", **options))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


async def test_happy_path_fills_provenance(start_sim: Any, make_client: Any) -> None:
    sim = start_sim()
    client: OpenAIChatClient = make_client(sim.base_url)
    assert isinstance(client, LLM)
    asked = request()
    response = await client.chat(asked)
    provenance = response.provenance
    assert provenance.request_fingerprint == asked.fingerprint()
    assert provenance.model == "sim-1" and provenance.prompt_set == "default-v1"
    assert provenance.parameters == {"temperature": 0.7, "max_tokens": 300, "seed": 7, "structured_output": "json_schema"}
    assert provenance.latency_ms > 0
    assert provenance.prompt_tokens > 0 and provenance.completion_tokens > 0
    assert provenance.response == response.content
    assert (client.calls, client.retries) == (1, 0)
    assert client.prompt_tokens == provenance.prompt_tokens and client.completion_tokens == provenance.completion_tokens

    value, again = await client.chat_json(asked)
    assert set(value) == {"reasoning", "memory", "goal"} and all(isinstance(text, str) for text in value.values())
    assert again.content == response.content  # the simulator is deterministic
    assert sim.stats()["calls"] == 2


async def test_same_request_same_content_across_clients_and_servers(start_sim: Any, make_client: Any) -> None:
    first, second = start_sim(), start_sim(seed=99, latency="fixed:1")
    asked = request(json_schema=None, text="Tell me about the river.")
    contents = [(await make_client(sim.base_url).chat(asked)).content for sim in (first, first, second)]
    assert contents[0] == contents[1] == contents[2]
    assert (await make_client(first.base_url).chat(request(json_schema=None, seed=8))).content != contents[0]


async def test_transient_faults_are_retried(start_sim: Any, make_client: Any) -> None:
    sim = start_sim(script=("429", "500", "ok"))
    client = make_client(sim.base_url)
    response = await client.chat(request())
    assert response.content
    assert (client.calls, client.retries) == (1, 2)
    stats = sim.stats()
    assert stats["calls"] == 3 and stats["faults"]["429"] == 1 and stats["faults"]["500"] == 1


@pytest.mark.parametrize(("fault", "error_type"), [("500", LLMUnavailable), ("429", LLMRateLimited)])
async def test_retries_exhausted(start_sim: Any, make_client: Any, fault: str, error_type: type[LLMError]) -> None:
    sim = start_sim(script=(fault,) * 10)
    client = make_client(sim.base_url, max_retries=2)
    with pytest.raises(error_type) as caught:
        await client.chat(request())
    assert isinstance(caught.value, LLMUnavailable)
    assert caught.value.attempts == 3 and sim.base_url in str(caught.value) and "3 attempt" in str(caught.value)
    assert sim.stats()["calls"] == 3 and client.retries == 2


async def test_unreachable_server_is_unavailable(start_sim: Any, make_client: Any) -> None:
    sim = start_sim()
    base_url = sim.base_url
    sim.stop()
    client = make_client(base_url, max_retries=1, connect_timeout_s=0.5)
    with pytest.raises(LLMUnavailable) as caught:
        await client.chat(request())
    assert caught.value.attempts == 2 and base_url in str(caught.value)


async def test_hanging_model_times_out_after_retries(start_sim: Any, make_client: Any) -> None:
    sim = start_sim(script=("timeout",) * 5, timeout_hang_s=2.0)
    client = make_client(sim.base_url, timeout_s=0.3, max_retries=1)
    started = asyncio.get_running_loop().time()
    with pytest.raises(LLMTimeout) as caught:
        await client.chat(request())
    assert asyncio.get_running_loop().time() - started < 1.5  # two 0.3 s attempts, not the 2 s hang
    assert isinstance(caught.value, LLMUnavailable) and caught.value.attempts == 2
    stats = sim.stats()
    assert stats["calls"] == 2 and stats["faults"]["timeout"] == 2 and client.retries == 1


async def test_malformed_content_is_a_structured_output_error(start_sim: Any, make_client: Any) -> None:
    sim = start_sim(script=("malformed",))
    client = make_client(sim.base_url)
    with pytest.raises(StructuredOutputError) as caught:
        await client.chat_json(request())
    assert caught.value.content and caught.value.schema_name == "threads"
    assert sim.stats()["calls"] == 1  # the model answered; asking again is the caller's decision


async def test_empty_content_is_a_bad_response(start_sim: Any, make_client: Any) -> None:
    sim = start_sim(script=("empty",))
    client = make_client(sim.base_url)
    with pytest.raises(LLMBadResponse) as caught:
        await client.chat(request())
    assert "empty" in str(caught.value)
    assert sim.stats()["calls"] == 1 and client.retries == 0


async def test_bad_request_is_rejected_without_retry(start_sim: Any, make_client: Any) -> None:
    sim = start_sim()
    client = make_client(sim.base_url)
    impossible = JsonSchema("impossible", {"type": "object", "properties": {"x": {"enum": []}}, "required": ["x"]})
    with pytest.raises(LLMRequestRejected) as caught:
        await client.chat(request(json_schema=impossible))
    assert caught.value.status == 400 and "enum is empty" in caught.value.provider_message
    assert "enum is empty" in str(caught.value)
    assert sim.stats()["bad_requests"] == 1 and client.retries == 0


async def test_concurrency_is_bounded(start_sim: Any, make_client: Any) -> None:
    sim = start_sim(latency="fixed:100")
    client = make_client(sim.base_url, max_concurrency=2)
    responses = await asyncio.gather(*(client.chat(request(text=f"question {index}")) for index in range(8)))
    assert len({response.content for response in responses}) == 8
    stats = sim.stats()
    assert stats["calls"] == 8 and stats["max_in_flight"] == 2


async def test_embeddings(start_sim: Any, make_client: Any) -> None:
    sim = start_sim()
    client = make_client(sim.base_url)
    vectors = await client.embed(["the river", "the old house", "the river"])
    assert len(vectors) == 3 and all(len(vector) == 64 for vector in vectors)
    assert vectors[0] == vectors[2] != vectors[1]
    assert await client.embed([]) == []
    assert client.calls == 1 and client.prompt_tokens > 0


async def test_api_key_is_sent_but_never_shown(
    start_sim: Any, make_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sim = start_sim(script=("500", "ok", "malformed", "500", "500"))
    client = make_client(sim.base_url, max_retries=1)
    shown: list[str] = [repr(client), repr(client.settings), str(client.settings)]

    response = await client.chat(request())
    shown += [repr(response), repr(dataclasses.asdict(response.provenance))]
    for failing in (client.chat_json(request(text="again")), client.chat(request(text="once more"))):
        with pytest.raises(LLMError) as caught:
            await failing
        shown += [str(caught.value), repr(caught.value), repr(vars(caught.value))]
    async with OpenAIChatClient(LLMSettings(sim.base_url, "sim-1", api_key="sk-wrong")) as other:
        await other.chat(request(text="keyless"))

    stats = sim.stats()
    assert stats["authorized_calls"] == stats["calls"] == 6
    retry_lines = [record.getMessage() for record in caplog.records if record.name == "mirror.cognition.openai_client"]
    assert any("attempt 1/2" in line and "500" in line for line in retry_lines)
    shown += [record.getMessage() for record in caplog.records] + [caplog.text]
    assert all(API_KEY not in text for text in shown)


# The prefix the simulator puts before an echoed message; padding a message by this much less
# than the excerpt limit puts the key across the point where an error's excerpt is cut.
ECHO_PREFIX = "request rejected (simulated): "


@pytest.mark.parametrize("padding", [0, EXCERPT_IN_MESSAGE - len(ECHO_PREFIX) - 10])
async def test_provider_text_echoing_the_key_is_redacted(start_sim: Any, make_client: Any, padding: int) -> None:
    # The provider quotes what it rejects; here the quoted text holds the key. Redaction must
    # come before the excerpt is cut, or a key across the cut would leave its prefix behind.
    sim = start_sim(script=("echo_error",))
    client = make_client(sim.base_url)
    with pytest.raises(LLMRequestRejected) as caught:
        await client.chat(request(text="x" * padding + f"{API_KEY} is not a valid key"))
    error = caught.value
    shown = [str(error), repr(error), error.provider_message]
    assert error.status == 400 and "***" in error.provider_message and "request rejected" in error.provider_message
    assert all(API_KEY[:8] not in text for text in shown)
    stats = sim.stats()
    assert stats["faults"]["echo_error"] == stats["authorized_calls"] == stats["calls"] == 1 and client.retries == 0


@pytest.mark.parametrize(
    ("mode", "sent", "schema_enforced"),
    [
        ("json_schema",
         {"type": "json_schema", "json_schema": {"name": "threads", "schema": THREADS_SCHEMA, "strict": True}}, True),
        ("json_object_schema", {"type": "json_object", "schema": THREADS_SCHEMA}, True),
        ("json_object", {"type": "json_object"}, False),
        ("none", None, False),
    ],
)
async def test_structured_output_modes(
    start_sim: Any, make_client: Any, mode: str, sent: dict[str, Any] | None, schema_enforced: bool
) -> None:
    sim = start_sim()
    client = make_client(sim.base_url, structured_output=mode)
    if schema_enforced:
        value, response = await client.chat_json(request())
        assert set(value) == {"reasoning", "memory", "goal"}
        assert response.provenance.parameters["structured_output"] == mode
    else:  # the model was not held to the schema, so the client's own check refuses its answer
        with pytest.raises(StructuredOutputError):
            await client.chat_json(request())
    assert sim.stats()["last_response_format"] == sent

    plain = await client.chat(request(json_schema=None))  # no schema: nothing to pass, whatever the mode
    assert plain.provenance.parameters["structured_output"] == "none"
    stats = sim.stats()
    assert stats["last_response_format"] is None
    assert stats["response_formats"] == Counter(["none" if sent is None else sent["type"], "none"])


async def test_request_parameters_reach_the_model(start_sim: Any, make_client: Any) -> None:
    sim = start_sim()
    client = make_client(sim.base_url)
    base = (await client.chat(request(json_schema=None))).content
    for change in ({"model": "sim-2"}, {"temperature": 0.2}, {"seed": 8}):
        assert (await client.chat(request(json_schema=None, **change))).content != base, change
    short = await client.chat(request(json_schema=None, max_tokens=3))
    assert 0 < short.provenance.completion_tokens <= 3  # as the simulator counted them
    assert sim.stats()["calls"] == 5


async def test_missing_usage_is_estimated(start_sim: Any, make_client: Any) -> None:
    sim = start_sim(script=("ok", "no_usage"))
    client = make_client(sim.base_url)
    asked = request(json_schema=None)
    reported = await client.chat(asked)
    estimated = await client.chat(asked)
    assert estimated.content == reported.content
    assert estimated.provenance.completion_tokens == -(-len(estimated.content) // 4)
    assert estimated.provenance.prompt_tokens == -(-len(asked.prompt_text()) // 4)
    assert client.completion_tokens == reported.provenance.completion_tokens + estimated.provenance.completion_tokens
    assert sim.stats()["faults"]["no_usage"] == 1


@pytest.mark.parametrize(("fault", "fragment"), [("garbage", "not JSON"), ("no_choices", r"no choices\[0\]")])
async def test_unreadable_envelope_is_a_bad_response(
    start_sim: Any, make_client: Any, fault: str, fragment: str
) -> None:
    sim = start_sim(script=(fault,))
    client = make_client(sim.base_url)
    with pytest.raises(LLMBadResponse, match=fragment):
        await client.chat(request())
    assert sim.stats()["faults"][fault] == 1 and client.retries == 0


@pytest.mark.parametrize(
    ("retry_after_s", "backoff_max_s", "at_least", "at_most"), [(0.3, 5.0, 0.3, 2.0), (100.0, 0.05, 0.0, 1.0)]
)
async def test_retry_after_is_honoured_and_capped(
    start_sim: Any, make_client: Any, retry_after_s: float, backoff_max_s: float, at_least: float, at_most: float
) -> None:
    # Without the header the first backoff would be ~0.01 s (FAST_RETRIES), so 0.3 s is the header's doing.
    sim = start_sim(script=("429",), retry_after_s=retry_after_s)
    client = make_client(sim.base_url, backoff_max_s=backoff_max_s)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await client.chat(request(json_schema=None))).content
    assert at_least <= loop.time() - started < at_most and client.retries == 1
    assert sim.stats()["faults"]["429"] == 1
