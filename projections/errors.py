"""Errors of the projection layer.

    MirrorError                      (mirror.events.errors)
    └── ProjectionError
        ├── OutOfOrderEvent          an event for another stream, or not at last_seq + 1
        ├── UnhandledEvent           a payload type or operation with no handler in this build
        ├── EmptyFold                nothing to fold and no state to start from
        ├── InvalidLimits            a Limits value that cannot bound anything
        └── SnapshotError            a snapshot that cannot be used: refold from the log
            ├── StaleSnapshot        written by another PROJECTION_VERSION
            └── CorruptSnapshot      bytes that are not a snapshot of this projection

A projection is a cache of the log, so every snapshot error has the same cure: drop the
snapshot and fold the events again. Catch :class:`SnapshotError` to do that in one place.
"""

from __future__ import annotations

from mirror.events.errors import MirrorError


class ProjectionError(MirrorError):
    """Events could not be folded into state."""


class OutOfOrderEvent(ProjectionError):
    """The event does not continue this state: wrong stream, a gap, or a repeat.

    Carries the state's coordinates (``tenant``, ``conversation``, ``branch``), the
    ``expected_seq`` (state's last_seq + 1), the event's ``actual_seq`` and the event's own
    coordinates, so the caller can tell a routing bug from a gap in what it read.
    """

    def __init__(
        self,
        tenant: str,
        conversation: str,
        branch: str,
        *,
        expected_seq: int,
        actual_seq: int,
        event_tenant: str,
        event_conversation: str,
        event_branch: str,
    ) -> None:
        self.tenant = tenant
        self.conversation = conversation
        self.branch = branch
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        self.event_tenant = event_tenant
        self.event_conversation = event_conversation
        self.event_branch = event_branch
        here = f"{tenant}/{conversation}/{branch}"
        there = f"{event_tenant}/{event_conversation}/{event_branch}"
        if there != here:
            message = (
                f"event {there} seq {actual_seq} was applied to the projection of {here} "
                f"(tenant={tenant} conversation={conversation} branch={branch}, expected "
                f"seq {expected_seq}, actual seq {actual_seq}); route each event to the state "
                "of its own tenant/conversation/branch"
            )
        else:
            message = (
                f"event seq {actual_seq} does not follow the projection of {here} "
                f"(tenant={tenant} conversation={conversation} branch={branch}): expected seq "
                f"{expected_seq}, actual seq {actual_seq}; read the log from seq {expected_seq} "
                "and fold the events in order, or start again from an earlier snapshot"
            )
        super().__init__(message)


class UnhandledEvent(ProjectionError):
    """The projection has no handler for this payload type or operation.

    A new event type needs a handler registered on ``apply`` before it is ever appended;
    meeting one here means this build is older than the log it reads.
    """


class EmptyFold(ProjectionError, ValueError):
    """``fold`` was given no events and no state, so it cannot know which stream it folds."""


class InvalidLimits(ProjectionError, ValueError):
    """A :class:`~mirror.projections.Limits` value is out of range."""


class SnapshotError(ProjectionError):
    """A snapshot cannot be used; fold the conversation from the log instead."""


class StaleSnapshot(SnapshotError):
    """The snapshot was written by another projection version; refold from the log."""

    def __init__(self, found: object, expected: int) -> None:
        self.found = found
        self.expected = expected
        super().__init__(
            f"snapshot has projection version {found!r}, this build folds version {expected}; "
            "discard the snapshot and fold the conversation from its events"
        )


class CorruptSnapshot(SnapshotError):
    """The bytes are not a well-formed conversation snapshot; refold from the log."""


__all__ = [
    "ProjectionError",
    "OutOfOrderEvent",
    "UnhandledEvent",
    "EmptyFold",
    "InvalidLimits",
    "SnapshotError",
    "StaleSnapshot",
    "CorruptSnapshot",
]
