"""`mirror up` as a subprocess, as a user runs it: started in its own session, waited for, stopped with Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from mirror.processes import free_port
from tests.support.stack import REFLECTION

__all__ = ["ctrl_c", "start_up"]


def start_up(data: Path, log: Path, *options: str, mirror: Sequence[str] = (sys.executable, "-m", "mirror"),
             cwd: Path | None = None, reflection: bool = REFLECTION,
             env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen[bytes], dict]:
    """Start `mirror up --llm sim` on free ports and return it with its stack.json once written
    (no NATS port of its own when ``options`` give ``--nats-url``).

    ``mirror`` is the command that runs Mirror (by default this interpreter's ``-m mirror``; the
    wheel's test passes a fresh venv's ``bin/mirror``), ``cwd`` the directory it runs in.
    ``reflection``: off (``--no-reflection``) unless the test asks
    (:data:`tests.support.stack.REFLECTION`); ``True`` starts it as a user does, with no option.
    ``env``: variables added to this process's environment for it (``OTEL_*``).
    """
    broker = () if "--nats-url" in options else ("--nats-port", str(free_port()))  # a broker of its own, or the one given
    command = [*mirror, "up", "--llm", "sim", "--data", str(data), "--port", str(free_port()), *broker,
               *(() if reflection else ("--no-reflection",)), *options]
    # Its own session, as in a terminal: Ctrl-C reaches the whole process group.
    process = subprocess.Popen(command, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
                               cwd=cwd, env=None if env is None else {**os.environ, **env})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        stack = data / "stack.json"
        if stack.exists():
            try:
                return process, json.loads(stack.read_text())
            except json.JSONDecodeError:  # caught between its creation and its one write
                pass
        time.sleep(0.2)
    process.kill()
    raise AssertionError("mirror up did not come up:\n" + log.read_text()[-3000:])


def ctrl_c(process: subprocess.Popen[bytes]) -> int:
    os.killpg(process.pid, signal.SIGINT)
    return process.wait(90)
