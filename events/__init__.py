"""Events: what happened — typed payloads, the envelope, the codec, the bus and the log.

The bottom layer: imports nothing else of Mirror but the root helpers (``mirror.processes``).
This package exports the model and the ports; adapters are imported from their modules.

- the model: ``envelope`` (the event and its envelope), ``payloads`` (one frozen class per
  event type), ``codec`` (events to msgpack bytes and back: the one entry for both),
  ``upcasting`` (older schema versions brought up to the current one on read), ``_typecheck``
  (the codec's checks of decoded maps against the payload classes' annotations), ``ids``
  (validated identifiers, stream keys, event ids), ``vectors`` (embeddings as bytes),
  ``shards`` (which shard's log holds a tenant), ``errors``;
- the ports: ``bus`` (:class:`EventBus`, fenced appends; and ``InMemoryBus``), ``log``
  (:class:`EventLogReader`, :class:`SnapshotStore`, :class:`IngestProgress`), ``infrastructure``
  (:class:`Infrastructure`: how a process opens its bus and logs, chosen in one place),
  ``counters`` (:class:`SharedCounters`: small records changed atomically by every process);
- in-memory adapters: ``memory_log`` (``InMemoryEventLog``), ``memory_infrastructure``;
- moving conversations: ``archive`` (the export archive: a tar with a manifest of digests, checked
  on read) and ``transfer`` (export from a log, import through the bus);
- ``nats/`` (the JetStream bus, the log's read API over NATS, the NATS infrastructure, the
  embedded server and cluster) and ``duckdb/`` (the log file and the ingester).

Other layers reach NATS and DuckDB only through the ports.

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
    "BusUnavailable": "errors",
    "CodecError": "errors",
    "Connections": "infrastructure",
    "CounterContended": "errors",
    "CorruptEvent": "errors",
    "decode": "codec",
    "Edge": "payloads",
    "encode": "codec",
    "Event": "envelope",
    "event_id": "ids",
    "EventBus": "bus",
    "EventError": "errors",
    "EventLogReader": "log",
    "Fork": "payloads",
    "Head": "bus",
    "Infrastructure": "infrastructure",
    "IngestProgress": "log",
    "Insight": "payloads",
    "InvalidIdentifier": "errors",
    "Loaded": "log",
    "LogAccess": "log",
    "LogError": "errors",
    "LogLocked": "errors",
    "LogStats": "log",
    "LogUnavailable": "errors",
    "MAIN_BRANCH": "ids",
    "make_event": "envelope",
    "MemoryStep": "payloads",
    "MirrorError": "errors",
    "Monologue": "payloads",
    "Narrative": "payloads",
    "PAYLOAD_TYPES": "payloads",
    "Provenance": "payloads",
    "Recall": "payloads",
    "Reflection": "payloads",
    "register_upcaster": "upcasting",
    "ShardMap": "shards",
    "ShardMapError": "errors",
    "SharedCounters": "counters",
    "Snapshot": "log",
    "SnapshotStore": "log",
    "StreamKey": "ids",
    "Subscription": "bus",
    "ThinkerFailed": "payloads",
    "Turn": "payloads",
    "UnknownEventType": "errors",
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
