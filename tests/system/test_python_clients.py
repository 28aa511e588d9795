"""Python clients as their users configure them, each holding a two-turn conversation with Mirror,
plain and streamed, the second turn recalling the first: LangChain's ``ChatOpenAI``, LiteLLM as a
client and Simon Willison's ``llm`` CLI (a subprocess with its own config directory). Each names
its conversation with nothing but its documented settings: the base URL ``/c/<name>/v1`` for the
plain conversation, a default header for the streamed one. (The ``openai`` package is
tests/system/test_openai_naming.py's.) Every request crosses a recording pass-through, so the
tests also see what each client really sent.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.conversing import Mirror, mirror_stack, two_turns, write_transcripts

pytestmark = pytest.mark.long  # a stack of its own and real clients: ~1 min; .ci/run runs it with -m long

TRANSCRIPTS = Path(os.environ["MIRROR_TRANSCRIPTS"]) if os.environ.get("MIRROR_TRANSCRIPTS") else None
HOW = pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])


@pytest.fixture(scope="module")
def mirror(ray_cluster: None, nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    with mirror_stack(nats_server.url, tmp_path_factory.mktemp("python-clients"), "pyclients") as running:
        yield running


def named(mirror: Mirror, client: str, streamed: bool) -> tuple[str, str, dict[str, str]]:
    """The conversation, the base URL and the default headers a user of ``client`` would set:
    the base URL names the plain one, ``X-Mirror-Conversation`` the streamed one."""
    conversation = f"{client}-{'streamed' if streamed else 'plain'}"
    if streamed:
        return conversation, f"{mirror.url}/v1", {"X-Mirror-Conversation": conversation}
    return conversation, f"{mirror.url}/c/{conversation}/v1", {}


@HOW
def test_langchain_chat_openai(mirror: Mirror, streamed: bool) -> None:
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
    from langchain_openai import ChatOpenAI

    conversation, base_url, headers = named(mirror, "langchain", streamed)
    llm = ChatOpenAI(model="mirror", base_url=base_url, api_key=mirror.token,  # type: ignore[arg-type]
                     default_headers=headers, max_retries=0, timeout=60)
    history: list[BaseMessage] = []

    def say(message: str) -> str:
        history.append(HumanMessage(message))
        if streamed:
            text = "".join(str(chunk.content) for chunk in llm.stream(history))
        else:
            text = str(llm.invoke(history).content)
        history.append(AIMessage(text))
        return text

    two_turns(mirror, conversation, say)
    sent = mirror.sent(conversation, 2)
    assert [len(e.body["messages"]) for e in sent] == [1, 3]  # the whole transcript, resent
    assert all(e.body.get("stream", False) == streamed for e in sent)
    assert all(e.reply_headers["x-mirror-history"] == "same" for e in sent[1:])
    write_transcripts(TRANSCRIPTS, conversation, sent)


@HOW
def test_litellm_as_a_client(mirror: Mirror, streamed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # its documented offline switch: no cost-map fetch
    import litellm

    conversation, base_url, headers = named(mirror, "litellm", streamed)
    history: list[dict[str, str]] = []

    def say(message: str) -> str:
        history.append({"role": "user", "content": message})
        answer: Any = litellm.completion(model="openai/mirror", api_base=base_url, api_key=mirror.token,
                                         extra_headers=headers, messages=history, stream=streamed, num_retries=0)
        if streamed:
            text = "".join(chunk.choices[0].delta.content or "" for chunk in answer if chunk.choices)
        else:
            text = answer.choices[0].message.content
        history.append({"role": "assistant", "content": text})
        return text

    two_turns(mirror, conversation, say)
    sent = mirror.sent(conversation, 2)
    assert [len(e.body["messages"]) for e in sent] == [1, 3]
    assert all(e.body.get("stream", False) == streamed for e in sent)
    write_transcripts(TRANSCRIPTS, conversation, sent)


LLM_CONFIG = """\
- model_id: {model_id}
  model_name: mirror
  api_base: "{base_url}"
  api_key_name: mirror
{headers}"""


@HOW
def test_the_llm_cli(mirror: Mirror, streamed: bool, tmp_path: Path) -> None:
    conversation, base_url, headers = named(mirror, "llm", streamed)
    header_lines = "".join(f"  headers:\n    {k}: {v}\n" for k, v in headers.items())
    (tmp_path / "extra-openai-models.yaml").write_text(LLM_CONFIG.format(model_id=conversation, base_url=base_url,
                                                                          headers=header_lines))
    env = {**os.environ, "LLM_USER_PATH": str(tmp_path)}
    llm = [sys.executable, "-m", "llm"]
    subprocess.run([*llm, "keys", "set", "mirror", "--value", mirror.token], env=env, check=True, timeout=60)
    turns = iter([["-m", conversation], ["-c"]])  # the first names the model; -c continues llm's own log

    def say(message: str) -> str:
        stream = [] if streamed else ["--no-stream"]
        done = subprocess.run([*llm, "prompt", *next(turns), *stream, message], env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    two_turns(mirror, conversation, say)
    sent = mirror.sent(conversation, 2)
    assert [len(e.body["messages"]) for e in sent] == [1, 3]
    assert all(e.body.get("stream", False) == streamed for e in sent)
    write_transcripts(TRANSCRIPTS, conversation, sent)
