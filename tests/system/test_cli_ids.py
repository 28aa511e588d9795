"""Every command that names a conversation, a branch or a tenant refuses a bad one before it reaches anything.

The commands are found by walking the Typer app, so a new one is covered without a list to keep: each parameter
called ``conversation(s)``, ``branch``, ``from_branch``, ``to_branch`` or ``tenant`` that takes text gets every
bad id below. Each run points ``--url`` and ``--nats-url`` at a listener that counts the connections it accepts:
a command that let the id through would connect to it (or fail some other way, with another message); so the
test asserts the one line a bad id gets everywhere, exit status 2, no traceback, and no connection at all.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main

from mirror.cli.app import app
from mirror.cli.gateway_client import conversation_path
from mirror.events.errors import InvalidIdentifier
from mirror.events.ids import MAX_IDENTIFIER_LENGTH, validate_identifier
from tests.support.cli import run_main
from tests.unit.test_cli_width import commands

pytestmark = pytest.mark.long  # ~30 s: every command × seven bad ids; .ci/run runs it with -m long

BAD_IDS = ("c1?x=1", "../c1", "a/b", "a b", "a.b", "", "x" * (MAX_IDENTIFIER_LENGTH + 1))
KINDS = {"conversation": "conversation", "conversations": "conversation", "branch": "branch",
         "from_branch": "branch", "to_branch": "branch", "tenant": "tenant"}
"""The parameter names that carry an identifier, and its kind (as ``validate_identifier`` names it)."""


def identifier_parameters() -> Iterator[tuple[tuple[str, ...], Any, Any]]:
    """(command path, command, parameter) for every text parameter named in :data:`KINDS`."""
    for path, command in commands(typer.main.get_command(app)):
        for param in getattr(command, "params", ()):
            if param.name in KINDS and param.type_descriptor.annotation in (str, list[str]):
                yield path, command, param


FOUND = list(identifier_parameters())


def test_the_walk_finds_the_commands_that_name_a_conversation() -> None:
    found = {" ".join(path) for path, _, param in FOUND if KINDS[param.name] == "conversation"}
    assert {"portrait", "reflections", "reflect", "chat", "demo", "recompute", "events tail", "replay state",
            "replay diff", "replay verify", "memory show", "memory search", "memory reviews", "log read"} <= found


class CountingListener:
    """A loopback port that accepts connections, counts them and closes them at once."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port = self._socket.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed
                return
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        self._socket.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[CountingListener]:
    counting = CountingListener()
    yield counting
    counting.close()


def command_line(path: tuple[str, ...], command: Any, target: Any, bad: str, port: int, data: Path) -> list[str]:
    """``mirror PATH …`` with ``bad`` for ``target``, a good value for every other required parameter, and every
    way out (--url, --nats-url, --data) pointed at the listener or an empty directory."""
    arguments: list[str] = []
    options: list[str] = []
    for param in command.params:
        is_option = param.param_type_name == "option"
        if param is target:
            value = bad
        elif param.required:
            value = "c1" if param.name in KINDS else "x"
        else:
            continue
        if is_option:
            options += [param.opts[0], value]
        else:
            arguments.append(value)
    names = {param.name for param in command.params}
    if "url" in names:
        options += ["--url", f"http://127.0.0.1:{port}", "--token", "t"]
    if "nats_url" in names:
        options += ["--nats-url", f"nats://127.0.0.1:{port}"]
    if "data" in names:
        options += ["--data", str(data)]
    return [*path, *arguments, *options]


@pytest.mark.parametrize("bad", BAD_IDS, ids=["query", "up", "slash", "space", "dot", "empty", "long"])
@pytest.mark.parametrize(("path", "command", "param"), FOUND,
                         ids=[f"{' '.join(path)}:{param.name}" for path, _, param in FOUND])
def test_a_bad_id_is_one_line_before_any_connection(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path, listener: CountingListener, path: tuple[str, ...],
                                                    command: Any, param: Any, bad: str) -> None:
    for name in ("MIRROR_URL", "MIRROR_TOKEN", "MIRROR_NATS_URL", "MIRROR_DATA", "MIRROR_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no mirror.toml of the checkout's
    data = tmp_path / "data"
    data.mkdir()
    with pytest.raises(InvalidIdentifier) as refused:
        validate_identifier(KINDS[param.name], bad)
    before = listener.accepted
    ran = run_main(monkeypatch, capsys, *command_line(path, command, param, bad, listener.port, data))
    assert (ran.code, ran.out, ran.err) == (2, "", f"mirror: error: {refused.value}\n")
    assert listener.accepted == before, "the command connected before refusing the id"
    assert not any(data.iterdir()), "the command wrote into its data directory"


@pytest.mark.parametrize("bad", BAD_IDS)
def test_the_gateway_client_puts_any_id_in_one_path_segment(bad: str) -> None:
    """The second guard: whatever the id, the URL path is /v1/conversations/<one segment>/<what>, no query, no step up."""
    import httpx

    url = httpx.URL("http://gateway" + conversation_path(bad, "portrait"))
    assert url.query == b"" and url.path.startswith("/v1/conversations/") and url.path.endswith("/portrait")
    assert url.raw_path.count(b"/") == 4 and b".." not in url.raw_path
