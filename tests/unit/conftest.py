"""tests/unit/ runs in this process: a unit test that starts a child process or listens on a socket
fails, whatever starts it (the test itself or the code under test). ``test_suite_layout.py`` checks
the source for the same; this catches what the source hides, such as an eval that starts the
simulator inside a function it calls. Such a test belongs in ``tests/system/``."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from typing import Any

import pytest

PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.exec", "os.system"})
"""Audit events (``sys.addaudithook``) that start a process."""

_watching: list[list[str]] = []
"""What the running unit test started, while one runs (the hook is the process's for good)."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _watching and event in PROCESS_EVENTS:
        _watching[-1].append(f"{event} {str(args[:2])[:160]}")


sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def starts_no_process_and_no_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    started: list[str] = []
    listen = socket.socket.listen

    def listening(self: socket.socket, *args: Any) -> None:
        started.append(f"listen on {self.getsockname()}")
        listen(self, *args)

    monkeypatch.setattr(socket.socket, "listen", listening)
    _watching.append(started)
    try:
        yield
    finally:
        _watching.remove(started)
    assert not started, "a unit test started a process or a server (move it to tests/system/):\n" + "\n".join(started)
