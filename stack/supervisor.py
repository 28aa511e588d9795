"""What ``mirror up`` starts comes back by itself: a watchdog thread over its child processes.

Each watched part says whether it is alive and how to start it again *the same way* (the
nats-server on the same port with the same store, so JetStream recovers the stream and every
client's reconnect loop finds it; the simulator on the same port, so the conversations' model
URL stays right). The thread looks every ``check_every_s``; a part found dead is logged with
its pid and exit status, restarted, and logged again when it is back, with how long it was
gone. A restart that fails is retried with a backoff (0.25 s doubling to 5 s), never given up
while the stack runs. Ray's actors (ingester, hosts, gateways) are Ray's to restart; this is
for the processes outside Ray, and for what Ray's restart does not bring back: a gateway's
process comes back without listening, and is told to serve again here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

__all__ = ["Supervisor", "Watched"]


@dataclass
class Watched:
    """One supervised part: its name, how to tell it is alive, its pid and exit code, how to restart it."""

    name: str
    alive: Callable[[], bool]
    pid: Callable[[], int | None]
    restart: Callable[[], object]
    exit_code: Callable[[], int | None] = lambda: None
    died: str = "died"
    """What its not being alive is called in the log ("died"; "changed" for a setting that is followed)."""
    restarting: str = "starting it again"
    back: str = "is back"
    restarts: int = 0
    restart_times_s: list[float] = field(default_factory=list)


class Supervisor:
    """A daemon thread that restarts dead parts (see the module docstring)."""

    def __init__(self, *, check_every_s: float = 0.25, max_backoff_s: float = 5.0) -> None:
        self.check_every_s = check_every_s
        self.max_backoff_s = max_backoff_s
        self.watched: list[Watched] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, part: Watched) -> None:
        self.watched.append(part)

    def start(self) -> Supervisor:
        self._thread = threading.Thread(target=self._run, name="mirror-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop watching (first, before the parts are stopped on purpose); waits up to ``timeout_s``
        for a restart under way (the thread is a daemon: one that hangs ends with the process)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.wait(self.check_every_s):
            for part in self.watched:
                if not self._stop.is_set() and not part.alive():
                    self._revive(part)

    def _revive(self, part: Watched) -> None:
        died_at = time.monotonic()
        pid = part.pid()
        if pid is None and part.exit_code() is None:  # not a process: a part that has no pid to tell
            log.warning("%s %s; %s", part.name, part.died, part.restarting)
        else:
            log.warning("%s (pid %s) %s (exit status %s); %s", part.name, pid, part.died, part.exit_code(),
                        part.restarting)
        backoff = 0.25
        while not self._stop.is_set():
            try:
                part.restart()
            except Exception as exc:
                log.warning("%s did not start again (%r); next try in %.2f s", part.name, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, self.max_backoff_s)
                continue
            gone = time.monotonic() - died_at
            part.restarts += 1
            part.restart_times_s.append(gone)
            pid = part.pid()
            log.warning("%s %s%s after %.2f s", part.name, part.back, "" if pid is None else f" (pid {pid})", gone)
            return
