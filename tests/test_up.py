"""`mirror up` as a user runs it: a real process with NATS, Ray, the ingester, the simulator and the gateway."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from mirror.events.nats_server import free_port

pytestmark = pytest.mark.slow


def start_up(data: Path, log: Path) -> tuple[subprocess.Popen[bytes], dict]:  # type: ignore[type-arg]
    command = [sys.executable, "-m", "mirror", "up", "--llm", "sim", "--data", str(data),
               "--port", str(free_port()), "--nats-port", str(free_port())]
    process = subprocess.Popen(command, stdout=log.open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()[-3000:]
        stack = data / "stack.json"
        if stack.exists():
            return process, json.loads(stack.read_text())
        time.sleep(0.2)
    process.kill()
    raise AssertionError("mirror up did not come up:\n" + log.read_text()[-3000:])


def stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGINT)
    return process.wait(60)


def test_up_serves_turns_stops_cleanly_and_resumes(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "up.log"
    process, stack = start_up(data, log)
    try:
        headers = {"Authorization": f"Bearer {stack['token']}"}
        reply = httpx.post(f"{stack['url']}/v1/conversations/first/turns", json={"message": "hello"},
                           headers=headers, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["seq"] == 1
    finally:
        assert stop(process) == 0, log.read_text()[-3000:]
    assert not (data / "stack.json").exists()

    process, again = start_up(data, log)  # the same data: the same tenant token, the same conversation
    try:
        assert again["token"] == stack["token"]
        headers = {"Authorization": f"Bearer {again['token']}"}
        reply = httpx.post(f"{again['url']}/v1/conversations/first/turns", json={"message": "again"},
                           headers=headers, timeout=60)
        assert reply.status_code == 200, reply.text
        assert reply.json()["turn"] == 1  # continued where it stopped
    finally:
        assert stop(process) == 0, log.read_text()[-3000:]
