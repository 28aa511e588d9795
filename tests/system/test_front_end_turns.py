"""The chat front ends people run, as their requests arrive: ordinary turns of Open WebUI,
LibreChat and SillyTavern (tests/recorded_requests/turns.json: their system cards, the whole
transcript resent each turn, their headers and sampling defaults) sent with httpx exactly as
recorded, plain and streamed. Each names its conversation by what it sends — Open WebUI its
``X-OpenWebUI-Chat-Id``, LibreChat its ``user`` field or the header its librechat.yaml templates
from the conversation id, SillyTavern the base URL's path — and the second turn recalls the first.
"""

from __future__ import annotations

import copy
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.conversing import Mirror, mirror_stack, two_turns, write_transcripts

pytestmark = pytest.mark.long  # a stack of its own and real clients: ~1 min; .ci/run runs it with -m long

TURNS = json.loads((Path(__file__).parents[1] / "recorded_requests" / "turns.json").read_text())
TRANSCRIPTS = Path(os.environ["MIRROR_TRANSCRIPTS"]) if os.environ.get("MIRROR_TRANSCRIPTS") else None


@pytest.fixture(scope="module")
def mirror(ray_cluster: None, nats_server: EmbeddedNats, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mirror]:
    with mirror_stack(nats_server.url, tmp_path_factory.mktemp("front-ends"), "frontends") as running:
        yield running


def shape(client: str, streamed: bool) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    """The conversation a client's recorded request names, the path it posts to, its headers and its
    body, with a fresh id where the recording has one (so plain and streamed are two conversations)."""
    recorded = copy.deepcopy(TURNS[client])
    headers, body = recorded["headers"], recorded["body"]
    body["stream"] = streamed
    if not streamed:
        body.pop("stream_options", None)
    if client == "openwebui":  # each Open WebUI chat is a UUID
        conversation = headers["X-OpenWebUI-Chat-Id"] = str(uuid.uuid4())
        return conversation, "/v1/chat/completions", headers, body
    if client == "librechat":  # the templated header when librechat.yaml sets it, else its user id
        if streamed:
            conversation = headers["X-Mirror-Conversation"] = str(uuid.uuid4())
        else:
            del headers["X-Mirror-Conversation"]
            conversation = body["user"] = uuid.uuid4().hex[:24]  # a Mongo ObjectId's length
        return conversation, "/v1/chat/completions", headers, body
    conversation = f"st-{'streamed' if streamed else 'plain'}"  # SillyTavern's Custom Endpoint URL
    return conversation, f"/c/{conversation}/v1/chat/completions", headers, body


def reply_of(answer: httpx.Response, streamed: bool) -> str:
    assert answer.status_code == 200, answer.text
    if not streamed:
        return str(answer.json()["choices"][0]["message"]["content"])
    assert answer.headers["content-type"].startswith("text/event-stream")
    lines = [line.removeprefix("data: ") for line in answer.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    return "".join(chunk["choices"][0]["delta"].get("content") or "" for chunk in chunks if chunk["choices"])


@pytest.mark.parametrize("client", ["openwebui", "librechat", "sillytavern"])
@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_a_front_end_holds_a_conversation(mirror: Mirror, client: str, streamed: bool) -> None:
    conversation, path, headers, body = shape(client, streamed)
    transcript: list[dict[str, str]] = []

    def say(message: str) -> str:
        transcript.append({"role": "user", "content": message})
        messages = [part for item in body["messages"] for part in (transcript if item == "transcript" else [item])]
        answer = httpx.post(mirror.url + path, json={**body, "messages": messages}, timeout=60,
                            headers={**headers, "Authorization": f"Bearer {mirror.token}"})
        text = reply_of(answer, streamed)
        assert answer.headers["x-mirror-named-by"] == {"openwebui": "openwebui", "sillytavern": "path",
                                                       "librechat": "header" if streamed else "user"}[client]
        transcript.append({"role": "assistant", "content": text})
        return text

    two_turns(mirror, conversation, say)
    sent = mirror.sent(conversation, 2)
    assert [len(e.body["messages"]) for e in sent] == [len(body["messages"]) - 1 + n for n in (1, 3)]
    assert [e.reply_headers.get("x-mirror-history") for e in sent[1:]] == ["same"]
    write_transcripts(TRANSCRIPTS, f"{client}-{'streamed' if streamed else 'plain'}", sent)


@pytest.mark.parametrize("client", ["openwebui", "librechat", "sillytavern"])
def test_a_front_end_s_regenerate_and_edit_are_branches(mirror: Mirror, client: str) -> None:
    """What each front end sends when its user regenerates the last reply (the transcript again,
    without that reply) and then edits the second message (the transcript up to it, edited): each
    forks one branch, ``main`` keeps its two turns and no turn twice."""
    conversation, path, headers, body = shape(client, False)
    conversation = {"openwebui": conversation, "librechat": conversation, "sillytavern": "st-regen"}[client]
    path = path.replace("/c/st-plain/", "/c/st-regen/")

    def send(transcript: list[dict[str, str]]) -> httpx.Response:
        messages = [part for item in body["messages"] for part in (transcript if item == "transcript" else [item])]
        answer = httpx.post(mirror.url + path, json={**body, "messages": messages}, timeout=60,
                            headers={**headers, "Authorization": f"Bearer {mirror.token}"})
        assert answer.status_code == 200, answer.text
        return answer

    transcript: list[dict[str, str]] = []
    for message in ("My name is Ada.", "What is my name?"):
        transcript.append({"role": "user", "content": message})
        transcript.append({"role": "assistant", "content": reply_of(send(transcript), False)})
        mirror.idle(conversation)

    regenerated = send(transcript[:-1])  # the last user message again, its reply left out
    assert regenerated.headers["x-mirror-history"] == "forked"
    assert regenerated.headers["x-mirror-branch"].startswith("regen-")
    edited = send([*transcript[:2], {"role": "user", "content": "What is my surname?"}])  # the second, edited
    assert edited.headers["x-mirror-history"] == "forked"
    assert edited.headers["x-mirror-branch"].startswith("edit-")
    assert edited.headers["x-mirror-branch"] != regenerated.headers["x-mirror-branch"]
    main = [event["payload"]["user_message"] for event in mirror.idle(conversation) if event["type"] == "turn"]
    assert main == ["My name is Ada.", "What is my name?"]  # main as it was: nothing appended twice
    for branch, asked in ((regenerated.headers["x-mirror-branch"], "What is my name?"),
                          (edited.headers["x-mirror-branch"], "What is my surname?")):
        own = httpx.get(f"{mirror.upstream}/v1/conversations/{conversation}/events", params={"branch": branch},
                        headers={"Authorization": f"Bearer {mirror.token}"}, timeout=30).json()["events"]
        assert [event["payload"]["user_message"] for event in own if event["type"] == "turn"] == [asked], branch
