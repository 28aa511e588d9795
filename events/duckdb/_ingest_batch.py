"""One batch of consumed stream messages, checked and laid out column by column.

The ingester reads tens of thousands of events a second. Building an object per event and
then, from those, a list per column cost about as much as DuckDB's insert; here each message
is checked (the codec's full check) and its fields go straight into the column lists the
Arrow table is made of.

Within a batch, a second message at the same (tenant, conversation, branch, seq) is a copy
(same bytes: counted and dropped) or divergent (other bytes: rejected). Against rows already
in the log, :meth:`mirror.events.duckdb.log.DuckDBEventLog.commit_batch` decides the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from mirror.events.codec import check
from mirror.events.errors import CodecError
from mirror.events.ids import event_id

EVENT_COLUMNS = pa.schema(
    [
        ("tenant", pa.string()),
        ("conversation", pa.string()),
        ("branch", pa.string()),
        ("seq", pa.int64()),
        ("event_id", pa.string()),
        ("type", pa.string()),
        ("schema_version", pa.int32()),
        ("ts", pa.float64()),
        ("turn", pa.int32()),
        ("stream_seq", pa.int64()),
        ("data", pa.binary()),
    ]
)
"""The ``events`` table's columns, in order."""


@dataclass(frozen=True, slots=True)
class RejectedRecord:
    """One consumed stream message that is not a valid event (kept, never dropped)."""

    stream_seq: int
    subject: str
    error: str
    data: bytes


class IngestBatch:
    """Checked events of consecutive stream messages, as columns of the ``events`` table."""

    def __init__(self) -> None:
        self.tenant: list[str] = []
        self.conversation: list[str] = []
        self.branch: list[str] = []
        self.seq: list[int] = []
        self.event_id: list[str] = []
        self.type: list[str] = []
        self.schema_version: list[int] = []
        self.ts: list[float] = []
        self.turn: list[int] = []
        self.stream_seq: list[int] = []
        self.data: list[bytes] = []
        self.subject: list[str] = []
        self.rejected: list[RejectedRecord] = []
        self.duplicates = 0
        self.first_records: list[dict[str, Any]] = []
        """Records that start a branch (the ``branches`` table): seq 1, or a forked branch's ``fork``."""
        self.newest_by_subject: dict[str, int] = {}
        """Stream sequence of the newest valid event per subject (what compaction may keep)."""
        self.anchor: tuple[int, str] | None = None
        """(stream seq, event id) of the batch's newest valid message: compaction keeps it in the
        stream until a newer one is committed, so the ingester can ask the stream for it later
        and tell a stream that went backwards from one that did not (:mod:`.ingester`)."""
        self._rows: dict[tuple[str, str, str, int], int] = {}

    def __len__(self) -> int:
        return len(self.seq)

    def reject(self, stream_seq: int, subject: str, error: str, data: bytes) -> None:
        """Record a message that cannot be added (a seal that does not open): kept, never dropped."""
        self.rejected.append(RejectedRecord(stream_seq, subject, error, data))

    def add(self, data: bytes, stream_seq: int, subject: str) -> None:
        """Check one message and add its event, or record why it is rejected or a copy."""
        try:
            record = check(data).record
        except CodecError as exc:
            self.rejected.append(RejectedRecord(stream_seq, subject, str(exc), data))
            return
        self.newest_by_subject[subject] = stream_seq
        tenant, conversation, branch, seq = record["tenant"], record["conversation"], record["branch"], record["seq"]
        identity = event_id(tenant, conversation, branch, seq)
        self.anchor = (stream_seq, identity)
        key = (tenant, conversation, branch, seq)
        row = self._rows.get(key)
        if row is not None:
            if self.data[row] == data:
                self.duplicates += 1
            else:
                self.rejected.append(divergent(key, stream_seq, subject, data))
            return
        self._rows[key] = len(self.seq)
        self.tenant.append(tenant)
        self.conversation.append(conversation)
        self.branch.append(branch)
        self.seq.append(seq)
        self.event_id.append(identity)
        self.type.append(record["type"])
        self.schema_version.append(record["schema"])
        self.ts.append(float(record["ts"]))
        self.turn.append(record["turn"])
        self.stream_seq.append(stream_seq)
        self.data.append(data)
        self.subject.append(subject)
        if seq == 1 or record["type"] == "fork":
            self.first_records.append(record)

    def _columns(self) -> list[list[Any]]:
        return [
            self.tenant, self.conversation, self.branch, self.seq, self.event_id, self.type,
            self.schema_version, self.ts, self.turn, self.stream_seq, self.data,
        ]

    def table(self) -> pa.Table:
        return pa.Table.from_arrays(
            [pa.array(column, type=field.type) for column, field in zip(self._columns(), EVENT_COLUMNS, strict=True)],
            schema=EVENT_COLUMNS,
        )

    def rows(self) -> list[tuple[Any, ...]]:
        """The events as rows of the ``events`` table (what a small batch inserts as ``VALUES``)."""
        return list(zip(*self._columns(), strict=True))

    def divergent_at(self, stream_seq: int) -> RejectedRecord:
        """The row of ``stream_seq`` as a divergent duplicate of what the log already holds."""
        row = self.stream_seq.index(stream_seq)
        key = (self.tenant[row], self.conversation[row], self.branch[row], self.seq[row])
        return divergent(key, stream_seq, self.subject[row], self.data[row])


def divergent(key: tuple[str, str, str, int], stream_seq: int, subject: str, data: bytes) -> RejectedRecord:
    tenant, conversation, branch, seq = key
    return RejectedRecord(
        stream_seq=stream_seq,
        subject=subject,
        error=f"divergent duplicate of {tenant}/{conversation}/{branch}#{seq}: the log holds other bytes at that seq",
        data=data,
    )
