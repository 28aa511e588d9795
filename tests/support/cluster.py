"""The "Several nodes" recipe of docs/operations.md, run as written: its commands are read from that file, the
ports and paths a test must own are substituted, and each command runs as a real process.

Every command runs in a session of its own (``start_new_session``), as in a terminal of its own:
a ``ray start --block`` node and everything it starts (raylet, agents, the worker processes of
its actors) share that session, so a node is killed — or cleaned up — by its session id, never
by process name (other Ray clusters may run on the same machine). ``ray stop`` is never run: it
stops every Ray process of the machine.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECIPE_DOC = ROOT / "docs" / "operations.md"
"""Where the recipe lives: the operations guide's "Several nodes" section."""
RECIPE_MARKER = "<!-- recipe: several-nodes -->"


@dataclass(frozen=True)
class Recipe:
    """The recipe's environment (its ``export`` lines) and its commands, in order."""

    environment: dict[str, str]
    commands: list[list[str]]

    def command(self, *prefix: str) -> list[str]:
        """The one command that starts with ``prefix`` (``"ray", "start", "--head"``)."""
        found = [command for command in self.commands if command[:len(prefix)] == list(prefix)]
        assert len(found) == 1, f"the recipe has {len(found)} commands starting {' '.join(prefix)!r}"
        return found[0]


def read_recipe(doc: Path = RECIPE_DOC, marker: str = RECIPE_MARKER) -> Recipe:
    """The fenced block after the marker: ``export K=V`` lines, commands (a line ending in ``\\``
    goes on on the next), ``#`` comments."""
    text = doc.read_text()
    assert marker in text, f"{doc} has no {marker}"
    block = re.search(r"```(?:sh|bash)\n(.*?)```", text.split(marker, 1)[1], re.DOTALL)
    assert block is not None, "no fenced shell block after the recipe marker"
    environment: dict[str, str] = {}
    commands = []
    for line in block.group(1).replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if words[0] == "export":
            for assignment in words[1:]:
                name, value = assignment.split("=", 1)
                environment[name] = value
        else:
            commands.append(words)
    return Recipe(environment, commands)


def substitute(command: list[str], values: Mapping[str, str]) -> list[str]:
    """``command`` with each ``--flag=value`` in ``values`` given the test's value instead.

    Every flag named in ``values`` must be in the command: a recipe that lost one fails here
    rather than quietly running on the recipe's own ports.
    """
    missing = set(values)
    result = []
    for word in command:
        flag = word.split("=", 1)[0]
        if word.startswith("--") and "=" in word and flag in values:
            word = f"{flag}={values[flag]}"
            missing.discard(flag)
        result.append(word)
    assert not missing, f"the recipe's {command[:3]} lacks {sorted(missing)}"
    return result


@dataclass
class Session:
    """One command of the recipe running in its own session (its own terminal, as it were)."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    killed_pids: list[int] = field(default_factory=list)

    @classmethod
    def start(cls, name: str, command: list[str], *, env: Mapping[str, str], cwd: Path, log: Path) -> Session:
        process = subprocess.Popen(command, env=dict(env), cwd=cwd, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)
        return cls(name, process, log)

    @property
    def sid(self) -> int:
        return self.process.pid

    def pids(self) -> list[int]:
        """Every live process of this session: the command and all it started."""
        return [pid for pid, (sid, _) in _processes().items() if sid == self.sid]

    def kill(self) -> list[int]:
        """SIGKILL every process of the session at once — the node dies as a machine would."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.poll()
        self.killed_pids.extend(pids)
        return pids

    def stop(self, timeout: float = 60.0) -> None:
        """Ctrl-C's SIGTERM to the command, then SIGKILL to whatever of its session is left."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.2)
        self.kill()
        self.process.wait(10)

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, *sessions: Session, poll_s: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with the sessions' logs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for session in sessions:
            assert session.process.poll() is None, f"{session.name} exited:\n{session.tail()}"
        result = predicate()
        if result:
            return result
        time.sleep(poll_s)
    logs = "\n".join(f"--- {session.name}\n{session.tail()}" for session in sessions)
    raise AssertionError(f"{what}: not within {timeout} s\n{logs}")


def processes_named(prefix: str) -> dict[int, int]:
    """Live processes whose title starts with ``prefix`` (``ray::ConversationActor``), pid → session."""
    return {pid: sid for pid, (sid, title) in _processes().items() if title.startswith(prefix)}


def _processes() -> dict[int, tuple[int, str]]:
    """Every live (not zombie) process of the machine, from /proc: pid → (session id, title)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            # "pid (comm) state ppid pgrp session ...": comm may hold spaces, so split after its ')'
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] == "Z":
                continue
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            found[int(entry.name)] = (int(fields[3]), title)
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
    return found


def probe(address: str, env: Mapping[str, str], actor_names: list[str], timeout: float = 120.0) -> dict[str, Any]:
    """Ask the cluster, from a Ray driver of its own in a child process: the nodes (and which is
    the head, the one a driver joins), the directory's stats, the pid of each named actor (or,
    for an actor that is not there, why) and each conversation host's stats and live conversations.

    A child process, because a driver must start with the recipe's environment (Ray reads its
    authentication mode once per process) and this one may have run another Ray before.
    """
    command = [sys.executable, "-m", "tests.support.cluster", address, *actor_names]
    result = subprocess.run(command, env=dict(env), capture_output=True, text=True, timeout=timeout,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def _probe_main(address: str, actor_names: list[str]) -> None:
    import logging

    import ray

    ray.init(address=address, namespace="mirror", log_to_driver=False, logging_level=logging.WARNING)
    pids: dict[str, int | str] = {}
    for name in actor_names:
        try:
            pid: Any = ray.get(ray.get_actor(name).pid.remote(), timeout=30)
            pids[name] = int(pid)
        except (ValueError, ray.exceptions.RayError) as exc:
            pids[name] = repr(exc)[:300]  # passivated, or not (yet) restarted
    hosts: dict[str, Any] = {}
    for name in ray.util.list_named_actors():
        if name.startswith("conversation-host-"):
            try:
                host: Any = ray.get_actor(name)
                live = ray.get(host.live.remote(), timeout=30)
                hosts[name] = ray.get(host.stats.remote(), timeout=30) | {
                    "conversations": [key.conversation for key in live]}
            except (ValueError, ray.exceptions.RayError) as exc:
                hosts[name] = {"error": repr(exc)[:300]}
    answer = {
        "hosts": hosts,
        "head_node": ray.get_runtime_context().get_node_id(),
        "nodes": {node["NodeID"]: {"alive": node["Alive"], "resources": node["Resources"]} for node in ray.nodes()},
        "directory": ray.get(ray.get_actor("directory").stats.remote(), timeout=10),
        "pids": pids,
    }
    print(json.dumps(answer))



async def stream_messages(url: str, expected: int | None = None, *, stream: str = "MIRROR",
                          timeout_s: float = 120) -> list[tuple[int, str, bytes]]:
    """Every message of the stream as the server(s) at ``url`` hold it, in stream order:
    (stream seq, subject, data: the codec record, its seal opened). ``expected``: how many to wait for (default: what the stream
    says it holds). JetStream's transient refusals are asked again within ``timeout_s``."""
    import asyncio

    from nats.js.api import DeliverPolicy

    from mirror.events.nats.jetstream import connect_nats, key_of_subject, retry_transient
    from mirror.events.nats.sealing import DataKeys

    nc = await connect_nats(url, name="test-stream-reader")
    try:
        js = nc.jetstream()
        keys = DataKeys(js, stream, replicas=1)  # only read: the key stream exists with its own replicas
        if expected is None:  # a server just back from a partition may still be rejoining: "temporarily unavailable"
            expected = (await retry_transient(js.stream_info, stream, deadline_s=timeout_s)).state.messages
        messages: list[tuple[int, str, bytes]] = []
        if not expected:
            return messages
        done = asyncio.Event()

        async def collect(message: Any) -> None:
            key = key_of_subject(message.subject)
            data = await retry_transient(keys.open, key.tenant, key.conversation, message.data, deadline_s=timeout_s)
            messages.append((message.metadata.sequence.stream, message.subject, data))
            if len(messages) >= expected:
                done.set()

        subscription = await retry_transient(js.subscribe, "mirror.>", cb=collect, stream=stream,
                                             ordered_consumer=True, deliver_policy=DeliverPolicy.ALL,
                                             deadline_s=timeout_s)
        try:
            await asyncio.wait_for(done.wait(), timeout_s)
        finally:
            await subscription.unsubscribe()
        return messages
    finally:
        await nc.close()


__all__ = [
    "stream_messages",
    "RECIPE_DOC", "RECIPE_MARKER", "ROOT", "Recipe", "Session", "probe", "processes_named", "read_recipe", "substitute", "wait_for",
]

if __name__ == "__main__":
    _probe_main(sys.argv[1], sys.argv[2:])
