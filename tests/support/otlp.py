"""A tiny OTLP/HTTP trace receiver for tests: what a collector (Jaeger, the OpenTelemetry
Collector) would be given, decoded with ``opentelemetry-proto`` and kept as plain rows."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(item) for item in any_value.array_value.values)
    return getattr(any_value, kind) if kind else None


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    attributes: dict[str, Any]
    links: tuple[tuple[str, str], ...]
    """(trace id, span id) of each link."""
    resource: dict[str, Any]


@dataclass
class OtlpReceiver:
    """``POST /v1/traces`` on a free loopback port; :attr:`spans` holds every span received."""

    spans: list[ReceivedSpan] = field(default_factory=list)
    requests: int = 0

    def __enter__(self) -> OtlpReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                receiver.received(request, self.path, self.headers.get("Content-Type", ""))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *_: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def received(self, request: ExportTraceServiceRequest, path: str, content_type: str) -> None:
        assert path == "/v1/traces" and content_type == "application/x-protobuf", (path, content_type)
        self.requests += 1
        for resource_spans in request.resource_spans:
            resource = {item.key: _value(item.value) for item in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(ReceivedSpan(
                        span.name, span.trace_id.hex(), span.span_id.hex(), span.parent_span_id.hex(), span.kind,
                        {item.key: _value(item.value) for item in span.attributes},
                        tuple((link.trace_id.hex(), link.span_id.hex()) for link in span.links), resource))

    def __exit__(self, *_: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
