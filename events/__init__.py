"""Events: what happened — typed payloads, the envelope, the codec, the bus and the log.

The bottom layer: imports nothing else of Mirror. At the top the model and the ports
(``envelope``, ``payloads``, ``codec``, ``ids``, ``bus`` and ``log`` (the ports and their
in-memory adapters), ``shards`` (which shard's log holds a tenant), ``errors``); the adapters
live in ``nats/`` (JetStream bus, the log's read
API over NATS, the embedded server and cluster) and ``duckdb/`` (the log file and the ingester). Other
layers reach NATS and DuckDB only through the ports.

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
    "DuckDBEventLog": "duckdb.log",
    "Edge": "payloads",
    "EmbeddedNats": "nats.server",
    "EmbeddedNatsCluster": "nats.cluster",
    "Event": "envelope",
    "EventBus": "bus",
    "EventError": "errors",
    "EventLogReader": "log",
    "Fork": "payloads",
    "Head": "bus",
    "InMemoryBus": "bus",
    "InMemoryEventLog": "memory_log",
    "Ingester": "duckdb.ingester",
    "IngesterSettings": "duckdb.ingester",
    "Insight": "payloads",
    "InvalidIdentifier": "errors",
    "JetStreamBus": "nats.jetstream",
    "Loaded": "log",
    "LogClient": "nats.log_service",
    "LogError": "errors",
    "LogLocked": "errors",
    "LogService": "nats.log_service",
    "LogUnavailable": "errors",
    "MAIN_BRANCH": "ids",
    "MirrorError": "errors",
    "MemoryStep": "payloads",
    "Monologue": "payloads",
    "Narrative": "payloads",
    "PAYLOAD_TYPES": "payloads",
    "Provenance": "payloads",
    "Recall": "payloads",
    "Reflection": "payloads",
    "ShardMap": "shards",
    "ShardMapError": "errors",
    "Snapshot": "log",
    "StreamKey": "ids",
    "StreamSettings": "nats.jetstream",
    "Subscription": "bus",
    "ThinkerFailed": "payloads",
    "Turn": "payloads",
    "UnknownEventType": "errors",
    "connect_nats": "nats.jetstream",
    "decode": "codec",
    "encode": "codec",
    "event_id": "ids",
    "make_event": "envelope",
    "register_upcaster": "codec",
    "run_ingester": "duckdb.ingester",
    "validate_identifier": "ids",
    "vector_from_bytes": "vectors",
    "vector_to_bytes": "vectors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'mirror.events' has no attribute {name!r}") from None
    return getattr(importlib.import_module(f".{module}", __name__), name)
