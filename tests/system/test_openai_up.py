"""The ``openai`` package against ``mirror up --llm sim``, as a user would point it: a plain
completion, a streamed one whose chunks join to the logged reply, a second turn by header, and a
client that leaves mid-stream (the turn is logged whole and the next one works).
"""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import openai
import pytest

from tests.support.up import ctrl_c, start_up
from tests.support.waits import until


def turns(stack: dict, conversation: str, at_least: int) -> list[dict]:
    def found() -> list[dict]:
        answer = httpx.get(f"{stack['url']}/v1/conversations/{conversation}/events", params={"limit": 1000},
                           headers={"Authorization": f"Bearer {stack['token']}"}, timeout=30)
        events = answer.json().get("events", []) if answer.status_code == 200 else []
        logged = [event for event in events if event["type"] == "turn"]
        return logged if len(logged) >= at_least else []
    return until(found, f"{at_least} turn(s) of {conversation} in the log", timeout=60)


README = Path(__file__).parents[2] / "README.md"


def readme_examples() -> tuple[str, str]:
    """The README's openai example (Python) and its streamed curl -N one (shell)."""
    text = README.read_text()
    python = re.search(r"With the `openai` package.*?```python\n(.*?)```", text, re.S)
    shell = re.search(r"Streamed, token by token:\s*```bash\n(.*?)```", text, re.S)
    assert python and shell, "the README's openai examples moved"
    return python.group(1), shell.group(1)


def run_readme_examples(stack: dict) -> tuple[str, str]:
    """Both README examples against this stack (its URL for 127.0.0.1:8080, its token for TOKEN)."""
    python, shell = (example.replace("http://127.0.0.1:8080", stack["url"]) for example in readme_examples())
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(python, {"TOKEN": stack["token"]})
    streamed = subprocess.run(["bash", "-c", shell], env={"TOKEN": stack["token"], "PATH": "/usr/bin:/bin"},
                              capture_output=True, text=True, timeout=60, check=True).stdout
    return printed.getvalue(), streamed


def test_the_openai_package_against_mirror_up(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "up.log"
    process, stack = start_up(data, log, "--sim-latency", "fixed:5", "--sim-token-delay", "10")
    try:
        client = openai.OpenAI(base_url=f"{stack['url']}/v1", api_key=stack["token"], max_retries=0, timeout=60)
        header = {"X-Mirror-Conversation": "sdk"}
        plain = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "Hello!"}],
                                               extra_headers=header)
        assert plain.choices[0].message.content and (plain.model_extra or {})["mirror"]["turn"] == 0
        stream = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "And the lake?"}],
                                                stream=True, extra_headers=header)
        chunks = list(stream)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        said = [turn["payload"]["reply"] for turn in turns(stack, "sdk", 2)]
        assert said == [plain.choices[0].message.content, text]
        assert (chunks[-1].model_extra or {})["mirror"]["turn"] == 1

        left = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "A long story."}],
                                              stream=True, extra_headers=header)
        received = ""
        for chunk in left:
            received += chunk.choices[0].delta.content or ""
            if len(received.split()) >= 2:
                break
        left.close()
        logged = turns(stack, "sdk", 3)[2]["payload"]["reply"]
        assert logged.startswith(received) and len(logged) > len(received)  # the whole turn, not what was read
        after = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "Then?"}],
                                               extra_headers=header)
        assert (after.model_extra or {})["mirror"]["turn"] == 3

        if shutil.which("curl") is None:
            pytest.skip("no curl to run the README's streamed example with")
        printed, streamed = run_readme_examples(stack)
        events = [line for line in streamed.splitlines() if line.startswith("data: ")]
        assert printed.strip() and events[-1] == "data: [DONE]" and '"finish_reason": "stop"' in streamed
        hello = [turn["payload"]["reply"] for turn in turns(stack, "hello", 2)]
        assert hello[0] == printed.strip()
    finally:
        assert ctrl_c(process) == 0, log.read_text()[-3000:]
