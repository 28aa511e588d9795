"""Follow the runtime's warnings file and log its lines again in this process (``mirror up``'s stderr).

The gateways and the conversation processes are Ray actors; what they log goes to Ray's worker
files. They also append their warnings to one file (:mod:`mirror.actors.log_file`), and
:class:`LogRelay` follows it from where it ended when the stack started: each record's first
line is logged again here, under its own logger name and level, through the process's own
logging (the CLI sends it to stderr). Tracebacks stay in the file (a record's later lines are
not relayed), so the terminal gets one line per failure and the file keeps the detail.

Why a file and not Ray's ``log_to_driver``: that forwards everything the workers print, Ray's
own multi-line report of every failed actor call included (tens of lines per failed turn, each
with Ray's ids), and tags each line with Ray's metadata; the file carries only what Mirror logs
as a warning, in Mirror's format.
"""

from __future__ import annotations

import logging
import re
import threading
from pathlib import Path

__all__ = ["LogRelay"]

_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (?P<level>WARNING|ERROR|CRITICAL) (?P<name>\S+): (?P<message>.*)$")
"""A record's first line in :data:`mirror.actors.log_file.LINE_FORMAT`; any other line is a
traceback's or a message's continuation."""
_LEVELS = {"WARNING": logging.WARNING, "ERROR": logging.ERROR, "CRITICAL": logging.CRITICAL}


class LogRelay:
    """A daemon thread that relays the records other processes append to ``path`` (see the module docstring)."""

    def __init__(self, path: Path, *, interval_s: float = 0.2) -> None:
        self.path = Path(path)
        self.interval_s = interval_s
        self.relayed = 0
        """Records relayed so far."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._offset = 0
        self._partial = b""

    def start(self) -> LogRelay:
        """Follow the file from its present end (created if missing): what earlier runs wrote stays in it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch()
        self._offset = self.path.stat().st_size
        self._thread = threading.Thread(target=self._run, name=f"log-relay-{self.path.name}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following, after relaying what the file holds now."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self._relay_new()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._relay_new()

    def _relay_new(self) -> None:
        try:
            with self.path.open("rb") as file:
                if file.seek(0, 2) < self._offset:  # truncated by hand: follow from its start
                    self._offset, self._partial = 0, b""
                file.seek(self._offset)
                data = file.read()
        except OSError:  # removed by hand: nothing to relay until it is back
            return
        self._offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        for line in lines:
            record = _RECORD.match(line.decode("utf-8", errors="replace").rstrip("\r"))
            if record is not None:
                self.relayed += 1
                logging.getLogger(record["name"]).log(_LEVELS[record["level"]], "%s", record["message"])
