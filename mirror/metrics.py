"""Mirror's Prometheus metrics: every name, help text and label is defined here, once.

Each process that does Mirror's work — a gateway, a conversation host, an ingester — records into
this module's :data:`REGISTRY` through the small functions below (one call at each place in the
code that knows a figure, e.g. :func:`turn_done`), and serves it on a port of its own
(:func:`serve`); a gateway lists every such endpoint for Prometheus's ``http_sd``
(``GET /metrics/targets``), so one scrape config finds them all. docs/operations.md ("Metrics and
traces") holds the table of names, checked against :func:`catalogue` by a test.

Labels are bounded: ``tenant`` (the tenants file's names), ``stage``, ``route`` (the route's
template, never the raw path), ``shard``, a failure's class name. Never a conversation id: a
scrape of a host with ten thousand live conversations is as small as one with ten. Figures a
process already keeps (a host's live conversations, the fair share's queues) are read when
scraped (:func:`watch`), costing a turn nothing.

Off (:func:`configure` ``enabled=False``: ``mirror up --no-metrics``) every recording function
returns at once and no endpoint is served. A root helper: it imports only the standard library
and ``prometheus_client``, so every room may call it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import start_http_server
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

REGISTRY = CollectorRegistry(auto_describe=True)
"""Mirror's registry (not the client's global one, which other libraries may fill)."""
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, process_resident_memory_bytes, …

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
"""Seconds, for what waits on a model (a turn, a model call, the first token)."""
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
"""Seconds, for Mirror's own work (its overhead over the model, an append, a commit)."""

# ---------------------------------------------------------------------------- gateway
HTTP_REQUESTS = Counter("mirror_http_requests", "HTTP requests a gateway answered, by route template, method and status",
                        ("route", "method", "status"), registry=REGISTRY)
HTTP_SECONDS = Histogram("mirror_http_request_duration_seconds", "Time a gateway took to answer, by route template "
                         "(to the end of the body: a streamed reply's whole stream)", ("route", "method"),
                         buckets=LATENCY_BUCKETS, registry=REGISTRY)
LIMITS_HIT = Counter("mirror_limits_hit", "Requests refused by a tenant's limits (429/403), by tenant and limit",
                     ("tenant", "limit"), registry=REGISTRY)
ASK_RETRIES = Counter("mirror_conversation_retries", "Calls of a conversation a gateway made again, by why "
                      "(fenced: another writer or a regressed stream; passivated; died: its host or actor)",
                      ("reason",), registry=REGISTRY)
# ---------------------------------------------------------------------------- conversations (hosts)
TURNS = Counter("mirror_turns", "Turns answered (the turn event acknowledged), by tenant and mind",
                ("tenant", "mind"), registry=REGISTRY)
TURN_FAILURES = Counter("mirror_turn_failures", "Turns that failed, by tenant and the failure's class",
                        ("tenant", "error"), registry=REGISTRY)
TURN_SECONDS = Histogram("mirror_turn_duration_seconds", "A turn inside its conversation: recall, the Talker's model "
                         "call(s) and the fenced append until acknowledged", ("tenant",), buckets=LATENCY_BUCKETS,
                         registry=REGISTRY)
OVERHEAD_SECONDS = Histogram("mirror_turn_overhead_seconds", "A turn's time not spent waiting on the model: recall, "
                             "prompt building, the fenced append", ("tenant",), buckets=FAST_BUCKETS, registry=REGISTRY)
FIRST_TOKEN_SECONDS = Histogram("mirror_time_to_first_token_seconds", "From a streamed turn's start in its "
                                "conversation to the reply's first piece", ("tenant",), buckets=LATENCY_BUCKETS,
                                registry=REGISTRY)
APPEND_SECONDS = Histogram("mirror_append_duration_seconds", "A conversation's fenced append, until the broker "
                           "acknowledged it", buckets=FAST_BUCKETS, registry=REGISTRY)
MODEL_SECONDS = Histogram("mirror_model_call_duration_seconds", "A model call that answered, by stage", ("stage",),
                          buckets=LATENCY_BUCKETS, registry=REGISTRY)
MODEL_TOKENS = Counter("mirror_model_tokens", "Model tokens (reported by the model, else estimated), by tenant, "
                       "stage and type (input, output)", ("tenant", "stage", "type"), registry=REGISTRY)
MODEL_FAILURES = Counter("mirror_model_call_failures", "Model calls that failed or answered unusably, by stage and "
                         "error kind", ("stage", "error"), registry=REGISTRY)
REFLECTIONS = Counter("mirror_reflections", "Reflections run, by outcome (accepted, rejected)", ("outcome",),
                      registry=REGISTRY)
SNAPSHOTS = Counter("mirror_snapshots", "Conversation snapshots, by outcome (written, skipped: the log had not "
                    "committed in time, failed)", ("outcome",), registry=REGISTRY)
FENCED = Counter("mirror_fenced", "Conversations that lost their fence (another writer appended, or the stream "
                 "went back under them)", ("tenant",), registry=REGISTRY)
THOUGHT_LAG_SECONDS = Histogram("mirror_thought_lag_seconds", "From a turn's reply to the end of the thinking it "
                                "started (every stage through)", buckets=LATENCY_BUCKETS, registry=REGISTRY)
# ---------------------------------------------------------------------------- ingesters
INGEST_ACKNOWLEDGED = Gauge("mirror_ingest_acknowledged_seq", "The newest stream seq an ingester knows the broker "
                            "holds for it", ("shard",), registry=REGISTRY)
INGEST_COMMITTED = Gauge("mirror_ingest_committed_seq", "The stream seq an ingester has committed to its DuckDB log",
                         ("shard",), registry=REGISTRY)
INGEST_LAG = Gauge("mirror_ingest_lag_messages", "Acknowledged but not yet committed to the log (stream messages)",
                   ("shard",), registry=REGISTRY)
INGESTED = Counter("mirror_ingested_events", "Events committed to the log", ("shard",), registry=REGISTRY)
COMMIT_SECONDS = Histogram("mirror_ingest_commit_duration_seconds", "One batch's DuckDB commit", ("shard",),
                           buckets=FAST_BUCKETS, registry=REGISTRY)
REGRESSIONS = Counter("mirror_stream_regressions", "Times an ingester found its stream behind its log (gone "
                      "backwards, or a delivery missing) and consumed again from the committed offset", ("shard",),
                      registry=REGISTRY)


class _Family:
    """A metric read when scraped (:func:`watch`): its name, help and labels, declared like the others."""

    def __init__(self, name: str, kind: str, documentation: str, labelnames: tuple[str, ...] = ()) -> None:
        self._name, self._type, self._documentation, self._labelnames = name, kind, documentation, labelnames

    def family(self) -> CounterMetricFamily | GaugeMetricFamily:
        cls = CounterMetricFamily if self._type == "counter" else GaugeMetricFamily
        return cls(self._name, self._documentation, labels=self._labelnames)


LIVE = _Family("mirror_conversations_live", "gauge", "Conversations live in a host now")
ACTIVATED = _Family("mirror_conversations_activated", "counter", "Conversations a host activated (rebuilt from the log)")
PASSIVATED = _Family("mirror_conversations_passivated", "counter", "Conversations a host passivated (idle or crowded out)")
EVICTED = _Family("mirror_conversations_evicted", "counter", "Passivations because the host held max_live_per_host")
ACTIVATION_FAILURES = _Family("mirror_conversation_activation_failures", "counter", "Activations that failed")
THINKING = _Family("mirror_conversations_thinking", "gauge", "Live conversations whose Thinker is running or behind")
BACKLOG = _Family("mirror_model_calls_waiting", "gauge", "Model calls waiting for a slot of the process's fair share, "
                  "by tenant and priority (talker, thinker: the thinking backlog)", ("tenant", "priority"))
RUNNING = _Family("mirror_model_calls_running", "gauge", "Model calls holding a slot now, by tenant", ("tenant",))
SLOTS = _Family("mirror_model_slots", "gauge", "The process's model slots (its client's max_concurrency)")
REFUSED = _Family("mirror_model_admissions_refused", "counter", "Model calls the fair share refused (the turn got "
                  "429/503), by tenant", ("tenant",))
SHED = _Family("mirror_thinking_shed", "counter", "Thinking calls the fair share shed (backlog full), by tenant",
               ("tenant",))
SLOT_SECONDS = _Family("mirror_model_slot_seconds", "counter", "Slot-seconds model calls held a slot of the process's "
                      "fair share, by tenant and priority (talker, thinker)", ("tenant", "priority"))
IDLE_SECONDS = _Family("mirror_model_slots_idle_seconds", "counter", "Slot-seconds no model call held (free slots × "
                       "time): with mirror_model_slot_seconds, where the slots' time went")
WATCHED = (LIVE, ACTIVATED, PASSIVATED, EVICTED, ACTIVATION_FAILURES, THINKING, BACKLOG, RUNNING, SLOTS, REFUSED, SHED,
           SLOT_SECONDS, IDLE_SECONDS)

GENAI: Mapping[str, str] = {
    "mirror_model_call_duration_seconds": "gen_ai.client.operation.duration",
    "mirror_model_tokens_total": "gen_ai.client.token.usage (its sum, as a counter; type = gen_ai.token.type)",
    "mirror_time_to_first_token_seconds": "gen_ai.server.time_to_first_token",
    "mirror_turn_duration_seconds": "gen_ai.server.request.duration",
    "mirror_http_request_duration_seconds": "http.server.request.duration",
}
"""OpenTelemetry's name for the same figure, where its conventions have one."""

_DEFINED: tuple[Any, ...] = (
    HTTP_REQUESTS, HTTP_SECONDS, LIMITS_HIT, ASK_RETRIES, TURNS, TURN_FAILURES, TURN_SECONDS, OVERHEAD_SECONDS,
    FIRST_TOKEN_SECONDS, APPEND_SECONDS, MODEL_SECONDS, MODEL_TOKENS, MODEL_FAILURES, REFLECTIONS, SNAPSHOTS, FENCED,
    THOUGHT_LAG_SECONDS, INGEST_ACKNOWLEDGED, INGEST_COMMITTED, INGEST_LAG, INGESTED, COMMIT_SECONDS, REGRESSIONS,
    *WATCHED,
)


def catalogue() -> list[tuple[str, str, tuple[str, ...], str]]:
    """Every metric Mirror exposes, as (name as scraped, type, labels, help): the docs' table."""
    rows = []
    for metric in _DEFINED:
        name = metric._name + ("_total" if metric._type == "counter" else "")
        rows.append((name, metric._type, tuple(metric._labelnames), metric._documentation))
    return rows


# ---------------------------------------------------------------------------- switching and serving
_state: dict[str, Any] = {"on": True, "address": None}
_lock = threading.Lock()


def configure(*, enabled: bool) -> None:
    """Turn recording on or off in this process (each process that does Mirror's work calls it
    with its settings' ``metrics`` before its first request)."""
    _state["on"] = enabled


def enabled() -> bool:
    return bool(_state["on"])


def serve(host: str) -> str | None:
    """Serve :data:`REGISTRY` on ``host`` at a free port (once per process: a second call returns
    the first address); ``HOST:PORT``, or None when metrics are off."""
    if not _state["on"]:
        return None
    with _lock:
        if _state["address"] is None:
            server, _ = start_http_server(0, addr=host, registry=REGISTRY)
            _state["address"] = f"{host}:{server.server_port}"
        return str(_state["address"])


def address() -> str | None:
    """Where this process serves its metrics (:func:`serve`), if it does."""
    return _state["address"]


def exposition() -> tuple[bytes, str]:
    """This process's metrics in Prometheus's text format, and that format's content type."""
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


class _Watched(Collector):
    """The figures of every :func:`watch` source in this process, summed (a process runs one host;
    a test may run several tables in one)."""

    def __init__(self) -> None:
        self.sources: list[weakref.WeakMethod[Callable[[], Mapping[str, Any]]]] = []

    def describe(self) -> list[Metric]:
        return []  # read at scrape time only (nothing asked at registration)

    def collect(self) -> Iterator[Metric]:
        for _ in range(3):  # read from the scrape's thread while the event loop runs: a dict may change size
            try:
                figures = [source() for source in (ref() for ref in self.sources) if source is not None]
                break
            except RuntimeError:
                continue
        else:
            return
        if figures:
            yield from watched_families(_summed(figures))


_WATCHED = _Watched()
REGISTRY.register(_WATCHED)


def watch(figures: Callable[[], Mapping[str, Any]]) -> None:
    """Read ``figures()`` (a bound method; held weakly) at each scrape: a host's ``{"live",
    "activations", …, "fair_share": …}``. Nothing is read between scrapes."""
    _WATCHED.sources.append(weakref.WeakMethod(figures))


def _summed(all_figures: list[Mapping[str, Any]]) -> dict[str, Any]:
    total: dict[str, Any] = {}
    tenants: dict[str, dict[str, float]] = {}
    slots = idle = 0.0
    for figures in all_figures:
        for key, value in figures.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
        share = figures.get("fair_share")
        if isinstance(share, Mapping):
            slots += float(share.get("slots", 0))
            idle += float(share.get("idle_s", 0))
            for tenant, row in share.get("tenants", {}).items():
                into = tenants.setdefault(tenant, {})
                for key, value in row.items():
                    into[key] = into.get(key, 0.0) + float(value)
            total["fair_share"] = {"slots": slots, "idle_s": idle, "tenants": tenants}
    return total


def watched_families(figures: Mapping[str, Any]) -> Iterator[Metric]:
    """The families :data:`WATCHED` from a host's figures (keys missing are left out)."""
    plain = {LIVE: "live", ACTIVATED: "activations", PASSIVATED: "passivations", EVICTED: "evictions",
             ACTIVATION_FAILURES: "failed_activations", THINKING: "thinking"}
    for metric, key in plain.items():
        if key in figures:
            family = metric.family()
            family.add_metric([], float(figures[key]))
            yield family
    share = figures.get("fair_share")
    if not isinstance(share, Mapping):
        return
    slots = SLOTS.family()
    slots.add_metric([], float(share.get("slots", 0)))
    yield slots
    if "idle_s" in share:
        idle = IDLE_SECONDS.family()
        idle.add_metric([], float(share["idle_s"]))
        yield idle
    backlog, running, refused, shed = BACKLOG.family(), RUNNING.family(), REFUSED.family(), SHED.family()
    held = SLOT_SECONDS.family()
    for tenant, row in share.get("tenants", {}).items():
        backlog.add_metric([tenant, "talker"], float(row["waiting_talker"]))
        backlog.add_metric([tenant, "thinker"], float(row["waiting_thinker"]))
        running.add_metric([tenant], float(row["running"]))
        refused.add_metric([tenant], float(row["refused"]))
        shed.add_metric([tenant], float(row["shed"]))
        for priority in ("talker", "thinker"):
            held.add_metric([tenant, priority], float(row.get(f"{priority}_s", 0.0)))
    yield from (backlog, running, refused, shed, held)


# ---------------------------------------------------------------------------- recording: gateways
_HTTP_SERIES: dict[tuple[str, str, int], tuple[Any, Any]] = {}
"""The request series by (route template, method, status), looked up once each: the labels
are a bounded set, and ``labels()`` takes a lock and checks them on every call (issue 38)."""


def request_done(route: str, method: str, status: int, seconds: float) -> None:
    if _state["on"]:
        series = _HTTP_SERIES.get((route, method, status))
        if series is None:
            series = _HTTP_SERIES[(route, method, status)] = (HTTP_REQUESTS.labels(route, method, str(status)),
                                                              HTTP_SECONDS.labels(route, method))
        series[0].inc()
        series[1].observe(seconds)


def limit_hit(tenant: str, error: BaseException) -> None:
    """A request refused by ``tenant``'s limits (``error``'s ``limit``; an error without one, the
    broker down, is no limit)."""
    limit = getattr(error, "limit", None)
    if _state["on"] and isinstance(limit, str):
        LIMITS_HIT.labels(tenant, limit).inc()


def conversation_retried(reason: str) -> None:
    if _state["on"]:
        ASK_RETRIES.labels(reason).inc()


# ---------------------------------------------------------------------------- recording: conversations
STAGE_OF_EVENT: Mapping[str, str] = {"turn": "talker", "monologue": "threads", "narrative": "controller",
                                     "belief": "memory", "edge": "memory", "memory_step": "memory"}
"""The stage an event's model call belongs to, by event type (other types are their own stage:
insight, reflection, a persona's interpretation, plan, appraisal, emotion, relationship, goal, episode)."""
STAGE_OF_FAILURE: Mapping[str, str] = {"monologue": "threads"}
"""A ``thinker_failed`` stage under the name its answers are counted by."""


def turn_done(tenant: str, mind: str, turn_ms: float, model_ms: float) -> None:
    """A turn answered in ``turn_ms``, ``model_ms`` of them waiting on the model."""
    if _state["on"]:
        TURNS.labels(tenant, mind).inc()
        TURN_SECONDS.labels(tenant).observe(turn_ms / 1000)
        OVERHEAD_SECONDS.labels(tenant).observe(max(0.0, turn_ms - model_ms) / 1000)


def turn_failed(tenant: str, error: BaseException) -> None:
    if _state["on"]:
        TURN_FAILURES.labels(tenant, type(error).__name__).inc()


def first_token_sink(sink: Callable[[str], None] | None, tenant: str) -> Callable[[str], None] | None:
    """``sink`` (a streamed turn's), timing its first piece from now (``mirror_time_to_first_token_seconds``)."""
    if sink is None or not _state["on"]:
        return sink
    started = time.perf_counter()
    waiting = [True]

    def timed(piece: str) -> None:
        if waiting[0]:
            waiting[0] = False
            FIRST_TOKEN_SECONDS.labels(tenant).observe(time.perf_counter() - started)
        sink(piece)

    return timed


def append_done(seconds: float) -> None:
    if _state["on"]:
        APPEND_SECONDS.observe(seconds)


def appended(tenant: str, events: Sequence[Any]) -> None:
    """Acknowledged events: each model call they record (by its provenance; a call that made
    several events counts once) by stage, with its tokens; a ``thinker_failed`` as a failure;
    a ``reflection`` by outcome."""
    if not _state["on"]:
        return
    seen: set[str] = set()
    for event in events:
        payload = event.payload
        kind = payload.TYPE
        if kind == "thinker_failed":
            MODEL_FAILURES.labels(STAGE_OF_FAILURE.get(payload.stage, payload.stage), payload.error_type).inc()
            continue
        if kind == "reflection":
            REFLECTIONS.labels("accepted" if payload.accepted else "rejected").inc()
        provenance = event.provenance
        if provenance is None or provenance.request_fingerprint in seen or not provenance.latency_ms:
            continue  # no model call (or one replayed from the record): nothing was asked
        seen.add(provenance.request_fingerprint)
        stage = STAGE_OF_EVENT.get(kind, kind)
        MODEL_SECONDS.labels(stage).observe(provenance.latency_ms / 1000)
        MODEL_TOKENS.labels(tenant, stage, "input").inc(provenance.prompt_tokens)
        MODEL_TOKENS.labels(tenant, stage, "output").inc(provenance.completion_tokens)


def model_failed(stage: str, error: BaseException) -> None:
    """A model call that raised where no event records it (the Talker's: the turn fails)."""
    if _state["on"]:
        MODEL_FAILURES.labels(stage, str(getattr(error, "kind", "") or type(error).__name__)).inc()


def snapshot(outcome: str) -> None:
    if _state["on"]:
        SNAPSHOTS.labels(outcome).inc()


def fenced(tenant: str) -> None:
    if _state["on"]:
        FENCED.labels(tenant).inc()


def thought_through(seconds: float) -> None:
    if _state["on"]:
        THOUGHT_LAG_SECONDS.observe(seconds)


# ---------------------------------------------------------------------------- recording: ingesters
def ingest_seen(shard: str, acknowledged_seq: int) -> None:
    if _state["on"]:
        INGEST_ACKNOWLEDGED.labels(shard).set(acknowledged_seq)
        INGEST_LAG.labels(shard).set(max(0.0, acknowledged_seq - INGEST_COMMITTED.labels(shard)._value.get()))


def ingest_committed(shard: str, committed_seq: int, events: int, seconds: float) -> None:
    if _state["on"]:
        INGEST_COMMITTED.labels(shard).set(committed_seq)
        INGESTED.labels(shard).inc(events)
        COMMIT_SECONDS.labels(shard).observe(seconds)
        INGEST_LAG.labels(shard).set(max(0.0, INGEST_ACKNOWLEDGED.labels(shard)._value.get() - committed_seq))


def stream_regressed(shard: str) -> None:
    if _state["on"]:
        REGRESSIONS.labels(shard).inc()


__all__ = [
    "FAST_BUCKETS", "GENAI", "LATENCY_BUCKETS", "REGISTRY", "STAGE_OF_EVENT", "address", "append_done", "appended",
    "catalogue", "configure", "conversation_retried", "enabled", "exposition", "first_token_sink", "fenced",
    "ingest_committed", "ingest_seen", "limit_hit", "model_failed", "request_done", "serve", "snapshot",
    "stream_regressed", "thought_through", "turn_done", "turn_failed", "watch", "watched_families",
]
