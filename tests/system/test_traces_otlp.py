"""A running `mirror up` with traces on exports each turn's trace over OTLP/HTTP to a receiver in
the test (protobuf decoded with ``opentelemetry-proto``): every hop in one trace — the gateway's
HTTP span (continuing the client's ``traceparent``), the conversation's ``invoke_agent`` in the
host's Ray process as its child (carried across the Ray call), the model's ``chat`` span, the
fenced ``append`` and, through the NATS message headers, the ingester's ``ingest commit`` — and
the Thinker's run linked to its turn."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.otlp import OtlpReceiver, ReceivedSpan
from tests.support.up import ctrl_c, start_up
from tests.support.waits import until

pytestmark = pytest.mark.long

TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], OtlpReceiver]]:
    root: Path = tmp_path_factory.mktemp("traces")
    with OtlpReceiver() as receiver:
        process, info = start_up(root / "data", root / "up.log", "--traces", env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200",
            "OTEL_SERVICE_NAME": "mirror-test"})
        try:
            yield info, receiver
        finally:
            ctrl_c(process)


def in_trace(receiver: OtlpReceiver, trace_id: str) -> dict[str, list[ReceivedSpan]]:
    found: dict[str, list[ReceivedSpan]] = {}
    for span in list(receiver.spans):
        if span.trace_id == trace_id:
            found.setdefault(span.name, []).append(span)
    return found


def test_a_turns_trace_shows_every_hop(traced: tuple[dict[str, Any], OtlpReceiver]) -> None:
    info, receiver = traced
    answer = httpx.post(f"{info['url']}/v1/conversations/otlp/turns", json={"message": "Where is the lighthouse?"},
                        headers={"Authorization": f"Bearer {info['token']}",
                                 "traceparent": f"00-{TRACE}-{CLIENT_SPAN}-01"}, timeout=60)
    assert answer.status_code == 200, answer.text
    hops = ("POST /v1/conversations/{conversation}/turns", "invoke_agent mirror", "append", "ingest commit")
    def every_hop() -> dict[str, list[ReceivedSpan]] | None:
        found = in_trace(receiver, TRACE)
        complete = all(hop in found for hop in hops) and any(name.startswith("chat ") for name in found)
        return found if complete else None

    spans = until(every_hop, "every hop of the turn exported", timeout=60, poll_s=0.2)
    assert spans is not None
    (server,) = spans[hops[0]]
    (turn,) = spans["invoke_agent mirror"]
    (chat,) = [span for name, found in spans.items() if name.startswith("chat ") for span in found]
    assert server.parent_span_id == CLIENT_SPAN
    assert turn.parent_span_id == server.span_id  # across the Ray call, by the request's trace field
    assert server.resource["mirror.component"] == "gateway" and turn.resource["mirror.component"] == "host"
    assert server.resource["service.name"] == "mirror-test"
    assert chat.parent_span_id == turn.span_id
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.conversation.id"] == "default/otlp/main"
    assert chat.attributes["gen_ai.usage.output_tokens"] > 0
    assert all(append.parent_span_id == turn.span_id for append in spans["append"])
    # Through the NATS headers of the turn's events, the ingester's commit is in the turn's trace, under the append.
    appends = {append.span_id for append in spans["append"]}
    assert all(commit.parent_span_id in appends and commit.resource["mirror.component"] == "ingester"
               for commit in spans["ingest commit"])
    # The Thinker's run after it: a trace of its own, linked to the turn.
    run = until(lambda: next((span for span in list(receiver.spans) if span.name == "think"
                              and (TRACE, turn.span_id) in span.links), None),
                "the Thinker's run linked to the turn", timeout=60, poll_s=0.2)
    assert run is not None and run.trace_id != TRACE
    assert any(span.name.startswith("think ") and span.parent_span_id == run.span_id for span in list(receiver.spans))
