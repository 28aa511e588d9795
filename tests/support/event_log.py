"""Valid logs built from payloads, for the projection tests: seq 1.., timestamps from ``T0``."""

from __future__ import annotations

from typing import Any

from mirror.events.envelope import Event, make_event
from mirror.events.ids import StreamKey

T0 = 1_700_000_000.0
KEY = StreamKey("acme", "chat-7")


def log_of(*payloads: Any, start: float = T0, step: float = 1.0, key: StreamKey = KEY) -> list[Event]:
    """Payloads as a valid log of ``key``: seq 1.., one ``step`` apart (or at given times).

    A payload given as ``(payload, timestamp)`` is stamped at that time instead.
    """
    log = []
    for index, item in enumerate(payloads):
        payload, timestamp = item if isinstance(item, tuple) else (item, start + index * step)
        log.append(make_event(key, index + 1, payload, timestamp=timestamp))
    return log
