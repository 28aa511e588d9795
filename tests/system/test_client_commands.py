"""`mirror demo`, `chat`, `events tail` and `status`, run as a user runs them, against one real stack.

The module starts one embedded stack (NATS, Ray, the ingester, the simulator, the gateway) on
free loopback ports; every command is a real `python -m mirror` process that finds it through
its data directory (stack.json) or through --url and --token.
"""

from __future__ import annotations

import io
import json
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from mirror.cli.client_commands import SIMULATOR_MODEL, SIMULATOR_NOTE, run_chat
from mirror.cli.errors import GatewayRequestFailed
from mirror.cli.gateway_client import GatewayClient, StackTarget
from mirror.cognition.prompts import DEFAULT_PROMPT_SETS
from mirror.processes import free_port
from mirror.stack.embedded import EmbeddedStack, StackSettings
from tests.support.stack import REFLECTION

CLIENT_ENV = ("MIRROR_URL", "MIRROR_TOKEN", "MIRROR_DATA", "MIRROR_LLM_URL", "MIRROR_LLM_MODEL")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    data = tmp_path_factory.mktemp("client-commands") / "data"
    settings = StackSettings(data_dir=data, llm="sim", gateway_port=free_port(), nats_port=free_port(),
                             sim_latency="fixed:5", reflection=REFLECTION)
    embedded = EmbeddedStack(settings).start()
    try:
        yield embedded
    finally:
        embedded.stop()


def mirror(*args: str, stdin: str = "", timeout: float = 120, columns: int = 200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror", *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=client_env(columns))


def client_env(columns: int = 200) -> dict[str, str]:
    """This environment without the variables that would point a command elsewhere."""
    env = {name: value for name, value in os.environ.items() if name not in CLIENT_ENV}
    env["COLUMNS"] = str(columns)  # rich wraps at 80 columns when not on a terminal
    return env


def api(stack: EmbeddedStack) -> httpx.Client:
    return httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=60)


def converse(stack: EmbeddedStack, conversation: str, *messages: str) -> int:
    """Send sync turns, then wait until the thinking is done and every event is committed; the last seq."""
    with api(stack) as client:
        for message in messages:
            response = client.post(f"/v1/conversations/{conversation}/turns", params={"sync": "true"},
                                   json={"message": message})
            assert response.status_code == 200, response.text
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            summary = client.get(f"/v1/conversations/{conversation}").json()
            committed = client.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000}).json()
            if not summary["thinking"] and committed["next_after"] == summary["last_seq"]:
                return summary["last_seq"]
            time.sleep(0.1)
    raise AssertionError(f"{conversation} did not settle: {summary}")


def test_demo_uses_the_running_stack_and_shows_replies_and_thinking(stack: EmbeddedStack) -> None:
    result = mirror("demo", "--data", str(stack.data_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert f"using the Mirror stack at {stack.url}" in out
    found = re.search(r"conversation (demo-[0-9a-f]+)", out)
    assert found is not None, out
    conversation = found.group(1)
    assert "peanut allergy" in out and "satay" in out
    assert out.count("╭─ mirror") == 5
    assert "narrative · seq" in out and "reasoning" in out
    assert "remember  One important thing before we start: I have a severe peanut allergy." in out
    summary_line = next(line for line in out.splitlines() if "5 turns, " in line)
    assert re.search(rf"5 turns, \d+ events in {conversation}; final narrative mentions the peanut allergy: (yes|no)",
                     summary_line), summary_line
    # The stack's model is the simulator: the demo says so after the first reply, and its last words say what a "no" means.
    flat = " ".join(out.split())
    first_turn = " ".join(out.split("turn 2 of 5")[0].split())
    assert f"the replies come from the simulator (model {SIMULATOR_MODEL}): made-up text" in first_turn
    assert flat.endswith(" ".join(SIMULATOR_NOTE.split())), out[-800:]
    with api(stack) as client:
        summary = client.get(f"/v1/conversations/{conversation}").json()
    assert summary["turns"] == 5 and summary["thought_turn"] == 4 and summary["narrative"]
    assert summary_line.endswith("a belief holds it: yes; recalled for the final reply: yes")
    # The last turn's recall, shown under its reply, is the one the log holds right before that turn.
    last_turn = out.rsplit("turn 5 of 5", 1)[1]
    assert re.search(r"recalled  [^\n]*peanut allergy", last_turn), last_turn
    with api(stack) as client:
        events = client.get(f"/v1/conversations/{conversation}/events", params={"limit": 1000}).json()["events"]
    turn_five = next(event for event in events if event["type"] == "turn" and event["turn"] == 4)
    recall = next(event for event in events if event["seq"] == turn_five["seq"] - 1)
    assert recall["type"] == "recall" and recall["payload"]["belief_ids"]


def test_demo_starts_its_own_stack_when_none_runs_and_stops_it(tmp_path: Path) -> None:
    data = tmp_path / "own"
    result = mirror("demo", "--llm", "sim", "--data", str(data))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "started an embedded stack at http://127.0.0.1:" in result.stdout
    assert "5 turns" in result.stdout
    assert " ".join(result.stdout.split()).endswith(" ".join(SIMULATOR_NOTE.split()))
    assert not (data / "stack.json").exists()


def test_chat_with_piped_input_replies_and_shows_narrative_and_events(stack: EmbeddedStack) -> None:
    result = mirror("chat", "piped-chat", "--url", stack.url, "--token", stack.token,
                    stdin="hello\n/narrative\n/events\n/quit\nnever sent\n")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "conversation piped-chat" in out
    assert out.count("mirror> ") == 1
    assert "thought: narrative updated" in out
    assert "narrative · seq 3" in out
    assert re.search(r"^\s+1  turn\s+'hello' → ", out, re.MULTILINE), out
    assert re.search(r"^\s+3  narrative ", out, re.MULTILINE), out
    with api(stack) as client:
        assert client.get("/v1/conversations/piped-chat").json()["turns"] == 1  # /quit stopped the loop
        (logged,) = [e for e in client.get("/v1/conversations/piped-chat/events").json()["events"] if e["type"] == "turn"]
    # The reply was printed piece by piece as it streamed; joined, the pieces are the logged reply.
    shown = out.split("mirror> ", 1)[1].split("\n  thought: ", 1)[0]
    assert shown == logged["payload"]["reply"], (shown, logged)


def test_the_client_streams_a_turn_whose_pieces_join_to_the_logged_reply(stack: EmbeddedStack) -> None:
    target = StackTarget(url=stack.url, token=stack.token)
    with GatewayClient(target) as client:
        *items, answer = client.turn_stream("streamed-client", "tell me something")
        pieces = [item for item in items if isinstance(item, str)]
        assert len(pieces) == len(items) > 1
        assert isinstance(answer, dict) and answer["turn"] == 0 and answer["llm_ms"] > 0
        (logged,) = client.events_through("streamed-client", after=answer["seq"] - 1, through=answer["seq"])
        assert "".join(pieces) == answer["reply"] == logged["payload"]["reply"]
        assert logged["payload"]["idempotency_key"]  # the client names each message, so a retry cannot log it twice
        plain = client.turn("streamed-client", "and then?")
        (again,) = client.events_through("streamed-client", after=plain["seq"] - 1, through=plain["seq"])
        assert again["payload"]["idempotency_key"] not in (None, logged["payload"]["idempotency_key"])
        with pytest.raises(GatewayRequestFailed) as empty:  # before the first piece: the HTTP status, as ever
            next(client.turn_stream("streamed-client", "   "))
        assert empty.value.status == 400 and "message is empty" in empty.value.detail


def test_chat_says_a_reply_was_cut_mid_stream_and_goes_on(stack: EmbeddedStack) -> None:
    sim_url = json.loads((stack.data_dir / "stack.json").read_text())["llm_url"].removesuffix("/v1")
    with GatewayClient(StackTarget(url=stack.url, token=stack.token)) as client:
        for attempt in range(5):  # the scripted fault goes to the next chat call: a thinker still at work may take it
            conversation = f"cut-chat-{attempt}"
            httpx.post(f"{sim_url}/_sim/script", json={"faults": ["cut"]}).raise_for_status()
            screen = io.StringIO()
            run_chat(client, Console(file=screen, width=2000), conversation, lines=io.StringIO("go on\nand then?\n"))
            out = screen.getvalue()
            if "the reply was cut off" in out:
                break
        else:
            pytest.fail("the cut fault never reached a Talker")
        cut, after = out.split("mirror> ")[1:]
        assert "the reply was cut off (" in cut and "may not be logged" in cut, out
        turns = [e for e in client.events(conversation) if e["type"] == "turn"]
        assert [(turn["turn"], turn["payload"]["user_message"]) for turn in turns] == [(0, "and then?")]
        assert after.split("\n", 1)[0] == turns[0]["payload"]["reply"]


def test_chat_no_stream_shows_the_whole_reply(stack: EmbeddedStack) -> None:
    result = mirror("chat", "unstreamed", "--url", stack.url, "--token", stack.token, "--no-stream", "--no-wait",
                    stdin="hello\n")
    assert result.returncode == 0, result.stderr[-3000:]
    with api(stack) as client:
        (logged,) = [e for e in client.get("/v1/conversations/unstreamed/events").json()["events"] if e["type"] == "turn"]
    shown = " ".join(result.stdout.split("mirror> ", 1)[1].split())  # wrapped at the console's width
    assert shown == " ".join(logged["payload"]["reply"].split())


def test_events_tail_prints_every_event_as_a_json_line(stack: EmbeddedStack) -> None:
    last_seq = converse(stack, "tail-me", "first", "second")
    result = mirror("events", "tail", "tail-me", "--data", str(stack.data_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [event["seq"] for event in events] == list(range(1, last_seq + 1))
    assert [event["payload"]["user_message"] for event in events if event["type"] == "turn"] == ["first", "second"]

    after = mirror("events", "tail", "tail-me", "--after", "2", "--data", str(stack.data_dir))
    assert [json.loads(line)["seq"] for line in after.stdout.splitlines()] == list(range(3, last_seq + 1))


def test_events_tail_follow_streams_new_events(stack: EmbeddedStack) -> None:
    last_seq = converse(stack, "follow-me", "before")
    # Ctrl-C as from a terminal: a suite started in the background (`./scripts/test &`) runs
    # with SIGINT ignored, which children inherit, and Python then never raises KeyboardInterrupt.
    process = subprocess.Popen([sys.executable, "-m", "mirror", "events", "tail", "follow-me", "--follow",
                                "--url", stack.url, "--token", stack.token],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=client_env(),
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    stdout, stderr = process.stdout, process.stderr
    assert stdout is not None and stderr is not None  # both piped
    lines: queue.Queue[str] = queue.Queue()

    def relay() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=relay, daemon=True).start()

    def seqs_until(target: int) -> list[int]:
        seen: list[int] = []
        while not seen or seen[-1] < target:
            try:
                seen.append(json.loads(lines.get(timeout=30))["seq"])
            except queue.Empty:
                raise AssertionError(f"no event {target} (seen {seen}): {stderr.read() if process.poll() is not None else ''}") from None
        return seen

    try:
        assert seqs_until(last_seq) == list(range(1, last_seq + 1))
        new_last = converse(stack, "follow-me", "after")
        assert seqs_until(new_last) == list(range(last_seq + 1, new_last + 1))
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0, stderr.read()


def test_status_shows_the_stack_and_its_conversations(stack: EmbeddedStack) -> None:
    last_seq = converse(stack, "status-me", "hello")
    result = mirror("status", "--data", str(stack.data_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"Mirror stack running for data dir {stack.data_dir} at {stack.url}" in result.stdout
    row = next(line for line in result.stdout.splitlines() if "status-me" in line)
    assert re.search(rf"status-me\s+│\s+{last_seq}\s+│\s+{last_seq}\s+│\s+main", row), row
    assert re.search(r"┃ conversation\s+┃ events \(all branches\) ┃ last seq \(main\) ┃ branches", result.stdout), result.stdout

    # At 80 columns every conversation id and branch name is still whole on a line of its own.
    with api(stack) as client:
        listed = client.get("/v1/conversations").json()["conversations"]
    narrow = mirror("status", "--data", str(stack.data_dir), columns=80)
    assert narrow.returncode == 0, narrow.stderr
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80, narrow.stdout
    for name in {item["id"] for item in listed} | {branch for item in listed for branch in item["branches"]}:
        assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", narrow.stdout), f"{name}:\n{narrow.stdout}"

    by_url = mirror("status", "--url", stack.url, "--token", stack.token)
    assert by_url.returncode == 0 and f"Mirror gateway at {stack.url}" in by_url.stdout and "status-me" in by_url.stdout


def test_log_stats_and_read_find_the_running_stack(stack: EmbeddedStack) -> None:
    last_seq = converse(stack, "log-me", "hello")
    data = str(stack.data_dir)
    deadline = time.monotonic() + 30  # the log commands read what the ingester has committed
    while (read := mirror("log", "read", "default", "log-me", "--data", data)).returncode != 0 or \
            len(read.stdout.splitlines()) < last_seq:
        assert time.monotonic() < deadline, read.stdout + read.stderr
        time.sleep(0.2)
    assert [json.loads(line)["seq"] for line in read.stdout.splitlines()] == list(range(1, last_seq + 1))
    stats = mirror("log", "stats", "--data", data)
    assert stats.returncode == 0, stats.stderr
    figures = json.loads(stats.stdout)
    assert figures["shard"] == "0" and figures["events"] >= last_seq and figures["conversations"] >= 1
    # --nats-url wins over the stack's: here a port nobody serves.
    elsewhere = mirror("log", "stats", "--data", data, "--nats-url", f"nats://127.0.0.1:{free_port()}")
    assert elsewhere.returncode == 2 and len(elsewhere.stderr.strip().splitlines()) == 1, elsewhere.stderr


@pytest.mark.parametrize("command", [("chat",), ("events", "tail", "c1"), ("status",)], ids=" ".join)
def test_without_a_stack_or_url_a_command_says_so_in_one_line(command: tuple[str, ...], tmp_path: Path) -> None:
    result = mirror(*command, "--data", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"mirror: error: no Mirror stack is running for data dir {tmp_path} (no live {tmp_path}/stack.json); "
        f"start one with `mirror up --data {tmp_path}`, or pass --url and --token"
    ]
    assert result.stdout == ""


def test_a_wrong_token_or_an_unreachable_gateway_is_one_line(stack: EmbeddedStack) -> None:
    wrong = mirror("status", "--url", stack.url, "--token", "mrr_wrong")
    assert wrong.returncode == 2
    assert len(wrong.stderr.strip().splitlines()) == 1 and "HTTP 401" in wrong.stderr and "--token" in wrong.stderr

    gone = f"http://127.0.0.1:{free_port()}"
    unreachable = mirror("demo", "--url", gone, "--token", "mrr_any")
    assert unreachable.returncode == 2
    assert unreachable.stderr.strip().splitlines()[-1].startswith(f"mirror: error: cannot reach the Mirror gateway at {gone}")
    assert "Traceback" not in unreachable.stderr


def test_replay_state_diff_verify_and_recompute_commands(stack: EmbeddedStack, tmp_path: Path) -> None:
    data = str(stack.data_dir)
    with api(stack) as http:
        for message in ("I never eat peanuts.", "Tell me about rivers."):
            assert http.post("/v1/conversations/lookback/turns", params={"sync": "true"},
                             json={"message": message}).status_code == 200
        deadline = time.monotonic() + 30
        while (summary := http.get("/v1/conversations/lookback").json())["thinking"] or summary["thought_turn"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.05)

    state = mirror("replay", "state", "lookback", "--at", "1", "--data", data)
    assert state.returncode == 0, state.stderr
    assert json.loads(state.stdout)["seq"] == 1 and json.loads(state.stdout)["turns"] == 1
    change = mirror("replay", "diff", "lookback", "--from", "1", "--data", data)
    assert change.returncode == 0 and "narrative:" in change.stdout and "turns: +1" in change.stdout
    deadline = time.monotonic() + 30  # verify reads the committed log
    while (verify := mirror("replay", "verify", "--all", "--data", data)).returncode != 0 or "lookback" not in verify.stdout:
        assert time.monotonic() < deadline, verify.stdout + verify.stderr
        time.sleep(0.2)
    assert "default/lookback/main: ok" in verify.stdout and "0 model calls" in verify.stdout

    prompts = tmp_path / "prompts"
    exported = mirror("prompts", "export", str(prompts))
    assert exported.returncode == 0, exported.stderr
    (prompts / "controller.md").write_text((prompts / "controller.md").read_text() + "\nI write briefly.\n")
    assert mirror("prompts", "diff", str(prompts)).returncode == 1
    recomputed = mirror("recompute", "--prompts", str(prompts), "--conversation", "lookback", "--json", "--data", data)
    assert recomputed.returncode == 0, recomputed.stderr
    report = json.loads(recomputed.stdout)
    assert report["completed"] == 1 and report["results"][0]["diff"]["narrative_changed"]
    readable = mirror("recompute", "--prompts", str(prompts), "--conversation", "lookback", "--data", data)
    assert readable.returncode == 0 and "1 done, 0 failed" in readable.stdout  # the same branch, already complete
    assert f"- lookback: nothing re-thought: branch {report['branch']} was already complete (2 turn(s))" in readable.stdout
    assert "re-thought (resumed" not in readable.stdout

    # A directory with the changed template alone is the same prompt set: the same branch, already complete.
    changed_only = tmp_path / "changed-only"
    changed_only.mkdir()
    shutil.copy(prompts / "controller.md", changed_only / "controller.md")
    partial = mirror("recompute", "--prompts", str(changed_only), "--conversation", "lookback", "--json", "--data", data)
    assert partial.returncode == 0, partial.stderr
    assert json.loads(partial.stdout)["branch"] == report["branch"]

    missing = mirror("replay", "state", "nowhere", "--data", data)
    assert missing.returncode == 2 and "404" in missing.stderr
    assert "check the conversation id" in missing.stderr
    # The conversation exists, the seq does not: the gateway's detail says so, with no word about the id.
    beyond = mirror("replay", "state", "lookback", "--at", "999", "--data", data)
    assert beyond.returncode == 2 and len(beyond.stderr.splitlines()) == 1
    assert "has no seq 999" in beyond.stderr and "conversation id" not in beyond.stderr
    assert "gateway's log" not in beyond.stderr


def committed_verify(*args: str) -> subprocess.CompletedProcess[str]:
    """``mirror replay verify`` once the log holds what it names (a branch just written may not be
    committed yet: verify reads the log, not the stream); the first run that is not an error."""
    deadline = time.monotonic() + 30
    while (result := mirror("replay", "verify", *args)).returncode == 2:
        assert time.monotonic() < deadline, result.stderr
        time.sleep(0.2)
    return result


def test_replay_verify_refuses_a_conversation_or_branch_the_log_does_not_hold(stack: EmbeddedStack) -> None:
    data = str(stack.data_dir)
    converse(stack, "verified", "Hello there.")
    unknown = mirror("replay", "verify", "nosuch", "--data", data)
    assert unknown.returncode == 2 and unknown.stdout == ""
    assert unknown.stderr.strip().splitlines() == [
        "mirror: error: tenant 'default' has no conversation 'nosuch' (`mirror status` lists its conversations)"]
    typo = mirror("replay", "verify", "verified", "--branch", "rc-typo", "--data", data)
    assert typo.returncode == 2 and len(typo.stderr.strip().splitlines()) == 1
    assert "conversation 'verified' has no branch 'rc-typo' (its branches: main)" in typo.stderr
    nowhere = mirror("replay", "verify", "--all", "--branch", "rc-typo", "--data", data)
    assert nowhere.returncode == 2 and "has a branch 'rc-typo'" in nowhere.stderr
    known = mirror("replay", "verify", "verified", "--data", data)
    assert known.returncode == 0 and "default/verified/main: ok" in known.stdout


def test_a_changed_prompt_is_explained_and_a_branch_from_one_template_verifies_by_itself(
    stack: EmbeddedStack, tmp_path: Path,
) -> None:
    data = str(stack.data_dir)
    last = converse(stack, "reprompt", "I never eat peanuts.", "Tell me about rivers.")
    prompts = tmp_path / "prompts"
    shutil.copytree(DEFAULT_PROMPT_SETS / "default", prompts)
    controller = (prompts / "controller.md").read_text() + "\nI write briefly.\n"
    (prompts / "controller.md").write_text(controller)
    changed = mirror("replay", "verify", "reprompt", "--prompts", str(prompts), "--data", data)
    assert changed.returncode == 1, changed.stderr
    assert "default/reprompt/main: DIVERGES" in changed.stdout
    assert "    prompts: controller.md changed compared with prompt set default-" in changed.stdout
    assert ("controller: the replay asked a request the log never answered (controller.md changed since the "
            "recording); it would record a thinker_failed where the log has a narrative") in changed.stdout
    assert "differs in" not in changed.stdout

    # A branch made over HTTP from one changed template: there is no directory to hand to verify.
    with api(stack) as http:
        done = http.post("/v1/recompute", params={"wait": "true"},
                         json={"prompts": {"controller.md": controller}, "conversations": ["reprompt"]})
        assert done.status_code == 200, done.text
        branch = done.json()["report"]["branch"]
        branch_last = http.get("/v1/conversations/reprompt/state", params={"branch": branch}).json()["seq"]
    verified = committed_verify("reprompt", "--branch", branch, "--data", data)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert f"default/reprompt/{branch}: ok" in verified.stdout and "0 model calls" in verified.stdout

    # Across branches, the diff compares the two heads by default, as the recompute report does.
    across = mirror("replay", "diff", "reprompt", "--to-branch", branch, "--data", data)
    assert across.returncode == 0, across.stderr
    assert across.stdout.splitlines()[0] == f"main@{last} → {branch}@{branch_last}"
    assert "  narrative:" in across.stdout and "turns:" not in across.stdout  # the same turns, other thoughts
    as_json = json.loads(mirror("replay", "diff", "reprompt", "--to-branch", branch, "--json", "--data", data).stdout)
    assert (as_json["source"], as_json["turns_added"]) == (f"main@{last}", 0)

    # On one branch, from its start: every belief the memory stage added, by id and statement.
    grown = mirror("replay", "diff", "reprompt", "--data", data)
    assert grown.stdout.splitlines()[0] == f"main@0 → main@{last}"
    assert "  beliefs added (" in grown.stdout and re.search(r"^    \+ b-\S+  \S", grown.stdout, re.MULTILINE), grown.stdout
    assert "beliefs added:" not in grown.stdout
