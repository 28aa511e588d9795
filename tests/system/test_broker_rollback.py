"""A broker whose disk comes back older (issue 24, part 1), exactly as the issue tells it.

``mirror up --llm sim`` with its one embedded nats-server; 8 conversations x 4 turns over HTTP;
the JetStream store copied while nats-server is paused (SIGSTOP: the disk as of T1); 8 x 4 more
turns; nats-server paused again, its store swapped for the T1 copy and the server killed -9, so
the stack's supervisor starts it again on the same port and path, now holding the older disk;
8 x 4 more turns. The stream has gone backwards: its sequence numbers are handed out again from
where T1 left them, and each conversation's last subject sequence is older than its actors know.

Then: every acknowledged turn of the three rounds is in the log exactly once at its seq, each
conversation's seqs run 1..n without a gap or a double, every conversation answers one more
turn, no request was answered 500 (a 503 with ``Retry-After`` is allowed, and is retried with a
new message, counted as "failed then retried"), and ``mirror log stats`` says the stream went
backwards. Run with the broker syncing every write (``sync_interval: always``, the default) and
with it relaxed (``--nats-sync 2m``): the T1 copy is what comes back either way, so both must
survive it; the setting decides how often a real power failure gets here.

The figures (acknowledged turns lost per round, 500s, 503s) are printed (run with ``-s``) and
written to the test's ``report.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.harness.chaos.checker import Acknowledged, ConversationCheck, check_conversation
from tests.support.up import ctrl_c, start_up
from tests.support.waits import until

pytestmark = [pytest.mark.long, pytest.mark.timeout(600)]  # ~1 min a parameter: .ci/run runs it with -m long

CONVERSATIONS = 8
TURNS = 4
PREFIX = "rollback "
"""Every message of the test starts with it (the checker counts logged turns never acknowledged)."""
TURN_DEADLINE_S = 90.0
"""How long one turn is asked again (a new message per attempt) before the test gives it up."""
RETRY_PAUSE_CAP_S = 2.0
"""A 503's ``Retry-After`` is honoured up to this many seconds (the runtime's own is 2)."""
COMMIT_DEADLINE_S = 90.0

SYNC = [
    pytest.param((), id="sync-always"),  # the default: sync_interval always
    pytest.param(("--nats-sync", "2m"), id="sync-2m"),  # relaxed (nats-server's own default)
]


@dataclass(frozen=True)
class Failed:
    """An attempt not answered 200 (status 0: no answer at all, ``detail`` says why)."""

    conversation: str
    round: int
    label: str
    status: int
    detail: str
    retry_after: str = ""

    @property
    def turn(self) -> str:
        return f"{self.conversation} round {self.round} {self.label}"


@dataclass
class Load:
    """Turns over HTTP, recording exactly what was acknowledged and every failed attempt."""

    url: str
    token: str
    acknowledged: list[Acknowledged] = field(default_factory=list)
    rounds: dict[str, int] = field(default_factory=dict)
    """The round of each acknowledged message."""
    failed_then_retried: list[Failed] = field(default_factory=list)
    """Each attempt answered 503 and asked again."""
    server_errors: list[Failed] = field(default_factory=list)
    """Each attempt answered anything else but 200 or 503 (the 500s), asked again too so the run goes on."""
    transport_errors: list[Failed] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)
    """Turns never acknowledged within :data:`TURN_DEADLINE_S`."""
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def turn(self, client: httpx.Client, conversation: str, label: str, round_number: int) -> Acknowledged | None:
        """Ask ``label`` until a 200 (a new message per attempt) or :data:`TURN_DEADLINE_S`."""
        deadline = time.monotonic() + TURN_DEADLINE_S
        attempt = 0
        while time.monotonic() < deadline:
            attempt += 1
            message = f"{PREFIX}{conversation} round {round_number} {label} try {attempt}"
            sent = time.monotonic() - self.started
            try:
                response = client.post(f"/v1/conversations/{conversation}/turns", json={"message": message})
            except httpx.HTTPError as exc:
                with self._lock:
                    self.transport_errors.append(Failed(conversation, round_number, label, 0, repr(exc)))
                time.sleep(0.2)
                continue
            if response.status_code == 200:
                ack = Acknowledged(conversation, int(response.json()["seq"]), message, sent, time.monotonic() - self.started)
                with self._lock:
                    self.acknowledged.append(ack)
                    self.rounds[message] = round_number
                return ack
            retry_after = response.headers.get("retry-after", "")
            failure = Failed(conversation, round_number, label, response.status_code, response.text[:300], retry_after)
            with self._lock:
                (self.failed_then_retried if response.status_code == 503 else self.server_errors).append(failure)
            # A pause before asking again (a client's backoff), not a wait for a result.
            time.sleep(min(float(retry_after), RETRY_PAUSE_CAP_S) if retry_after.isdigit() else 0.2)
        with self._lock:
            self.given_up.append(f"{conversation} round {round_number} {label}")
        return None

    def round(self, round_number: int, turns: int = TURNS) -> None:
        """Every conversation, concurrently, ``turns`` turns each, each sent when the previous is answered."""

        def one(conversation: str) -> None:
            with self.client() as client:
                for turn in range(1, turns + 1):
                    self.turn(client, conversation, f"turn {turn}", round_number)

        threads = [threading.Thread(target=one, args=(conversation,)) for conversation in conversation_ids()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)

    def acknowledged_in(self, conversation: str) -> list[Acknowledged]:
        return [ack for ack in self.acknowledged if ack.conversation == conversation]


def conversation_ids() -> list[str]:
    return [f"rollback-{index}" for index in range(CONVERSATIONS)]


def events(client: httpx.Client, conversation: str) -> list[dict[str, Any]] | None:
    """The conversation's events as the log has committed them (every page); None while the log
    answers 503 (its owner restarting) or the conversation is not there yet."""
    found: list[dict[str, Any]] = []
    after = 0
    while True:
        page = client.get(f"/v1/conversations/{conversation}/events", params={"after": after, "limit": 1000})
        if page.status_code in (404, 503):
            return None
        assert page.status_code == 200, (conversation, page.status_code, page.text[:300])
        body = page.json()
        found.extend(body["events"])
        if not body["events"]:
            return found
        after = body["next_after"]


def checks(load: Load) -> dict[str, ConversationCheck]:
    """Each conversation's log checked against what was acknowledged in it (unreadable: not yet there)."""
    result = {}
    with load.client() as client:
        for conversation in conversation_ids():
            logged = events(client, conversation)
            if logged is None:
                result[conversation] = ConversationCheck(conversation, unreadable="the log answered 503 or 404")
            else:
                result[conversation] = check_conversation(conversation, load.acknowledged_in(conversation), logged,
                                                          message_prefix=PREFIX)
    return result


def all_committed(load: Load) -> bool:
    """Whether every turn acknowledged so far is in the log at its seq."""
    return all(not (check.lost or check.misplaced or check.unreadable) for check in checks(load).values())


def settled(load: Load, timeout: float = COMMIT_DEADLINE_S) -> dict[str, ConversationCheck]:
    """The checks once every conversation's are ok, or the last ones when ``timeout`` passed (so
    the assertion can say what is wrong instead of only that it timed out)."""
    deadline = time.monotonic() + timeout
    while True:
        result = checks(load)
        if all(check.ok for check in result.values()) or time.monotonic() > deadline:
            return result
        time.sleep(0.5)


def paused(pid: int) -> None:
    """SIGSTOP ``pid`` and wait until the kernel has stopped it (the signal is delivered asynchronously)."""
    os.kill(pid, signal.SIGSTOP)
    until(lambda: _state(pid) in ("T", "t"), f"nats-server (pid {pid}) is stopped", timeout=30)


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2:].split()[0]


def restarts(log: Path) -> list[int]:
    """The pids of the nats-servers the stack's supervisor started again, from ``mirror up``'s log
    (stack.json keeps the first pid: it is written once)."""
    return [int(pid) for pid in re.findall(r"nats-server is back \(pid (\d+)\)", log.read_text())]


def lines(path: Path, pattern: str, most: int = 20) -> list[str]:
    """The last ``most`` lines of ``path`` matching ``pattern`` (for the failure messages)."""
    if not path.exists():
        return []
    return [line for line in path.read_text(errors="replace").splitlines() if re.search(pattern, line)][-most:]


def log_stats(data: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "mirror", "log", "stats", "--data", str(data)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    stats: dict[str, Any] = json.loads(done.stdout)
    return stats


@pytest.fixture(params=SYNC)
def stack(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, Path, dict[str, Any]]]:
    data, log = tmp_path / "data", tmp_path / "up.log"
    process, info = start_up(data, log, *request.param, reflection=True)  # `mirror up` as the issue runs it: reflection on
    try:
        yield data, log, info
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]


def test_a_broker_whose_disk_comes_back_older_loses_no_acknowledged_turn(
        stack: tuple[Path, Path, dict[str, Any]], tmp_path: Path) -> None:
    data, log, info = stack
    load = Load(info["url"], info["token"])
    # The JetStream store, "the broker's disk" (nats-server's own log beside it stays, so it reads on).
    store = data / "nats" / "jetstream"
    nats_pid = info["nats_pid"]

    # Round 1, committed, then the broker's disk as of T1.
    load.round(1)
    until(lambda: all_committed(load), "round 1 is committed to the log", timeout=COMMIT_DEADLINE_S)
    paused(nats_pid)
    t1 = tmp_path / "jetstream-t1"
    try:
        shutil.copytree(store, t1)
    finally:
        os.kill(nats_pid, signal.SIGCONT)

    # Round 2, committed. The ingester's DuckDB file is the second copy of these turns, the one
    # that survives the broker's rollback: what is tested is that the log neither loses them nor
    # lets the stream's reused sequence numbers shadow what comes after.
    load.round(2)
    until(lambda: all_committed(load), "round 2 is committed to the log", timeout=COMMIT_DEADLINE_S)

    # The broker's power fails and its disk comes back as of T1. Paused while the directory is
    # swapped (so it writes nothing more), then killed: the supervisor starts it again on the same
    # port and store path, which now holds the T1 copy.
    back_before = len(restarts(log))
    paused(nats_pid)
    shutil.move(store, tmp_path / "jetstream-t2")
    shutil.move(t1, store)
    os.kill(nats_pid, signal.SIGKILL)
    until(lambda: len(restarts(log)) > back_before, "the supervisor started nats-server again", timeout=60)

    # Round 3 on the older stream, then one more turn each: every conversation still answers.
    load.round(3)
    load.round(4, turns=1)

    final = settled(load, timeout=60)
    stats = log_stats(data)
    lost_by_round = Counter(load.rounds[ack.message] for ack in load.acknowledged
                            if ack.seq in final[ack.conversation].lost or ack.seq in final[ack.conversation].misplaced)
    report = {
        "acknowledged": len(load.acknowledged),
        "acknowledged_by_round": dict(Counter(load.rounds.values())),
        "lost_or_misplaced_by_round": dict(lost_by_round),
        "server_errors": len(load.server_errors),
        "turns_answered_500_at_least_once": len({failed.turn for failed in load.server_errors}),
        "failed_then_retried": len(load.failed_then_retried),
        "turns_failed_then_retried": len({failed.turn for failed in load.failed_then_retried}),
        "transport_errors": len(load.transport_errors),
        "given_up": load.given_up,
        "conversations": {name: check.as_dict() for name, check in final.items()},
        "log_stats": stats,
        "server_error_details": [vars(failed) for failed in load.server_errors[:10]],
        "retried_details": [vars(failed) for failed in load.failed_then_retried[:10]],
    }
    (tmp_path / "report.json").write_text(json.dumps(report, indent=1))
    print("\n" + json.dumps({key: value for key, value in report.items()
                             if key not in ("conversations", "server_error_details", "retried_details")}, indent=1))
    print("\n".join(f"{name}: {json.dumps(check.as_dict())}" for name, check in final.items() if not check.ok))
    # What the stack's logs said about it, for the failure messages.
    said = {"ingester.log": lines(data / "ingester.log", r"WARNING|ERROR|backwards|regress"),
            "warnings.log": lines(data / "warnings.log", r"500|ERROR|backwards|regress"),
            "up.log": lines(log, r"nats-server|ERROR")}

    assert not load.server_errors, (f"{len(load.server_errors)} requests answered other than 200 or 503",
                                    load.server_errors[:5], said)
    assert not load.transport_errors, load.transport_errors[:5]
    assert all(failed.retry_after.isdigit() and failed.detail for failed in load.failed_then_retried), \
        load.failed_then_retried[:5]
    assert not load.given_up, (load.given_up, said)
    assert len(load.acknowledged) == CONVERSATIONS * (3 * TURNS + 1)
    bad = {name: check.as_dict() for name, check in final.items() if not check.ok}
    assert not bad, (f"acknowledged turns lost or misplaced by round: {dict(lost_by_round)}", bad, said)
    for conversation in conversation_ids():  # the one more turn of round 4: every conversation answers
        assert any(load.rounds[ack.message] == 4 for ack in load.acknowledged_in(conversation)), conversation
    # `mirror log stats` says the stream went backwards (once: one rollback), and its ingester's log too.
    assert stats["stream_regressions"] == 1 and "went backwards" in stats["last_stream_regression"], stats
    assert lines(data / "ingester.log", "went backwards"), said["ingester.log"]
