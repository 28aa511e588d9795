"""Events: what happened — typed payloads, the envelope, the codec, the bus and the log.

Names are imported lazily (PEP 562), so a process that needs only the codec does not pay for
DuckDB and Arrow: every Ray actor process imports this package.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "AppendConflict": "errors",
    "Belief": "payloads",
    "BusError": "errors",
    "CodecError": "errors",
    "CorruptEvent": "errors",
    "DuckDBEventLog": "duckdb_log",
    "Edge": "payloads",
    "EmbeddedNats": "nats_server",
    "Event": "envelope",
    "EventBus": "bus",
    "EventError": "errors",
    "EventLogReader": "log",
    "Fork": "payloads",
    "Head": "bus",
    "InMemoryBus": "bus",
    "Ingester": "ingester",
    "IngesterSettings": "ingester",
    "Insight": "payloads",
    "InvalidIdentifier": "errors",
    "JetStreamBus": "jetstream",
    "Loaded": "log",
    "LogClient": "log_service",
    "LogError": "errors",
    "LogLocked": "errors",
    "LogService": "log_service",
    "LogUnavailable": "errors",
    "MAIN_BRANCH": "ids",
    "MirrorError": "errors",
    "Monologue": "payloads",
    "Narrative": "payloads",
    "PAYLOAD_TYPES": "payloads",
    "Provenance": "payloads",
    "Reflection": "payloads",
    "Snapshot": "log",
    "StreamKey": "ids",
    "StreamSettings": "jetstream",
    "ThinkerFailed": "payloads",
    "Turn": "payloads",
    "UnknownEventType": "errors",
    "connect_nats": "jetstream",
    "decode": "codec",
    "encode": "codec",
    "event_id": "ids",
    "make_event": "envelope",
    "register_upcaster": "codec",
    "run_ingester": "ingester",
    "validate_identifier": "ids",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'mirror.events' has no attribute {name!r}") from None
    return getattr(importlib.import_module(f".{module}", __name__), name)
