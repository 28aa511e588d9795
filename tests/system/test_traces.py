"""Traces of a turn (:mod:`mirror.tracing`), checked with the SDK's in-memory exporter: the real
gateway app, a live conversation in this process and the simulator model. One trace per turn
(HTTP span → ``invoke_agent`` → ``chat {model}`` with GenAI attributes, ``append``), an incoming
``traceparent`` continued, the request's trace carried across a hop that loses the context (as a
Ray call does) by the request's ``trace`` field, the Thinker's run linked to its turn, the trace
id in the log lines. Off, nothing is made. The real Ray hop, NATS headers and the ingester's
commit, exported over OTLP/HTTP: tests/system/test_traces_otlp.py."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mirror import tracing
from mirror.actors.handle import ConversationHandle
from mirror.actors.placement.local import LocalPlacement
from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.turn import TurnRequest
from mirror.events.ids import StreamKey
from mirror.events.memory_infrastructure import InMemoryInfrastructure
from mirror.gateway.app import create_app
from mirror.gateway.settings import GatewaySettings
from mirror.gateway.tenants import TenantRegistry
from mirror.sim.server import SimLLMServer
from tests.support.sim import SIM_MODEL
from tests.support.waits import until_async

INCOMING_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = f"00-{INCOMING_TRACE}-00f067aa0ba902b7-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    try:
        yield exporter
    finally:
        tracing.uninstall()


class AcrossAHop:
    """A handle that calls the conversation as a Ray call would: the request carried
    (:func:`mirror.tracing.carried`, what actors/placement/handles.py does), the caller's context
    not (the call runs in an empty one)."""

    def __init__(self, handle: ConversationHandle) -> None:
        self.handle = handle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.handle, name)

    async def turn(self, request: TurnRequest) -> Any:
        carried = tracing.carried(request)
        return await contextvars.Context().run(_task, self.handle.turn(carried))


def _task(coroutine: Any) -> Any:
    import asyncio

    return asyncio.ensure_future(coroutine)  # the task copies the (empty) context it is made in


@pytest.fixture
async def gateway(sim: SimLLMServer, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[tuple[httpx.AsyncClient, LocalPlacement]]:
    mode = getattr(request, "param", "baseline")
    infrastructure = InMemoryInfrastructure()
    settings = RuntimeSettings(infrastructure, LLMSettings(base_url=sim.base_url, model=SIM_MODEL, max_retries=1,
                                                           backoff_initial_s=0.01), mode=mode, memory=False,
                               reflection=False)
    placement = LocalPlacement(settings)
    token = TenantRegistry(tmp_path / "tenants.json").add("acme")
    app = create_app(GatewaySettings(settings, str(tmp_path / "tenants.json")),
                     lambda key: AcrossAHop(placement.handle(key)))
    transport = httpx.ASGITransport(app=app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway",
                                     headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            yield client, placement
    finally:
        await placement.close()


def named(spans: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name.startswith(prefix)]


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_one_trace_per_turn_from_the_gateway_to_the_model_and_the_append(
    spans: InMemorySpanExporter, gateway: tuple[httpx.AsyncClient, LocalPlacement],
) -> None:
    client, _ = gateway
    for index in range(2):
        answer = await client.post("/v1/conversations/traced/turns", json={"message": f"hello {index}"})
        assert answer.status_code == 200, answer.text
    http = named(spans, "POST /v1/conversations/{conversation}/turns")
    turns = named(spans, "invoke_agent mirror")
    chats = named(spans, f"chat {SIM_MODEL}")
    appends = named(spans, "append")
    assert len(http) == len(turns) == len(chats) == len(appends) == 2
    assert len({span.context.trace_id for span in http}) == 2  # a trace each
    for server in http:
        (turn,) = [span for span in turns if span.context.trace_id == server.context.trace_id]
        # Across the hop the context was lost: only the request's trace field made it the HTTP span's child.
        assert parent_of(turn) == server.context.span_id
        (chat,) = [span for span in chats if span.context.trace_id == server.context.trace_id]
        (append,) = [span for span in appends if span.context.trace_id == server.context.trace_id]
        assert parent_of(chat) == parent_of(append) == turn.context.span_id
        assert attributes(server)["http.route"] == "/v1/conversations/{conversation}/turns"
        assert attributes(server)["http.response.status_code"] == 200
        assert attributes(chat)["gen_ai.operation.name"] == "chat"
        assert attributes(chat)["gen_ai.request.model"] == SIM_MODEL
        assert attributes(chat)["gen_ai.conversation.id"] == attributes(turn)["gen_ai.conversation.id"] == "acme/traced/main"
        assert attributes(chat)["gen_ai.usage.input_tokens"] > 0 and attributes(chat)["gen_ai.usage.output_tokens"] > 0
        assert (chat.start_time or 0) >= (turn.start_time or 0) and (chat.end_time or 0) <= (turn.end_time or 0)


async def test_an_incoming_traceparent_is_continued(
    spans: InMemorySpanExporter, gateway: tuple[httpx.AsyncClient, LocalPlacement],
) -> None:
    client, _ = gateway
    answer = await client.post("/v1/conversations/continued/turns", json={"message": "hi"},
                               headers={"traceparent": INCOMING})
    assert answer.status_code == 200, answer.text
    (server,) = named(spans, "POST ")
    assert format(server.context.trace_id, "032x") == INCOMING_TRACE
    assert parent_of(server) == int("00f067aa0ba902b7", 16)
    assert {format(span.context.trace_id, "032x") for span in spans.get_finished_spans()} == {INCOMING_TRACE}


@pytest.mark.parametrize("gateway", ["full"], indirect=True)
async def test_the_thinkers_run_is_a_trace_of_its_own_linked_to_its_turn(
    spans: InMemorySpanExporter, gateway: tuple[httpx.AsyncClient, LocalPlacement],
) -> None:
    client, placement = gateway
    answer = await client.post("/v1/conversations/thinking/turns", json={"message": "I moved to Lisbon."})
    assert answer.status_code == 200, answer.text
    handle = placement.handle(StreamKey("acme", "thinking"))
    assert await handle.wait_idle(timeout=60)
    await until_async(lambda: named(spans, "think") and all(span.end_time for span in named(spans, "think")),
                      "the Thinker's run ended")
    (turn,) = named(spans, "invoke_agent mirror")
    (run,) = [span for span in named(spans, "think") if span.name == "think"]
    assert run.context.trace_id != turn.context.trace_id and run.parent is None
    assert [(link.context.trace_id, link.context.span_id) for link in run.links] == [
        (turn.context.trace_id, turn.context.span_id)]
    stages = [span for span in named(spans, "think ") if span.context.trace_id == run.context.trace_id]
    assert stages and all(parent_of(stage) == run.context.span_id for stage in stages)
    assert {attributes(stage)["mirror.stage"] for stage in stages} >= {"thinking"}
    stage_ids = {stage.context.span_id for stage in stages}
    thought = [chat for chat in named(spans, "chat ") if chat.context.trace_id == run.context.trace_id]
    assert thought and all(parent_of(chat) in stage_ids for chat in thought)


def test_a_log_line_inside_a_span_names_its_trace(spans: InMemorySpanExporter, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO):
        with tracing.span("request"):
            logging.getLogger("mirror.test").info("answered %s", "it")
            parent = tracing.traceparent()
        logging.getLogger("mirror.test").info("outside")
    assert parent is not None
    inside, outside = caplog.records[-2:]
    assert inside.getMessage() == f"answered it trace_id={parent.split('-')[1]}"
    assert outside.getMessage() == "outside"


def test_off_nothing_is_made_and_the_request_is_unchanged() -> None:
    assert not tracing.enabled()
    request = TurnRequest("hi")
    with tracing.span("nothing") as made:
        assert made is None and tracing.traceparent() is None and tracing.carried(request) is request
    assert tracing.inject({"Nats-Msg-Id": "x"}) == {"Nats-Msg-Id": "x"}
    assert tracing.traceparents([(b"s", b"r", b"d", b"NATS/1.0\r\ntraceparent: " + INCOMING.encode() + b"\r\n\r\n")]) == ()


def test_settings_come_from_the_otel_variables() -> None:
    assert not tracing.TraceSettings.from_environment({}).on
    assert tracing.TraceSettings.from_environment({}, asked=True).on
    assert tracing.TraceSettings.from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://jaeger:4318"}).on
    assert not tracing.TraceSettings.from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://j:4318",
                                                       "OTEL_SDK_DISABLED": "true"}).on
    sampled = tracing.TraceSettings.from_environment({"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                                      "OTEL_TRACES_SAMPLER_ARG": "0.01", "PATH": "/bin"}, asked=True)
    assert dict(sampled.environment) == {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
                                         "OTEL_TRACES_SAMPLER_ARG": "0.01"}
    with pytest.raises(tracing.InvalidTraceSettings, match="OTEL_TRACES_SAMPLER"):
        tracing.TraceSettings.from_environment({"OTEL_TRACES_SAMPLER": "sometimes"})
    with pytest.raises(tracing.InvalidTraceSettings, match="a ratio from 0 to 1"):
        tracing.TraceSettings.from_environment({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"})
    shown = tracing.TraceSettings.from_environment({"OTEL_EXPORTER_OTLP_HEADERS": "authorization=secret"}).shown()
    assert shown["environment"] == {"OTEL_EXPORTER_OTLP_HEADERS": "(set)"}


def test_the_ingester_reads_the_traceparent_of_each_traced_message(spans: InMemorySpanExporter) -> None:
    block = b"NATS/1.0\r\nNats-Msg-Id: a\r\ntraceparent: " + INCOMING.encode() + b"\r\n\r\n"
    assert tracing.traceparents([(b"s", b"r", b"d", block), (b"s", b"r", b"d", None),
                                 (b"s", b"r", b"d", b"NATS/1.0\r\nNats-Msg-Id: b\r\n\r\n")]) == (INCOMING,)
    import time

    tracing.committed([INCOMING, INCOMING], time.perf_counter(), "0", 3)
    (commit,) = spans.get_finished_spans()
    assert commit.name == "ingest commit" and format(commit.context.trace_id, "032x") == INCOMING_TRACE
    assert parent_of(commit) == int("00f067aa0ba902b7", 16)
