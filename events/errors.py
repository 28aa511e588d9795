"""Errors of the event layer.

    MirrorError
    └── EventError
        ├── InvalidIdentifier        an id that must never reach a subject or a file name
        ├── CodecError
        │   ├── CorruptEvent         bytes that are not a valid event record
        │   └── UnknownEventType     a type (or schema version) this build cannot read
        ├── AppendConflict           another writer appended first: the fence rejected us
        ├── BusError                 the broker failed or did not answer
        │   ├── BusUnavailable       the connection to the broker is down (reconnecting)
        │   └── CounterContended     a shared counter kept changing under us past every retry
        ├── InvalidSyncInterval      a JetStream sync interval that is neither "always" nor a duration
        ├── ShardMapError            a shard map that would store an event twice, or a shard it lacks
        ├── LogError
        │   ├── LogUnavailable       the log's owner did not answer a read
        │   └── LogLocked            another process holds the DuckDB file's write lock
        ├── ConversationForgotten    the conversation was erased: only its tombstone is left
        │   └── DataKeyErased        a stream message sealed with a data key that was erased (forgotten)
        ├── ArchiveInvalid           an export archive that is not one, or whose bytes do not match its manifest
        └── ImportRefused            an import whose conversation exists already (or was forgotten)

Every error carries the identifiers it is about and says how to fix the problem.
"""

from __future__ import annotations

from typing import Any


def _restored(cls: type[MirrorError], args: tuple[object, ...], fields: dict[str, object]) -> MirrorError:
    """An error as :meth:`MirrorError.__reduce__` took it apart, without calling its ``__init__``."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(fields)
    return error


class MirrorError(Exception):
    """Root of every error Mirror raises on purpose."""

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its class, message and fields: most errors' constructors take their fields,
        not the message, so the default (``cls(*args)``) would fail to unpickle them, and Ray
        would hand the caller an ``UnserializableException`` (answered 500) instead of the error."""
        return _restored, (type(self), self.args, dict(self.__dict__))


class EventError(MirrorError):
    """Something went wrong recording, moving or reading events."""


class InvalidIdentifier(EventError, ValueError):
    def __init__(self, kind: str, value: object, reason: str) -> None:
        self.kind = kind
        self.value = value
        self.reason = reason
        super().__init__(
            f"invalid {kind} {value!r}: {reason}; use 1-64 characters from [A-Za-z0-9_-]"
        )


class CodecError(EventError):
    """An event record could not be encoded or decoded."""

    def __init__(
        self,
        message: str,
        *,
        tenant: str | None = None,
        conversation: str | None = None,
        branch: str | None = None,
        seq: int | None = None,
    ) -> None:
        self.tenant = tenant
        self.conversation = conversation
        self.branch = branch
        self.seq = seq
        where = ""
        if conversation is not None:
            where = f" (tenant={tenant} conversation={conversation} branch={branch} seq={seq})"
        super().__init__(message + where)


class CorruptEvent(CodecError):
    """The bytes are not a well-formed event record."""


class UnknownEventType(CodecError):
    """The record names a type or schema version this build has no class or upcaster for."""


class AppendConflict(EventError):
    """The append was fenced off: the conversation's log moved since this writer last saw it.

    The writer must stop, reload the conversation and decide again; it must never retry the
    same events blindly, because another writer owns the sequence now.
    """

    def __init__(
        self,
        tenant: str,
        conversation: str,
        branch: str,
        *,
        expected_seq: int,
        detail: str,
    ) -> None:
        self.tenant = tenant
        self.conversation = conversation
        self.branch = branch
        self.expected_seq = expected_seq
        self.detail = detail
        super().__init__(
            f"append to {tenant}/{conversation}/{branch} at seq {expected_seq} was fenced: "
            f"{detail}; another writer appended first - reload the conversation and retry"
        )


class BusError(EventError):
    """The message broker failed or did not answer in time."""


class BusUnavailable(BusError):
    """The connection to the broker is down and did not come back within a short grace.

    Raised at once rather than after the publish and retry deadlines, so a caller (the
    gateway) can answer 503 while the client reconnects by itself in the background."""

    def __init__(self, url: str, grace_s: float) -> None:
        self.url = url
        self.grace_s = grace_s
        super().__init__(f"the event bus (NATS at {url}) is unreachable: not reconnected within {grace_s:g}s; "
                         "the client keeps reconnecting - retry in a few seconds")


class CounterContended(BusError):
    """A shared counter (:mod:`mirror.events.counters`) changed under every one of our compare-and-set tries.

    Writers of one key retry on each other's revisions; this many losses in a row means far
    more writers of the key than it was made for, so the caller is told to come back."""

    def __init__(self, key: str, attempts: int) -> None:
        self.key = key
        self.attempts = attempts
        super().__init__(f"the shared counter {key!r} changed under each of {attempts} attempts to update it; "
                         "too many writers at once - retry in a moment")


class InvalidSyncInterval(EventError, ValueError):
    """How often nats-server is to fsync its JetStream store, given as something it would refuse."""

    def __init__(self, value: object, reason: str) -> None:
        self.value = value
        self.reason = reason
        super().__init__(f"invalid JetStream sync interval {value!r}: {reason}; give 'always' (fsync before every "
                         "acknowledgement, the default) or a duration between fsyncs such as '2m', '10s' or '1m30s'")


class ShardMapError(EventError, ValueError):
    """The shard map is not one: a tenant on two shards, a shard listed twice, an unknown shard."""

    def __init__(self, problem: str, *, shard: str | None = None, tenant: str | None = None) -> None:
        self.shard = shard
        self.tenant = tenant
        super().__init__(f"shard map: {problem}; each tenant goes on at most one shard, written "
                         "SHARD=TENANT,TENANT (tenants listed nowhere live on the default shard)")


class LogError(EventError):
    """The event log failed to read or write."""


class LogUnavailable(LogError):
    """The process that owns the log did not answer; is `mirror ingest` running?"""


class LogLocked(LogError):
    """Another process owns the DuckDB file (DuckDB allows one writing process).

    Transient when that process is exiting (an ingester being restarted), permanent when a
    second ingester was pointed at the same file.
    """

    def __init__(self, path: object, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(
            f"cannot open the event log {path}: another process holds its lock ({detail}); "
            "only one ingester may own a file - stop the other one or give this shard its own --db"
        )


class ConversationForgotten(EventError):
    """The conversation was forgotten (erased): its tombstone refuses reads and writes for good."""

    def __init__(self, tenant: str, conversation: str, tombstone: dict[str, Any] | None = None) -> None:
        self.tenant = tenant
        self.conversation = conversation
        self.tombstone = tombstone
        """What is left (tenant, conversation, requested_at, finished_at, events, status), where known."""
        super().__init__(f"conversation {conversation} of tenant {tenant} was forgotten: its events are erased "
                         "and it cannot be written again; start a new conversation under another id")


class DataKeyErased(ConversationForgotten):
    """A stream message is sealed with a data key the key bucket no longer holds: the conversation
    was forgotten and its key erased (:mod:`mirror.events.nats.sealing`), so the message is unreadable."""

    def __init__(self, tenant: str, conversation: str) -> None:
        self.tenant = tenant
        self.conversation = conversation
        EventError.__init__(self, f"a stream message of conversation {conversation} of tenant {tenant} is sealed with "
                                  "a data key that was erased: the conversation was forgotten and its messages can no "
                                  "longer be read; start a new conversation under another id")


class ArchiveInvalid(EventError, ValueError):
    """An archive (:mod:`mirror.events.archive`) that cannot be imported: not a tar, no manifest,
    a file missing, extra or whose SHA-256 differs, an event that does not decode or breaks its
    branch's sequence. Nothing was appended."""

    def __init__(self, problem: str, member: str | None = None) -> None:
        self.problem = problem
        self.member = member
        where = f"{member}: " if member else ""
        super().__init__(f"invalid archive: {where}{problem}; nothing was imported (export it again, or check "
                         "that the file was copied whole)")


class ImportRefused(EventError):
    """An import would write into a conversation that exists already, or whose tombstone stands."""

    def __init__(self, tenant: str, conversation: str, reason: str) -> None:
        self.tenant = tenant
        self.conversation = conversation
        self.reason = reason
        said, fix = {
            "exists": ("exists already", "forget it first, or import under another tenant"),
            "forgotten": ("was forgotten", "import with force to replace the tombstone (once its sweep has finished)"),
        }.get(reason, ("was refused by the bus", "its events were erased within the broker's duplicate window "
                       "(or another writer began it meanwhile): import it again in a few minutes"))
        super().__init__(f"conversation {conversation} of tenant {tenant} {said}; nothing of it was imported: {fix}")


__all__ = [
    "AppendConflict", "ArchiveInvalid", "ImportRefused", "ConversationForgotten", "DataKeyErased", "BusError", "BusUnavailable", "CodecError", "CounterContended", "CorruptEvent", "EventError", "InvalidIdentifier",
    "InvalidSyncInterval", "LogError", "LogLocked", "LogUnavailable", "MirrorError", "ShardMapError",
    "UnknownEventType",
]
