"""Events: what happened — typed payloads, the envelope, the codec, the bus and the log."""

from .bus import EventBus, Head, InMemoryBus
from .codec import decode, encode, register_upcaster
from .duckdb_log import DuckDBEventLog
from .envelope import Event, make_event
from .errors import (
    AppendConflict,
    BusError,
    CodecError,
    CorruptEvent,
    EventError,
    InvalidIdentifier,
    LogError,
    LogUnavailable,
    MirrorError,
    UnknownEventType,
)
from .ids import MAIN_BRANCH, StreamKey, event_id, validate_identifier
from .ingester import Ingester, IngesterSettings, run_ingester
from .jetstream import JetStreamBus, StreamSettings, connect_nats
from .log import EventLogReader, Loaded, Snapshot
from .log_service import LogClient, LogService
from .nats_server import EmbeddedNats
from .payloads import (
    PAYLOAD_TYPES,
    Belief,
    Edge,
    Fork,
    Insight,
    Monologue,
    Narrative,
    Provenance,
    Reflection,
    ThinkerFailed,
    Turn,
)

__all__ = [
    "AppendConflict", "Belief", "BusError", "CodecError", "CorruptEvent", "DuckDBEventLog", "Edge",
    "EmbeddedNats", "Event", "EventBus", "EventError", "EventLogReader", "Fork", "Head", "InMemoryBus",
    "Ingester", "IngesterSettings", "Insight", "InvalidIdentifier", "JetStreamBus", "Loaded", "LogClient",
    "LogError", "LogService", "LogUnavailable", "MAIN_BRANCH", "MirrorError", "Monologue", "Narrative",
    "PAYLOAD_TYPES", "Provenance", "Reflection", "Snapshot", "StreamKey", "StreamSettings", "ThinkerFailed",
    "Turn", "UnknownEventType", "connect_nats", "decode", "encode", "event_id", "make_event",
    "register_upcaster", "run_ingester", "validate_identifier",
]
