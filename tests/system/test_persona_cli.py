"""The persona mind from the command line, run as a user runs it, against one real stack with the
simulator: `mirror demo --mind persona`, `mirror chat --persona FILE|NAME` and its mood line,
`mirror persona push|list`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from mirror.cognition.persona import EXAMPLES
from mirror.processes import free_port
from mirror.stack.embedded import EmbeddedStack, StackSettings
from tests.system.test_client_commands import api, mirror


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedStack]:
    data = tmp_path_factory.mktemp("persona-cli") / "data"
    settings = StackSettings(data_dir=data, llm="sim", gateway_port=free_port(), nats_port=free_port(),
                             sim_latency="fixed:2")
    embedded = EmbeddedStack(settings).start()
    try:
        yield embedded
    finally:
        embedded.stop()


def test_demo_mind_persona_plays_wren_and_meets_her_hard_goals_in_order(stack: EmbeddedStack) -> None:
    result = mirror("demo", "--mind", "persona", "--data", str(stack.data_dir))
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    found = re.search(r"conversation (persona-demo-[0-9a-f]+) \(appraisal_first\)", out)
    assert found is not None, out
    assert out.count("╭─ mirror") == 4 and "appraisal      I feel" in out and "mood: " in out
    table = out.split("what moved, turn by turn", 1)[1]
    assert re.search(r"│ 2 .*fear \+0\.\d\d.*met: Find out where the stranger got the pocket watch", table), table
    assert "met: Decide whether to show the stranger the lamp room" in table
    assert out.rstrip().endswith("3 of 3 hard goals met; every hard goal is met")
    with api(stack) as client:
        state = client.get(f"/v1/conversations/{found.group(1)}/persona").json()
    assert state["goals"]["hard_met"] == 3 and state["goals"]["met_at_turns"] == [1, 2, 3]


def test_a_bad_persona_file_fails_before_any_turn(stack: EmbeddedStack, tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"spec": "chara_card_v2", "data": {"description": "no name"}}))
    result = mirror("demo", "--mind", "persona", "--persona", str(bad), "--data", str(stack.data_dir))
    assert result.returncode == 2 and "data.name" in result.stderr and "bad.json" in result.stderr, result.stderr
    assert mirror("demo", "--order", "plan_first", "--data", str(stack.data_dir)).returncode == 2


def test_chat_with_a_persona_file_shows_a_mood_line_after_each_reply(stack: EmbeddedStack) -> None:
    result = mirror("chat", "wren-piped", "--url", stack.url, "--token", stack.token,
                    "--persona", str(EXAMPLES / "wren.json"), "--order", "plan_first",
                    stdin="The storm took my brother.\nIt's his pocket watch.\n/quit\n")
    assert result.returncode == 0, result.stderr[-3000:]
    moods = [line for line in result.stdout.splitlines() if line.startswith("  mood: ")]
    assert len(moods) == 2, result.stdout
    assert re.match(r"  mood: \w+ \d\.\d\d.* · closeness \d\.\d\d, trust \d\.\d\d, curiosity \d\.\d\d · goal 1/3: Find out",
                    moods[0]), moods[0]
    assert "goal 2/3: Learn whether the watch" in moods[1]  # the pocket watch met the first hard goal
    with api(stack) as client:  # the formulation streamed: each reply's line is the logged reply
        replies = [e["payload"]["reply"] for e in client.get("/v1/conversations/wren-piped/events",
                                                              params={"limit": 1000}).json()["events"] if e["type"] == "turn"]
    shown = [line.removeprefix("mirror> ") for line in result.stdout.splitlines() if line.startswith("mirror> ")]
    assert shown[0].startswith("*Wren looks up")  # her card's greeting opens the conversation
    assert shown[1:] == replies and len(replies) == 2, result.stdout
    with api(stack) as client:
        assert client.get("/v1/conversations/wren-piped/persona").json()["order"] == "plan_first"
    again = mirror("chat", "wren-piped", "--url", stack.url, "--token", stack.token,
                   "--persona", str(EXAMPLES / "odile.png"), stdin="/quit\n")
    assert again.returncode == 2 and "409" in again.stderr, again.stderr  # another mind later is refused


def test_persona_push_and_list_then_chat_by_name(stack: EmbeddedStack) -> None:
    pushed = mirror("persona", "push", str(EXAMPLES / "odile.png"), "--name", "odile", "--url", stack.url,
                    "--token", stack.token)
    assert pushed.returncode == 0 and pushed.stdout.startswith("stored ") and " as odile " in pushed.stdout, pushed
    listed = mirror("persona", "list", "--json", "--url", stack.url, "--token", stack.token)
    assert "odile" in json.loads(listed.stdout)
    chat = mirror("chat", "odile-chat", "--url", stack.url, "--token", stack.token, "--persona", "odile",
                  "--no-wait", "--no-stream", stdin="Hello!\n")
    assert chat.returncode == 0 and "  mood: " in chat.stdout, chat.stdout + chat.stderr  # the single request too
    missing = mirror("chat", "nobody-chat", "--url", stack.url, "--token", stack.token, "--persona", "nobody",
                     stdin="Hello!\n")
    assert missing.returncode == 2 and "no persona 'nobody'" in missing.stderr, missing.stderr
