"""What clients send without code, against a real gateway, conversation hosts, NATS, the ingester
and the simulator: a conversation named by the base URL path (the official ``openai`` package with
``base_url=".../c/<name>/v1"``, plain and streamed, the second turn recalling the first), by
header, Open WebUI's chat id, metadata, user and prompt_cache_key, in that order; the 400s; the
sampling knobs front ends send by default; and the background tasks of Open WebUI, LibreChat and
SillyTavern from their recorded request shapes (tests/recorded_requests), answered by the model
and leaving the log as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import OpenAIChatClient
from mirror.events.nats.server import EmbeddedNats
from mirror.gateway.openai.background import request_for
from mirror.gateway.openai.shapes import ChatCompletionIn
from mirror.sim.content import chat_completion, request_digest
from tests.support.stack import conversation_runtime
from tests.support.waits import until

RECORDED = Path(__file__).parents[1] / "recorded_requests"
FACT = "I have a severe peanut allergy."
LATER = "Could you suggest a peanut snack for my hike?"


@pytest.fixture(scope="module")
def stack(ray_cluster: None, nats_server: EmbeddedNats,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, RuntimeSettings]]:
    """A gateway on conversation hosts; yields its URL, acme's token and the runtime's settings."""
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    directory = tmp_path_factory.mktemp("naming")
    token = TenantRegistry(directory / "tenants.json").add("acme")
    with conversation_runtime(nats_server.url, directory, shard="naming", latency="fixed:5",
                              token_delay_ms=5.0) as runtime:
        app = create_app(GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json")))
        with GatewayServer(app) as server:
            yield server.url, token, runtime


def sdk(url: str, token: str, base: str = "/v1") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}{base}", api_key=token, max_retries=0, timeout=60)


def events(url: str, token: str, conversation: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{url}/v1/conversations/{conversation}/events", params={"limit": 1000},
                       headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return answer.json().get("events", []) if answer.status_code == 200 else []


def idle(url: str, token: str, conversation: str) -> list[dict[str, Any]]:
    """The conversation's events once it is done thinking about its last turn."""
    def done() -> bool:
        state = httpx.get(f"{url}/v1/conversations/{conversation}", headers={"Authorization": f"Bearer {token}"},
                          timeout=30)
        return state.status_code == 200 and not state.json()["thinking"]
    until(done, f"{conversation} done thinking", timeout=60)
    return events(url, token, conversation)


def said(text: str) -> Any:
    """One user message, as the SDK's ``messages`` (typed loosely: the SDK's own TypedDicts are strict)."""
    return [{"role": "user", "content": text}]


def turns_of(logged: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in logged if event["type"] == "turn"]


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_the_base_url_names_the_conversation_and_the_second_turn_recalls_the_first(stack, streamed: bool) -> None:
    url, token, _ = stack
    name = f"by-path-{'streamed' if streamed else 'plain'}"
    client = sdk(url, token, f"/c/{name}/v1")
    assert "mirror" in [model.id for model in client.models.list()]  # /c/<name>/v1/models too

    def say(message: str) -> tuple[str, dict[str, Any]]:
        if not streamed:
            raw = client.chat.completions.with_raw_response.create(model="mirror",
                                                                   messages=said(message))
            assert raw.headers["x-mirror-named-by"] == "path"
            done = raw.parse()
            return done.choices[0].message.content or "", (done.model_extra or {})["mirror"]
        chunks = list(client.chat.completions.create(model="mirror", messages=said(message),
                                                     stream=True))
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        (final,) = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
        return text, (final.model_extra or {})["mirror"]

    first, where = say(FACT)
    assert where == {"conversation": name, "branch": "main", "seq": where["seq"], "turn": 0} and first
    idle(url, token, name)  # the first turn thought through: its fact is a belief
    second, where = say(LATER)
    assert where["conversation"] == name and where["turn"] == 1
    logged = idle(url, token, name)
    assert [t["payload"]["user_message"] for t in turns_of(logged)] == [FACT, LATER]
    assert [t["payload"]["reply"] for t in turns_of(logged)] == [first, second]
    beliefs = {e["payload"]["belief_id"]: e["payload"] for e in logged if e["type"] == "belief"}
    recall = next(e for e in logged if e["type"] == "recall" and e["seq"] == where["seq"] - 1)
    assert any("peanut" in json.dumps(beliefs[b]) for b in recall["payload"]["belief_ids"] if b in beliefs)


def test_each_source_names_the_conversation_in_the_documented_order(stack) -> None:
    url, token, _ = stack
    client = sdk(url, token)
    hello = said("hello")

    def named(base: str = "/v1", **create: Any) -> tuple[str, str]:
        raw = sdk(url, token, base).chat.completions.with_raw_response.create(model="mirror", messages=hello, **create)
        return (raw.parse().model_extra or {})["mirror"]["conversation"], raw.headers["x-mirror-named-by"]

    every: dict[str, Any] = {"extra_headers": {"X-Mirror-Conversation": "o-header", "X-OpenWebUI-Chat-Id": "o-webui"},
             "metadata": {"conversation_id": "o-meta"}, "user": "o-user", "extra_body": {"prompt_cache_key": "o-cache"}}
    assert named("/c/o-path/v1", **every) == ("o-path", "path")
    assert named(**every) == ("o-header", "header")
    assert named(**{**every, "extra_headers": {"X-OpenWebUI-Chat-Id": "o-webui"}}) == ("o-webui", "openwebui")
    assert named(metadata={"conversation_id": "o-meta"}, user="o-user") == ("o-meta", "metadata")
    assert named(user="o-user", extra_body={"prompt_cache_key": "o-cache"}) == ("o-user", "user")
    assert named(extra_body={"prompt_cache_key": "o-cache", "safety_identifier": "o-safe"}) == ("o-cache",
                                                                                               "prompt_cache_key")
    with pytest.raises(openai.BadRequestError) as missing:  # safety_identifier names no conversation
        client.chat.completions.create(model="mirror", messages=hello, extra_body={"safety_identifier": "o-safe"})
    assert missing.value.code == "missing_conversation" and "base_url='http://<host>:<port>/c/<name>/v1'" in \
        missing.value.message  # the openai package recognised: its own setting named
    curl = httpx.post(f"{url}/v1/chat/completions", json={"model": "mirror", "messages": hello},
                      headers={"Authorization": f"Bearer {token}", "User-Agent": "curl/8.5.0"})
    assert curl.status_code == 400 and "-H 'X-Mirror-Conversation: <name>'" in curl.json()["error"]["message"]
    webui = httpx.post(f"{url}/v1/chat/completions", json={"model": "mirror", "messages": hello},
                       headers={"Authorization": f"Bearer {token}", "X-OpenWebUI-User-Id": "u1"})
    assert "ENABLE_FORWARD_USER_INFO_HEADERS" in webui.json()["error"]["message"]
    for base, create, param in (("/c/bad%20name/v1", {}, None), ("/v1", {"user": "a b"}, "user"),
                                ("/v1", {"extra_headers": {"X-OpenWebUI-Chat-Id": "local:abc"}}, None),
                                ("/v1", {"metadata": {"conversation_id": "x" * 65}}, "metadata.conversation_id")):
        with pytest.raises(openai.BadRequestError) as bad:
            sdk(url, token, base).chat.completions.create(model="mirror", messages=hello, **create)
        assert bad.value.code == "invalid_conversation" and bad.value.param == param, base
        assert "invalid conversation" in bad.value.message and "named by" in bad.value.message
    for conversation in ("o-path", "o-header", "o-webui", "o-meta", "o-user", "o-cache"):
        assert len(turns_of(events(url, token, conversation))) == 1, conversation


def test_sampling_knobs_are_ignored_out_loud_and_refused_when_strict(stack) -> None:
    url, token, _ = stack
    st = json.loads((RECORDED / "sillytavern.json").read_text())["turn"]
    answer = httpx.post(f"{url}/c/knobs/v1/chat/completions", json=st["body"],
                        headers={"Authorization": f"Bearer {token}", **st["headers"]})
    assert answer.status_code == 200, answer.text  # SillyTavern's defaults, as it sends them
    assert answer.headers["x-mirror-ignored"] == "temperature, max_tokens"
    client = sdk(url, token, "/c/knobs/v1")
    hello = said("hello")
    raw = client.chat.completions.with_raw_response.create(model="mirror", messages=hello, temperature=1.3, top_p=0.5,
                                                           frequency_penalty=0.2, seed=3, stop=["\n"], max_tokens=16)
    assert raw.headers["x-mirror-ignored"] == "temperature, top_p, frequency_penalty, seed, stop, max_tokens"
    honoured = client.chat.completions.with_raw_response.create(model="mirror", messages=hello, temperature=0.7,
                                                                max_tokens=4096)
    assert "x-mirror-ignored" not in honoured.headers  # the Talker's own settings are honoured, not ignored
    knobs: dict[str, Any] = {"temperature": 1.3, "max_tokens": 16, "stop": ["\n"], "top_p": 0.5, "seed": 3}
    for name, value in knobs.items():
        with pytest.raises(openai.BadRequestError) as strict:
            client.chat.completions.create(model="mirror", messages=hello, extra_headers={"X-Mirror-Strict": "true"},
                                           **{name: value})
        assert strict.value.param == name and "X-Mirror-Strict" in strict.value.message, name
    shapes: dict[str, Any] = {"n": 2, "logprobs": True, "response_format": {"type": "json_object"},
                              "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}
    for name, value in shapes.items():
        with pytest.raises(openai.BadRequestError) as shape:
            client.chat.completions.create(model="mirror", messages=hello, **{name: value})
        assert shape.value.param == name and shape.value.code == "unsupported_parameter", name
    assert len(turns_of(events(url, token, "knobs"))) == 3


def model_said(body: dict[str, Any], runtime: RuntimeSettings) -> str:
    """What the simulator answers the one plain call a background request makes (its content is a pure function)."""
    sent = OpenAIChatClient._chat_body(request_for(ChatCompletionIn.model_validate(body), runtime), "none")
    return chat_completion(sent, request_digest(sent), sent["model"])["choices"][0]["message"]["content"]


@pytest.mark.parametrize("recorded", ["openwebui_tasks.json", "librechat_tasks.json", "sillytavern.json"])
def test_background_tasks_are_answered_by_the_model_and_leave_the_log_as_it_was(stack, recorded: str) -> None:
    url, token, runtime = stack
    shapes = json.loads((RECORDED / recorded).read_text())["requests"]
    conversation = f"tasks-{recorded.split('_')[0].removesuffix('.json')}"
    auth = {"Authorization": f"Bearer {token}"}
    first = httpx.post(f"{url}/c/{conversation}/v1/chat/completions", headers=auth, timeout=60,
                       json={"model": "mirror", "messages": [{"role": "user", "content": FACT}]})
    assert first.status_code == 200, first.text
    before = idle(url, token, conversation)
    for shape in shapes:
        headers = {**shape["headers"], **auth}
        if "X-OpenWebUI-Chat-Id" in headers or "X-Mirror-Conversation" in headers:
            headers = {**headers, "X-OpenWebUI-Chat-Id": conversation, "X-Mirror-Conversation": conversation}
        answer = httpx.post(f"{url}/v1/chat/completions", json=shape["body"], headers=headers, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.headers["x-mirror-task"] == shape["task"]
        assert answer.json()["mirror"] == {"task": shape["task"]}
        assert answer.json()["choices"][0]["message"]["content"] == model_said(shape["body"], runtime)
    after = idle(url, token, conversation)
    assert len(after) == len(before) and after == before


def test_background_is_forceable_by_header_and_model_and_a_turn_by_header(stack) -> None:
    url, token, runtime = stack
    client = sdk(url, token, "/c/forced/v1")
    assert "mirror:background" in [model.id for model in client.models.list()]
    ask = said("Name this chat in three words.")
    raw = client.chat.completions.with_raw_response.create(model="mirror", messages=ask,
                                                           extra_headers={"X-Mirror-Task": "background"})
    assert raw.headers["x-mirror-task"] == "background"
    assert raw.parse().choices[0].message.content == model_said({"model": "mirror", "messages": ask}, runtime)
    chunks: list[Any] = list(sdk(url, token).chat.completions.create(model="mirror:background", messages=ask,
                                                                      stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        model_said({"model": "mirror:background", "messages": ask}, runtime)
    assert events(url, token, "forced") == []  # never even created
    title = json.loads((RECORDED / "openwebui_tasks.json").read_text())["requests"][0]["body"]
    forced = client.chat.completions.with_raw_response.create(extra_headers={"X-Mirror-Task": "turn"}, **title)
    assert forced.headers["x-mirror-task"] == "turn" and (forced.parse().model_extra or {})["mirror"]["turn"] == 0
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="mirror", messages=ask, extra_headers={"X-Mirror-Task": "later"})
    assert bad.value.param == "X-Mirror-Task"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="persona:nobody:background", messages=ask)
