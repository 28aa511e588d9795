"""An ASGI app served by uvicorn in a background thread on a loopback port, and claims on ports.

Shared by the LLM simulator and the gateway (tests, ``mirror up``): bind first so port 0 gives a
known free port, start uvicorn on that socket in a daemon thread, return once ``/healthz``
answers, and stop within a bounded time. :func:`claim_port` reserves a port for one process's
own listeners (the gateway processes that share it with ``SO_REUSEPORT``) against everyone
else. Imports only ``mirror.events.errors`` of Mirror (its errors are
subclasses of :class:`~mirror.events.errors.MirrorError`), so every room may serve with it.
"""

from __future__ import annotations

import errno
import socket
import threading
import time
from typing import Any

import httpx
import uvicorn

from mirror.events.errors import MirrorError


class ServerUnavailable(MirrorError):
    """An HTTP server of ours (simulator, gateway) could not listen or did not answer /healthz."""

    def __init__(self, name: str, url: str, reason: str, fix: str) -> None:
        self.name = name
        self.url = url
        self.reason = reason
        super().__init__(f"{name} at {url} is unavailable: {reason}; {fix}")


class PortInUse(MirrorError):
    """A port that another process (another Mirror stack, or any program) listens on or has claimed."""

    def __init__(self, host: str, port: int, holder: str, fix: str) -> None:
        self.host = host
        self.port = port
        self.holder = holder
        super().__init__(f"port {port} on {host} is already in use by {holder}; {fix}")


def _claim_name(host: str, port: int) -> str:
    """The abstract Unix socket that stands for a claim on ``host:port`` (Linux: no file, and the
    kernel frees it when the process that bound it ends, however it ends)."""
    return f"\0mirror-port-claim/{host}:{port}"


class PortClaim:
    """This process's claim on a TCP port, held until :meth:`release` (or the process's end).

    Made by :func:`claim_port`. While it is held, another :func:`claim_port` of the same port
    fails at once, even before anything listens on the port, which closes the race between two
    stacks started together.
    """

    def __init__(self, host: str, port: int, lock: socket.socket, reservation: socket.socket | None = None) -> None:
        self.host = host
        self.port = port
        self._lock: socket.socket | None = lock
        self._reservation = reservation

    def release(self) -> None:
        if self._reservation is not None:
            self._reservation.close()
            self._reservation = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self) -> PortClaim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def claim_port(host: str, port: int, *, what: str, fix: str, hold: bool = False) -> PortClaim:
    """Claim ``host:port`` (0: a free port) for this process's own listeners; :class:`PortInUse` if taken.

    Two checks, so that nobody else shares the port through ``SO_REUSEPORT`` (the kernel lets
    any socket of the same user with that option join a port's listeners, and would split the
    connections between them):

    - a claim of Mirror's own, an abstract Unix socket named after the port: a second Mirror
      process claiming the same port fails here, even while the first is still starting;
    - an exclusive bind of the port (no ``SO_REUSEPORT``; ``SO_REUSEADDR`` so that connections
      of an earlier run in TIME_WAIT do not count): it fails while any socket listens on it,
      whoever holds it, with or without ``SO_REUSEPORT``. The probe is closed at once, and the
      caller's own listeners bind next; a program that binds the port in between (with
      ``SO_REUSEPORT``, as the same user) is the one case not caught.

    ``hold``: for listeners that bind with ``SO_REUSEPORT`` (the gateways), keep the port bound
    until :meth:`PortClaim.release` — a socket bound with ``SO_REUSEPORT``, never listening, so it
    gets no connection. Without it, between the claim and the gateways' bind (seconds: NATS and
    Ray start in between) the kernel could hand the port to an outgoing connection as its local
    port, and the gateways' bind would fail (seen in CI: ``EADDRINUSE`` on a port claimed free).
    A port bound explicitly is never chosen for an outgoing connection. Not for nats-server,
    which binds without ``SO_REUSEPORT`` and would be refused by the held socket.

    ``what`` names the server that will listen there ("mirror gateway"), ``fix`` says what to do instead.
    """
    if port == 0:
        port = _free_port(host)
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lock.bind(_claim_name(host, port))
    except OSError as exc:
        lock.close()
        if exc.errno != errno.EADDRINUSE:
            raise
        raise PortInUse(host, port, "another Mirror stack", fix) from None
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
    except OSError as exc:
        lock.close()
        if exc.errno != errno.EADDRINUSE:
            raise ServerUnavailable(what, f"{host}:{port}", str(exc), fix) from exc
        raise PortInUse(host, port, "another process", fix) from None
    finally:
        probe.close()
    return PortClaim(host, port, lock, reserve_port(host, port) if hold else None)


def reserve_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (0: the kernel's choice) with ``SO_REUSEPORT``, not listening:
    the port stays this user's for listeners that bind with ``SO_REUSEPORT`` too (:func:`bind_socket`
    with ``reuse_port``), and no outgoing connection is given it as its local port."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _free_port(host: str) -> int:
    """A port free on ``host`` now (the kernel's choice for a bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def bind_socket(host: str, port: int, name: str = "server", *, reuse_port: bool = False) -> socket.socket:
    """A listening socket bound before uvicorn starts, so port 0 yields a known free port.

    ``reuse_port``: several processes listen on the same port and the kernel spreads the
    connections over them (Linux SO_REUSEPORT) — how gateway processes share one address.
    """
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServerUnavailable(name, f"http://{host}:{port}", str(exc), "choose another host or port") from exc
    sock.listen(2048)
    return sock


class ThreadedServer:
    """``start()`` returns once ``/healthz`` answers; ``stop()`` joins the thread (bounded)."""

    def __init__(self, app: Any, *, name: str, host: str = "127.0.0.1", port: int = 0,
                 start_timeout: float = 10.0, log_level: str = "warning", access_log: bool = False,
                 keep_alive_s: int = 5) -> None:
        self.app = app
        self.name = name
        self.host = host
        self.port = port
        self.start_timeout = start_timeout
        self.log_level = log_level
        self.access_log = access_log
        self.keep_alive_s = keep_alive_s  # how long an idle connection stays open (uvicorn's default 5 s)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> ThreadedServer:
        if self._thread is not None:
            return self
        self._socket = bind_socket(self.host, self.port, self.name)
        self.port = self._socket.getsockname()[1]
        # log_config=None keeps Mirror's logging setup instead of uvicorn's own handlers.
        config = uvicorn.Config(self.app, log_config=None, log_level=self.log_level.lower(),
                                access_log=self.access_log, timeout_graceful_shutdown=1,
                                timeout_keep_alive=self.keep_alive_s)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name=f"{self.name}-{self.port}", daemon=True)
        self._thread.start()
        self._wait_healthy()
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        last_error = "no answer yet"
        with httpx.Client(base_url=self.url, timeout=0.5) as client:
            while time.monotonic() < deadline:
                if self._thread is None or not self._thread.is_alive():
                    self.stop()
                    raise ServerUnavailable(self.name, self.url, "the server thread exited", "see the log above")
                try:
                    if client.get("/healthz").status_code == 200:
                        return
                except httpx.TransportError as exc:
                    last_error = repr(exc)
                time.sleep(0.01)
        self.stop()
        raise ServerUnavailable(self.name, self.url, f"no /healthz answer within {self.start_timeout}s ({last_error})",
                                "raise the start timeout on a slow machine")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving; in-flight requests get about a second."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def __enter__(self) -> ThreadedServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


__all__ = ["PortClaim", "PortInUse", "ServerUnavailable", "ThreadedServer", "bind_socket", "claim_port", "reserve_port"]
