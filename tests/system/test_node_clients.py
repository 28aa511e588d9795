"""Node clients as their users configure them, each holding a two-turn conversation with Mirror,
plain and streamed, the second turn recalling the first: the ``openai`` JS SDK and the Vercel AI
SDK's OpenAI-compatible provider (``ai`` + ``@ai-sdk/openai-compatible``). The clients are
tests/node/ (pinned in its package-lock.json), installed once with ``npm ci`` into a cache
directory outside the checkout; the test is skipped where ``node`` or ``npm`` is missing
(.ci/run installs Debian's). Each script reads user messages on stdin and prints one JSON line per
reply; the test sends the second message once Mirror has thought the first through.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.conversing import Mirror, mirror_stack, two_turns, write_transcripts

pytestmark = pytest.mark.long  # a stack of its own and real clients: ~1 min; .ci/run runs it with -m long

NODE_PROJECT = Path(__file__).parents[1] / "node"
TRANSCRIPTS = Path(os.environ["MIRROR_TRANSCRIPTS"]) if os.environ.get("MIRROR_TRANSCRIPTS") else None
CLIENTS = {"openai-js": "openai.mjs", "ai-sdk": "ai-sdk.mjs"}


@pytest.fixture(scope="module")
def node_clients(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/node with its node_modules, installed by ``npm ci`` once per package-lock.json into
    ``$XDG_CACHE_HOME/mirror/node-clients/<lock digest>`` (the scripts are copied afresh each run)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node and npm are needed for the Node clients (Debian: apt-get install nodejs npm)")
    lock = (NODE_PROJECT / "package-lock.json").read_bytes()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mirror" / "node-clients"
    home = cache / hashlib.sha256(lock).hexdigest()[:16]
    if not (home / "node_modules" / ".package-lock.json").exists():
        building = Path(str(home) + f".{os.getpid()}")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(parents=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(NODE_PROJECT / name, building / name)
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=building,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"npm ci failed:\n{done.stdout}\n{done.stderr}"
        shutil.rmtree(home, ignore_errors=True)
        building.rename(home)
    for script in NODE_PROJECT.glob("*.mjs"):
        shutil.copy(script, home / script.name)
    return home


@pytest.fixture(scope="module")
def mirror(ray_cluster: None, nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    with mirror_stack(nats_server.url, tmp_path_factory.mktemp("node-clients"), "nodeclients") as running:
        yield running


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_node_client_holds_a_conversation(node_clients: Path, mirror: Mirror, client: str, streamed: bool) -> None:
    conversation = f"{client}-{'streamed' if streamed else 'plain'}"
    # The base URL names the plain conversation, a default header the streamed one.
    base_url, headers = ((f"{mirror.url}/v1", {"X-Mirror-Conversation": conversation}) if streamed
                         else (f"{mirror.url}/c/{conversation}/v1", {}))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MIRROR_BASE_URL": base_url,
           "MIRROR_TOKEN": mirror.token, "MIRROR_HEADERS": json.dumps(headers)}
    process = subprocess.Popen(["node", CLIENTS[client], "streamed" if streamed else "plain"], cwd=node_clients,
                               env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    replies: list[dict[str, Any]] = []
    assert process.stdin and process.stdout

    def say(message: str) -> str:
        assert process.stdin and process.stdout
        process.stdin.write(message + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        assert line, f"{client} printed no reply: {process.stderr.read() if process.stderr else ''}"
        replies.append(json.loads(line))
        return str(replies[-1]["text"])

    try:
        two_turns(mirror, conversation, say)
    finally:
        process.stdin.close()
        assert process.wait(60) == 0, process.stderr.read() if process.stderr else ""
    assert [reply["namedBy"] for reply in replies] == ["header" if streamed else "path"] * 2
    if streamed:  # token by token, not one lump
        assert all(reply["chunks"] > 1 for reply in replies)
    if client == "openai-js":  # the SDK keeps the fields it does not know: Mirror's own is there
        assert [reply["mirror"]["turn"] for reply in replies] == [0, 1]

    sent = mirror.sent(conversation, 2)
    assert [len(e.body["messages"]) for e in sent] == [1, 3]
    assert all(e.body.get("stream", False) == streamed for e in sent)
    write_transcripts(TRANSCRIPTS, conversation, sent)
