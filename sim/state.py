"""The simulator's mutable state: counters, the fault script, in-flight calls (see ``server`` for what they mean).

One :class:`SimState` per app (``app.state.sim``), touched only from that app's event loop, so
it needs no lock; the route handlers in ``routes`` read and update it.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from mirror.sim import memory as sim_memory
from mirror.sim import reflection as sim_reflection
from mirror.sim.settings import (
    FAULT_KINDS,
    NO_FAULT,
    LatencyModel,
    SimSettings,
    drawn_fault,
    parse_latency,
    stream_rng,
)

__all__ = ["NO_RESPONSE_FORMAT", "SimState", "schema_name"]

NO_RESPONSE_FORMAT = "none"  # the `response_formats` key of chat calls that sent none


def schema_name(response_format: Mapping[str, Any] | None) -> str | None:
    """The schema a chat call asks for: its name, or for a nameless schema the Mirror schema it is."""
    if not response_format:
        return None
    spec = response_format.get("json_schema")
    if isinstance(spec, Mapping) and spec.get("name"):
        return str(spec["name"])
    return sim_memory.schema_kind(response_format) or sim_reflection.schema_kind(response_format)


@dataclass
class SimState:
    """The server's mutable counters; touched only from its event loop, so it needs no lock."""

    settings: SimSettings
    latency: LatencyModel
    script: deque[str] = field(default_factory=deque)
    chat_calls: int = 0
    embedding_calls: int = 0
    authorized_calls: int = 0
    bad_requests: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    chat_in_flight: int = 0
    max_chat_in_flight: int = 0
    faults: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FAULT_KINDS, 0))
    response_formats: dict[str, int] = field(default_factory=dict)
    last_response_format: Any = None
    embedding_latency: LatencyModel | None = None

    def __post_init__(self) -> None:
        if self.embedding_latency is None and self.settings.embedding_latency is not None:
            self.embedding_latency = parse_latency(self.settings.embedding_latency)

    @property
    def calls(self) -> int:
        return self.chat_calls + self.embedding_calls

    def begin_call(self, request: Request, chat_body: Mapping[str, Any] | None = None) -> tuple[str, float]:
        """Count one model call (a chat call when given its body); return its fault and latency
        (seconds), fixed by its index."""
        model = self.latency if chat_body is not None or self.embedding_latency is None else self.embedding_latency
        latency = model.sample_seconds(stream_rng(self.settings.seed, self.calls, "latency"))
        if "authorization" in request.headers:
            self.authorized_calls += 1
        if chat_body is None:
            self.embedding_calls += 1
            return NO_FAULT, latency
        response_format = chat_body.get("response_format")
        kind = response_format["type"] if response_format is not None else NO_RESPONSE_FORMAT  # checked by routes._check_chat
        self.response_formats[kind] = self.response_formats.get(kind, 0) + 1
        self.last_response_format = response_format
        if self.script:
            fault = self.script.popleft()
        elif self.settings.fault_schemas and schema_name(response_format) not in self.settings.fault_schemas:
            fault = NO_FAULT
        else:
            fault = drawn_fault(self.settings, self.chat_calls)
        self.chat_calls += 1
        if fault != NO_FAULT:
            self.faults[fault] += 1
        return fault, latency

    @contextlib.contextmanager
    def flight(self, *, chat: bool = False) -> Iterator[None]:
        """One call in flight (chat or embeddings; ``chat`` counts it among the chat calls too)."""
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if chat:
            self.chat_in_flight += 1
            self.max_chat_in_flight = max(self.max_chat_in_flight, self.chat_in_flight)
        try:
            yield
        finally:
            self.in_flight -= 1
            if chat:
                self.chat_in_flight -= 1

    def reset(self) -> None:
        self.script.clear()
        self.chat_calls = self.embedding_calls = self.authorized_calls = self.bad_requests = 0
        self.max_in_flight = self.in_flight
        self.max_chat_in_flight = self.chat_in_flight
        self.faults = dict.fromkeys(FAULT_KINDS, 0)
        self.response_formats = {}
        self.last_response_format = None

    def stats(self) -> dict[str, Any]:
        return {
            "calls": self.calls, "chat_calls": self.chat_calls, "embedding_calls": self.embedding_calls,
            "faults": dict(self.faults), "in_flight": self.in_flight, "max_in_flight": self.max_in_flight,
            "max_chat_in_flight": self.max_chat_in_flight,
            "authorized_calls": self.authorized_calls, "bad_requests": self.bad_requests, "script": list(self.script),
            "response_formats": dict(self.response_formats), "last_response_format": self.last_response_format,
        }
