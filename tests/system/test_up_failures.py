"""`mirror up` when something it needs is taken or failing, as a newcomer meets it: a real process.

- a port another stack or program serves is refused in one line (exit 2), and nothing starts;
- nats-server failing to start says why in one line;
- a model server that cannot be reached is a warning at start (a refusal with --strict), and a
  turn is a prompt JSON 503 naming the model's URL and the stage, whose cause `mirror up` prints;
- a model that answers garbage, 500s or 429s is a 502 or 503, and the stack answers again once it heals;
- Ray's token-authentication warning is not in `mirror up`'s output.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from mirror.events.errors import BusError
from mirror.events.nats.server import EmbeddedNats
from mirror.processes import free_port
from mirror.sim.server import SimLLMServer, SimSettings
from tests.support.up import ctrl_c, start_up

RAY_TOKEN_WARNING = "Token authentication is enabled"


def mirror_up(data: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """`mirror up` that is expected to refuse: run to its end (a stack that did start is a failure)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("MIRROR_")}
    command = [sys.executable, "-m", "mirror", "up", "--llm", "sim", "--data", str(data),
               "--port", str(free_port()), "--nats-port", str(free_port()), *options]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"mirror up {' '.join(options)} did not refuse: it started\n{exc.stdout!r}\n{exc.stderr!r}") from None


def refused_in_one_line(result: subprocess.CompletedProcess[str], *naming: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and not result.stdout, (result.returncode, result.stdout, result.stderr)
    (line,) = lines
    assert line.startswith("mirror: error: ") and all(word in line for word in naming), line
    return line


@contextmanager
def listening() -> Iterator[int]:
    """A plain program's listener on a free loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def logged(log: Path, pattern: str, within_s: float = 30.0) -> str:
    """The first line of `mirror up`'s output matching ``pattern``, once it is there."""
    deadline = time.monotonic() + within_s
    while (found := re.search(pattern, log.read_text(), re.MULTILINE)) is None:
        assert time.monotonic() < deadline, f"no {pattern!r} in the log:\n" + log.read_text()[-3000:]
        time.sleep(0.1)
    return found.group(0)


def turn(stack: dict, message: str, conversation: str = "first") -> httpx.Response:
    return httpx.post(f"{stack['url']}/v1/conversations/{conversation}/turns", json={"message": message},
                      headers={"Authorization": f"Bearer {stack['token']}"}, timeout=60)


@pytest.mark.long  # ~15-26 s: kept out of the default run for its 15-minute budget
def test_a_port_another_stack_serves_is_refused_in_one_line_and_the_first_answers_every_request(tmp_path: Path) -> None:
    """Before the fix the second stack said "Mirror is up" on the same port, both stacks' gateways
    listened (SO_REUSEPORT), and of 20 requests with the first stack's token 14 got 401."""
    data, log = tmp_path / "first", tmp_path / "first.log"
    process, stack = start_up(data, log)
    try:
        port, nats_port = urlsplit(stack["url"]).port, urlsplit(stack["nats_url"]).port
        assert port is not None and nats_port is not None
        refused_in_one_line(mirror_up(tmp_path / "second", "--port", str(port)), f"port {port} ", "another Mirror stack", "--port")
        refused_in_one_line(mirror_up(tmp_path / "third", "--nats-port", str(nats_port)), f"port {nats_port} ", "--nats-port")
        assert not (tmp_path / "second").exists() and not (tmp_path / "third").exists()  # nothing started, nothing written
        answers = [turn(stack, f"hello {number}").status_code for number in range(20)]  # a connection each
        assert answers == [200] * 20
        assert RAY_TOKEN_WARNING not in log.read_text()
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]


def test_a_port_any_other_program_listens_on_is_refused_in_one_line(tmp_path: Path) -> None:
    """The gateway's port and NATS's (a port taken by NATS was 24 lines of nats-server's banner
    with the cause last); nothing is started or written either way."""
    with listening() as port:
        refused_in_one_line(mirror_up(tmp_path / "data", "--port", str(port)), f"port {port} ", "another process", "--port")
        refused_in_one_line(mirror_up(tmp_path / "data", "--nats-port", str(port)), f"port {port} ", "another process",
                            "--nats-port")
    assert not (tmp_path / "data").exists()


def test_a_nats_server_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    with listening() as port:
        with pytest.raises(BusError) as raised:
            EmbeddedNats(tmp_path / "nats", port=port).start()
    message = str(raised.value)
    assert "\n" not in message and "address already in use" in message and f"127.0.0.1:{port}" in message, message


def test_a_model_server_that_cannot_be_reached_is_a_warning_then_a_prompt_503_whose_cause_up_prints(tmp_path: Path) -> None:
    model_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    line = refused_in_one_line(mirror_up(tmp_path / "strict", "--llm", model_url, "--strict"), model_url, "cannot be reached")
    assert "--strict" in line and not (tmp_path / "strict").exists()

    data, log = tmp_path / "data", tmp_path / "up.log"
    process, stack = start_up(data, log, "--llm", model_url)
    try:
        output = log.read_text()
        assert re.search(rf"WARNING .*the model server at {re.escape(model_url)} cannot be reached", output), output
        assert output.index("cannot be reached") < output.index("Mirror is up")
        timings = []
        for attempt in range(2):  # the first also activates the conversation's host
            started = time.monotonic()
            answer = turn(stack, f"hello {attempt}")
            timings.append(time.monotonic() - started)
            assert answer.status_code == 503 and answer.headers["Retry-After"].isdigit(), answer.text
            body = answer.json()
            assert body["model_url"] == model_url and body["stage"] == "talker" and body["error"] == "LLMUnavailable"
            assert model_url in body["detail"] and "talker" in body["detail"]
        print(f"503 after {timings[0]:.2f} s (activating the host), then {timings[1]:.2f} s")
        assert timings[1] < 3.0  # one retry of a refused connection (~0.2 s), not 4 with ~3 s of backoff
        # The gateway's line, relayed from its Ray process to `mirror up`'s stderr, with the cause.
        logged(log, rf"WARNING mirror\.gateway\.failures: POST /v1/conversations/first/turns answered 503: "
                    rf"the talker's model call failed: LLM at {re.escape(model_url)} unavailable .*Connect")
        assert RAY_TOKEN_WARNING not in log.read_text()
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]
    assert (data / "warnings.log").read_text().count("answered 503") == 2


@pytest.mark.long  # ~15-26 s: kept out of the default run for its 15-minute budget
def test_a_model_that_answers_garbage_500s_or_429s_is_a_502_or_503_and_turns_resume_when_it_heals(tmp_path: Path) -> None:
    """The simulator's scripted faults, for the Talker's calls (baseline mode, no memory, no
    reflection: the Talker is the only caller of the model, so each fault meets it)."""
    data, log = tmp_path / "data", tmp_path / "up.log"
    with SimLLMServer(SimSettings()) as sim:
        process, stack = start_up(data, log, "--llm", sim.base_url, "--mode", "baseline", "--no-memory",
                                  "--no-reflection")
        try:
            assert "the model server at" not in log.read_text()  # it answered the check at start
            first = turn(stack, "hello")
            assert first.status_code == 200, first.text
            expected = [("garbage", 1, 502, "LLMBadResponse"), ("500", 5, 502, "LLMUnavailable"),
                        ("429", 5, 503, "LLMRateLimited")]  # a 5xx or a 429: the client's 4 retries
            for failures, (fault, calls, status, error) in enumerate(expected, start=1):
                sim.script(*[fault] * calls)
                answer = turn(stack, f"and now {fault}?")
                assert answer.status_code == status and answer.json()["error"] == error, answer.text
                assert answer.json()["stage"] == "talker" and answer.json()["model_url"] == sim.base_url
                assert ("Retry-After" in answer.headers) == (status == 503), answer.headers
                line = logged(log, rf"^.*mirror\.gateway\.failures: .* answered {status}: .*$")
                assert sim.base_url in line
                assert count_logged(log, "mirror.gateway.failures: ", failures)
            healed = turn(stack, "better?")
            assert healed.status_code == 200 and healed.json()["turn"] == first.json()["turn"] + 1, healed.text
            assert RAY_TOKEN_WARNING not in log.read_text()
        finally:
            assert ctrl_c(process) == 0, log.read_text()[-3000:]


def count_logged(log: Path, text: str, count: int, within_s: float = 30.0) -> bool:
    """Wait until ``text`` is in ``count`` lines of `mirror up`'s output (never more)."""
    deadline = time.monotonic() + within_s
    while (found := sum(text in line for line in log.read_text().splitlines())) < count:
        assert time.monotonic() < deadline, f"{found} lines with {text!r}, not {count}:\n" + log.read_text()[-3000:]
        time.sleep(0.1)
    return found == count
