"""Mirror's OpenTelemetry traces: one trace per turn, every hop, and the thinking it caused.

A turn's trace: the gateway's HTTP span (an incoming W3C ``traceparent`` continued) → across the
Ray call as the ``trace`` field of the turn's request (:func:`carried`) → the conversation's
``invoke_agent`` span (:func:`turn`) → the model's ``chat {model}`` span with OpenTelemetry's
GenAI attributes (:func:`model_call`) → the fenced ``append`` and, in the NATS headers of the
events it publishes (:func:`inject`), on to the ingester's ``ingest commit`` (:func:`committed`).
The Thinker's run after a turn is a trace of its own, ``think``, linked (a span link) to the turn
that started it, with a span per stage (:func:`span`). While a span is current the trace id is
added to each log line (``trace_id=…``).

Off (the default: :class:`TraceSettings` without variables) no SDK is imported, no tracer
provider is made and every function here returns at once: a dict lookup per call. On, it is
configured by the standard ``OTEL_*`` variables, read at the edge (:meth:`TraceSettings.from_environment`)
and carried to every process in the settings (a Ray worker on another machine does not share
the command's environment): the sampler (``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``),
the exporter (``OTEL_TRACES_EXPORTER``: ``otlp`` over HTTP/protobuf, or ``console``), its endpoint
and headers, ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``.

A root helper: it imports the standard library and ``opentelemetry-api`` (the SDK and the exporter
only when traces are turned on), so every room may call it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACEPARENT = "traceparent"
"""The W3C Trace Context header (an HTTP request's, a NATS message's)."""
SAMPLERS = ("always_on", "always_off", "traceidratio", "parentbased_always_on", "parentbased_always_off",
            "parentbased_traceidratio")
"""``OTEL_TRACES_SAMPLER``'s values (OpenTelemetry's names); the default is ``parentbased_always_on``."""
EXPORTERS = ("otlp", "console")
"""``OTEL_TRACES_EXPORTER``'s values Mirror sends spans to (``otlp``: OTLP over HTTP/protobuf)."""
DEFAULT_ENDPOINT = "http://localhost:4318"
"""OTLP/HTTP's default collector address (Jaeger's and the OpenTelemetry Collector's)."""


class InvalidTraceSettings(ValueError):
    """An ``OTEL_*`` value Mirror cannot use (an unknown sampler or exporter, a ratio outside 0–1)."""


@dataclass(frozen=True, slots=True)
class TraceSettings:
    """Whether this deployment traces, and the ``OTEL_*`` variables that say how.

    Built once at the edge (:meth:`from_environment`) and carried in each process's settings."""

    on: bool = False
    environment: tuple[tuple[str, str], ...] = ()
    """The ``OTEL_*`` variables, as ``(name, value)`` pairs."""

    def __post_init__(self) -> None:
        env = dict(self.environment)
        sampler = env.get("OTEL_TRACES_SAMPLER", "parentbased_always_on")
        if sampler not in SAMPLERS:
            raise InvalidTraceSettings(f"OTEL_TRACES_SAMPLER={sampler!r}: choose one of {', '.join(SAMPLERS)}")
        if "traceidratio" in sampler:
            try:
                ratio = float(env.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
            except ValueError:
                ratio = -1.0
            if not 0.0 <= ratio <= 1.0:
                raise InvalidTraceSettings(f"OTEL_TRACES_SAMPLER_ARG={env.get('OTEL_TRACES_SAMPLER_ARG')!r}: "
                                           "a ratio from 0 to 1 (0.01: one trace in a hundred)")
        exporter = env.get("OTEL_TRACES_EXPORTER", "otlp")
        if self.on and exporter not in EXPORTERS:
            raise InvalidTraceSettings(f"OTEL_TRACES_EXPORTER={exporter!r}: choose one of {', '.join(EXPORTERS)} "
                                       "(or leave traces off)")

    def shown(self) -> dict[str, Any]:
        """For ``--show-config``: the variables, with the exporter's headers (credentials) hidden."""
        return {"on": self.on, "environment": {name: "(set)" if "HEADERS" in name else value
                                               for name, value in self.environment}}

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], *, asked: bool = False) -> TraceSettings:
        """Traces on when ``asked`` (``mirror up --traces``) or an exporter or OTLP endpoint is
        named (``OTEL_TRACES_EXPORTER`` other than ``none``, ``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT``);
        ``OTEL_SDK_DISABLED=true`` keeps them off."""
        found = tuple(sorted((name, value) for name, value in environ.items() if name.startswith("OTEL_")))
        env = dict(found)
        named = (env.get("OTEL_TRACES_EXPORTER", "none") != "none" or "OTEL_EXPORTER_OTLP_ENDPOINT" in env
                 or "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in env)
        disabled = env.get("OTEL_SDK_DISABLED", "").lower() == "true" or env.get("OTEL_TRACES_EXPORTER") == "none"
        return cls(on=(asked or named) and not disabled, environment=found)


# ---------------------------------------------------------------------------- switching on
_state: dict[str, Any] = {"tracer": None, "provider": None}
_PROPAGATOR = TraceContextTextMapPropagator()
_conversation: ContextVar[str | None] = ContextVar("mirror_trace_conversation", default=None)
_NOTHING = contextlib.nullcontext()


def configure(settings: TraceSettings, component: str = "mirror") -> None:
    """Start tracing in this process as ``settings`` say (once; off, nothing is imported or made).
    ``component``: the process's part (gateway, host, ingester), a resource attribute."""
    if not settings.on or _state["tracer"] is not None:
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

    env = dict(settings.environment)
    attributes: dict[str, str] = {"service.name": env.get("OTEL_SERVICE_NAME", "mirror"), "mirror.component": component}
    for pair in filter(None, env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(",")):
        name, _, value = pair.partition("=")
        attributes.setdefault(name.strip(), value.strip())
    exporter: SpanExporter
    if env.get("OTEL_TRACES_EXPORTER", "otlp") == "console":
        exporter = ConsoleSpanExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or (
            env.get("OTEL_EXPORTER_OTLP_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/") + "/v1/traces")
        headers = dict(pair.split("=", 1) for pair in env.get("OTEL_EXPORTER_OTLP_HEADERS", "").split(",") if "=" in pair)
        exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers or None)
    provider = TracerProvider(sampler=_sampler(env), resource=Resource.create(attributes))
    delay_ms = float(env.get("OTEL_BSP_SCHEDULE_DELAY", "5000"))  # read here: a Ray worker may not have the variable
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=delay_ms))
    install(provider)


def _sampler(env: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.trace import sampling

    name = env.get("OTEL_TRACES_SAMPLER", "parentbased_always_on")
    ratio = float(env.get("OTEL_TRACES_SAMPLER_ARG", "1.0"))
    root = {"always_on": sampling.ALWAYS_ON, "always_off": sampling.ALWAYS_OFF}.get(
        name.removeprefix("parentbased_"), None) or sampling.TraceIdRatioBased(ratio)
    return sampling.ParentBased(root) if name.startswith("parentbased_") else root


def install(provider: Any) -> None:
    """Trace into ``provider`` (an SDK ``TracerProvider``; a test's, with an in-memory exporter).
    Mirror keeps its own tracer rather than the process-wide provider, which can be set once."""
    _state["provider"], _state["tracer"] = provider, provider.get_tracer("mirror")
    if logging.getLogRecordFactory() is not _with_trace_id:
        _state["record_factory"] = logging.getLogRecordFactory()
        logging.setLogRecordFactory(_with_trace_id)


def uninstall() -> None:
    """Stop tracing in this process (a test's provider is flushed and let go)."""
    provider = _state["provider"]
    _state["provider"] = _state["tracer"] = None
    if logging.getLogRecordFactory() is _with_trace_id:
        logging.setLogRecordFactory(_state.pop("record_factory"))
    if provider is not None:
        provider.force_flush()


def flush() -> None:
    """Send the spans still batched (before a process exits)."""
    if _state["provider"] is not None:
        _state["provider"].force_flush()


def enabled() -> bool:
    return _state["tracer"] is not None


def _with_trace_id(*args: Any, **kwargs: Any) -> logging.LogRecord:
    """The log records of a traced request say its trace id (``trace_id=…`` after the message)."""
    record: logging.LogRecord = _state["record_factory"](*args, **kwargs)
    found = trace.get_current_span().get_span_context()
    trace_id = format(found.trace_id, "032x") if found.is_valid else ""
    record.trace_id = trace_id  # a formatter may name %(trace_id)s
    if trace_id:
        record.msg, record.args = f"{record.getMessage()} trace_id={trace_id}", None
    return record


# ---------------------------------------------------------------------------- spans
def span(name: str, attributes: Mapping[str, Any] | None = None, *, kind: SpanKind = SpanKind.INTERNAL,
         links: Iterable[SpanContext] = ()) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name`` around the block, child of the current one (nothing when off)."""
    tracer = _state["tracer"]
    if tracer is None:
        return _NOTHING
    return tracer.start_as_current_span(name, kind=kind, attributes=attributes,
                                        links=[Link(cause) for cause in links if cause.is_valid])


def incoming(headers: Mapping[str, str], name: str, attributes: Mapping[str, Any]) -> contextlib.AbstractContextManager[Any]:
    """A server span for a request whose ``headers`` may carry a ``traceparent`` (continued when
    they do); yields the span (None when off)."""
    tracer = _state["tracer"]
    if tracer is None:
        return _NOTHING
    return tracer.start_as_current_span(name, context=_PROPAGATOR.extract(headers), kind=SpanKind.SERVER,
                                        attributes=attributes)


def traceparent() -> str | None:
    """The current span's W3C ``traceparent`` (None: none, or traces off)."""
    if _state["tracer"] is None:
        return None
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get(TRACEPARENT)


def carried(request: Any) -> Any:
    """``request`` (a frozen request with a ``trace`` field) carrying the current span across a
    Ray call; unchanged when traces are off or nothing is current."""
    parent = traceparent()
    return request if parent is None else dataclasses.replace(request, trace=parent)


def inject(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` (a message's, just built) with the current span's ``traceparent`` added."""
    if _state["tracer"] is not None:
        _PROPAGATOR.inject(headers)
    return headers


def turn(conversation: Any, request: Any) -> contextlib.AbstractContextManager[Any]:
    """A turn in its conversation: ``invoke_agent mirror``, continuing ``request.trace`` (the
    gateway's span across Ray) or, without one, the current span (a turn in the same process)."""
    tracer = _state["tracer"]
    return _NOTHING if tracer is None else _turn(tracer, conversation, request)


@contextlib.contextmanager
def _turn(tracer: Any, conversation: Any, request: Any) -> Iterator[None]:
    parent = _PROPAGATOR.extract({TRACEPARENT: request.trace}) if request.trace else None
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "mirror",
                  "gen_ai.conversation.id": str(conversation), "mirror.stream": bool(request.stream)}
    token = _conversation.set(str(conversation))
    try:
        with tracer.start_as_current_span("invoke_agent mirror", context=parent, kind=SpanKind.SERVER,
                                          attributes=attributes):
            yield
    finally:
        _conversation.reset(token)


def cause() -> SpanContext | None:
    """The current span, for a later span to link to (the turn a Thinker's run follows)."""
    if _state["tracer"] is None:
        return None
    found = trace.get_current_span().get_span_context()
    return found if found.is_valid else None


def thinking(conversation: Any, caused_by: SpanContext | None) -> contextlib.AbstractContextManager[Any]:
    """The Thinker's run: a trace of its own (not a child of the turn whose task started it),
    linked to the turn that caused it; its stages' spans are children."""
    tracer = _state["tracer"]
    return _NOTHING if tracer is None else _thinking(tracer, conversation, caused_by)


@contextlib.contextmanager
def _thinking(tracer: Any, conversation: Any, caused_by: SpanContext | None) -> Iterator[None]:
    token = _conversation.set(str(conversation))
    try:
        with tracer.start_as_current_span("think", context=otel_context.Context(), kind=SpanKind.INTERNAL,
                                          links=[] if caused_by is None else [Link(caused_by)],
                                          attributes={"gen_ai.conversation.id": str(conversation)}):
            yield
    finally:
        _conversation.reset(token)


def model_call(model: str, started: float, input_tokens: int, output_tokens: int, finish_reason: str) -> None:
    """A model call that answered, as a ``chat {model}`` span from ``started`` (``perf_counter``)
    to now, with OpenTelemetry's GenAI attributes (and the conversation of the turn or run it is in)."""
    tracer = _state["tracer"]
    if tracer is None:
        return
    now_ns = time.time_ns()
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
                                  "gen_ai.usage.input_tokens": input_tokens, "gen_ai.usage.output_tokens": output_tokens,
                                  "gen_ai.response.finish_reasons": (finish_reason,)}
    conversation = _conversation.get()
    if conversation is not None:
        attributes["gen_ai.conversation.id"] = conversation
    started_ns = now_ns - int((time.perf_counter() - started) * 1e9)
    tracer.start_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes, start_time=started_ns).end(now_ns)


def failed(error: BaseException) -> None:
    """Mark the current span failed with ``error`` (one the code handles rather than raises)."""
    if _state["tracer"] is not None:
        current = trace.get_current_span()
        current.record_exception(error)
        current.set_status(Status(StatusCode.ERROR, type(error).__name__))


def traceparents(deliveries: Iterable[tuple[Any, ...]]) -> tuple[str, ...]:
    """The ``traceparent`` of each consumed NATS message that has one (its header block last in
    the delivery); empty at once with traces off."""
    if _state["tracer"] is None:
        return ()
    found = []
    for delivery in deliveries:
        block = delivery[-1]
        start = -1 if not block else block.find(b"traceparent:")
        if start >= 0:
            end = block.find(b"\r\n", start)
            found.append(block[start + len(b"traceparent:"):end if end >= 0 else None].strip().decode("ascii"))
    return tuple(found)


def committed(parents: Iterable[str], started: float, shard: str, events: int) -> None:
    """An ingester's commit, as an ``ingest commit`` span in the trace of each turn whose events it
    committed (``parents``: their NATS headers'), from ``started`` (``perf_counter``) to now."""
    tracer = _state["tracer"]
    if tracer is None:
        return
    now_ns = time.time_ns()
    started_ns = now_ns - int((time.perf_counter() - started) * 1e9)
    for parent in set(parents):
        tracer.start_span("ingest commit", context=_PROPAGATOR.extract({TRACEPARENT: parent}), kind=SpanKind.CONSUMER,
                          attributes={"mirror.shard": shard, "mirror.events": events},
                          start_time=started_ns).end(now_ns)


__all__ = [
    "DEFAULT_ENDPOINT", "EXPORTERS", "SAMPLERS", "TRACEPARENT", "InvalidTraceSettings", "TraceSettings", "carried",
    "cause", "committed", "configure", "enabled", "failed", "flush", "incoming", "inject", "install", "model_call",
    "span", "thinking", "traceparent", "traceparents", "turn", "uninstall",
]
