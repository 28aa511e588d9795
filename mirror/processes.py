"""Child processes and ports: the helpers every room that starts a server shares.

Free loopback ports, stopping a child politely (SIGTERM, then SIGKILL) and killing one the way a
crash does. Imports only the standard library, so every layer and room may use it — the
embedded nats-server (``mirror.events.nats.server``), the stack, the simulator and the tests.
"""

from __future__ import annotations

import signal
import socket
import subprocess


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def terminate_process(process: subprocess.Popen[bytes] | None, timeout: float) -> None:
    """SIGTERM, wait up to ``timeout``, then SIGKILL: a child always ends up reaped.

    The one way Mirror stops the servers it starts (nats-server, the ingester, the simulator
    and llama.cpp)."""
    if process is None or process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def kill_process(process: subprocess.Popen[bytes] | None) -> None:
    """SIGKILL and reap: the crash a test wants; nothing is flushed or closed politely."""
    if process is not None and process.poll() is None:
        process.kill()
        process.wait()


__all__ = ["free_port", "kill_process", "terminate_process"]
