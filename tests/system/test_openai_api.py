"""The OpenAI-compatible API with the official ``openai`` package: a real gateway, conversation
hosts or dedicated actors (both placements), NATS, the ingester and the simulator streaming its
tokens 10 ms apart. ``test_openai_up.py`` runs the same client against ``mirror up --llm sim``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import httpx
import openai
import pytest

from mirror.events.nats.server import EmbeddedNats
from tests.support.stack import PLACEMENTS, conversation_runtime, gateway_stack
from tests.support.waits import until

EXAMPLES = Path(__file__).parents[2] / "cognition" / "persona" / "examples"
TOKEN_DELAY_MS = 10.0


@pytest.fixture(scope="module", params=PLACEMENTS)
def served(request: pytest.FixtureRequest, ray_cluster: None, nats_server: EmbeddedNats,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], str]]:
    """gateway_stack's pieces, to also yield the simulator's URL (a test scripts its faults)."""
    from mirror.gateway.app import GatewayServer, GatewaySettings, create_app
    from mirror.gateway.tenants import TenantRegistry

    directory = tmp_path_factory.mktemp("openai")
    registry = TenantRegistry(directory / "tenants.json")
    tokens = {tenant: registry.add(tenant) for tenant in ("acme", "globex")}
    with conversation_runtime(nats_server.url, directory, shard="oai", latency="fixed:5", placement=request.param,
                              token_delay_ms=TOKEN_DELAY_MS) as runtime:
        app = create_app(GatewaySettings(runtime=runtime, tenants_file=str(directory / "tenants.json")))
        with GatewayServer(app) as server:
            yield server.url, tokens, runtime.llm.base_url.removesuffix("/v1")


@pytest.fixture
def stack(served: tuple[str, dict[str, str], str]) -> tuple[str, dict[str, str]]:
    return served[0], served[1]


@pytest.fixture
def sim_url(served: tuple[str, dict[str, str], str]) -> str:
    return served[2]


def client_of(url: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=60)


def on(conversation: str) -> dict[str, str]:
    return {"X-Mirror-Conversation": conversation}


def logged_turns(url: str, token: str, conversation: str, at_least: int = 1) -> list[dict]:
    """The conversation's ``turn`` events, once the log holds ``at_least`` of them."""
    def turns() -> list[dict]:
        events = httpx.get(f"{url}/v1/conversations/{conversation}/events", params={"limit": 1000},
                           headers={"Authorization": f"Bearer {token}"}).json().get("events", [])
        found = [event for event in events if event["type"] == "turn"]
        return found if len(found) >= at_least else []
    return until(turns, f"{at_least} turn(s) of {conversation} in the log")


def test_a_plain_completion_is_a_logged_turn(stack) -> None:
    url, tokens = stack
    completion = client_of(url, tokens["acme"]).chat.completions.create(
        model="mirror", messages=[{"role": "user", "content": "Hello there, how was the lake?"}], extra_headers=on("plain"))
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-") and completion.model == "mirror"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant" and choice.message.content
    assert completion.usage is not None and completion.usage.total_tokens == \
        completion.usage.prompt_tokens + completion.usage.completion_tokens > 0
    extension = (completion.model_extra or {})["mirror"]
    (turn,) = logged_turns(url, tokens["acme"], "plain")
    assert extension == {"conversation": "plain", "branch": "main", "seq": turn["seq"], "turn": 0}
    assert turn["payload"]["reply"] == choice.message.content


def test_a_streamed_completion_joins_to_the_logged_reply_and_ends_with_the_seq(stack) -> None:
    url, tokens = stack
    stream = client_of(url, tokens["acme"]).chat.completions.create(
        model="mirror", messages=[{"role": "user", "content": "Tell me about the garden."}], stream=True,
        stream_options={"include_usage": True}, extra_headers=on("streamed"))
    chunks = list(stream)
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks) and len({c.id for c in chunks}) == 1
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    pieces = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].delta.content]
    assert len(pieces) > 3 and pieces[0].choices[0].delta.role == "assistant"
    (final,) = [chunk for chunk in chunks if chunk.choices and chunk.choices[0].finish_reason]
    assert final.choices[0].finish_reason == "stop"
    (turn,) = logged_turns(url, tokens["acme"], "streamed")
    assert text == turn["payload"]["reply"]
    assert (final.model_extra or {})["mirror"] == {"conversation": "streamed", "branch": "main", "seq": turn["seq"],
                                                   "turn": 0}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_two_turns_of_one_conversation_by_header_and_the_history_they_send(stack):
    url, tokens = stack
    client = client_of(url, tokens["acme"])
    first = client.chat.completions.create(model="mirror-baseline", messages=[{"role": "user", "content": "I am Ada."}],
                                           extra_headers=on("two"))
    said = first.choices[0].message.content
    history = [{"role": "user", "content": "I am Ada."}, {"role": "assistant", "content": said}]
    raw = client.chat.completions.with_raw_response.create(
        model="mirror-baseline", messages=[{"role": "system", "content": "Be terse."}, *history,
                                           {"role": "user", "content": "Who am I?"}], extra_headers=on("two"))
    assert raw.headers["x-mirror-history"] == "same" and raw.headers["x-mirror-branch"] == "main"
    second = raw.parse()
    assert (second.model_extra or {})["mirror"]["turn"] == 1
    # another history from its first message on: a branch forked before it, holding the client's exchange
    wrong = client.chat.completions.with_raw_response.create(
        model="mirror-baseline", messages=[{"role": "user", "content": "I am Bob."}, {"role": "assistant", "content": "Hi Bob"},
                                           {"role": "user", "content": "And now?"}], extra_headers=on("two"))
    extension = (wrong.parse().model_extra or {})["mirror"]
    assert wrong.headers["x-mirror-history"] == "forked" and extension["branch"].startswith("edit-")
    assert extension["turn"] == 1 and len(logged_turns(url, tokens["acme"], "two", 2)) == 2
    by_user = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "Still me."}], user="two")
    assert (by_user.model_extra or {})["mirror"]["turn"] == 2  # the user field names it when no header does
    turns = logged_turns(url, tokens["acme"], "two", at_least=3)  # main's: the fork left it alone
    assert [t["payload"]["user_message"] for t in turns] == ["I am Ada.", "Who am I?", "Still me."]
    with pytest.raises(openai.ConflictError) as conflict:  # its first turn fixed baseline
        client.chat.completions.create(model="mirror-full", messages=[{"role": "user", "content": "x"}], extra_headers=on("two"))
    assert conflict.value.body["type"] == "conflict_error"


def test_bad_requests_are_openai_errors_that_say_what_was_wrong(stack):
    url, tokens = stack
    client = client_of(url, tokens["acme"])
    hello = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.BadRequestError) as missing:
        client.chat.completions.create(model="mirror", messages=hello)
    assert missing.value.code == "missing_conversation" and "X-Mirror-Conversation" in missing.value.message
    refused = {"n": 2, "logprobs": True, "response_format": {"type": "json_object"}}  # the answer's shape
    strict = {"temperature": 1.3, "max_tokens": 16, "stop": ["\n"], "top_p": 0.5, "seed": 3}  # ignored, unless strict
    for name, value in [*refused.items(), *strict.items()]:
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(model="mirror", messages=hello, extra_headers={**on("bad"), "X-Mirror-Strict": "true"},
                                           **{name: value})
        assert error.value.param == name and error.value.body["type"] == "invalid_request_error", name
    ignored = client.chat.completions.with_raw_response.create(model="mirror", messages=hello, extra_headers=on("bad"),
                                                               **strict)
    assert ignored.headers["x-mirror-ignored"] == "temperature, top_p, seed, stop, max_tokens"
    honoured = client.chat.completions.create(model="mirror", messages=hello, extra_headers=on("bad"), temperature=0.7,
                                              max_tokens=4096)
    assert honoured.choices[0].message.content
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="mirror", messages=[*hello, {"role": "assistant", "content": "hi"}],
                                       extra_headers=on("bad"))
    with pytest.raises(openai.NotFoundError) as unknown:
        client.chat.completions.create(model="gpt-4o", messages=hello, extra_headers=on("bad"))
    assert unknown.value.code == "model_not_found" and "GET /v1/models" in unknown.value.message
    too_big = httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {tokens['acme']}", **on("bad")},
                         json={"model": "mirror", "messages": [{"role": "user", "content": "x" * 40_000}]})
    assert too_big.status_code == 413 and too_big.json()["error"]["code"] == "message_too_large"
    unreadable = httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {tokens['acme']}"},
                            json={"model": "mirror"})
    assert unreadable.status_code == 422 and unreadable.json()["error"]["param"] == "messages"
    native = httpx.post(f"{url}/v1/conversations/bad/turns", headers={"Authorization": f"Bearer {tokens['acme']}"},
                        json={"message": ""})
    assert native.status_code == 400 and "detail" in native.json()  # the native API keeps its own error shape


def test_tenants_and_tokens(stack) -> None:
    url, tokens = stack
    acme, globex = client_of(url, tokens["acme"]), client_of(url, tokens["globex"])
    said = acme.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "my secret plan"}],
                                        extra_headers=on("private")).choices[0].message.content
    with pytest.raises(openai.AuthenticationError) as wrong:
        client_of(url, "not-a-token").chat.completions.create(
            model="mirror", messages=[{"role": "user", "content": "hi"}], extra_headers=on("private"))
    assert wrong.value.status_code == 401 and wrong.value.body["type"] == "authentication_error"  # type: ignore[index]
    with pytest.raises(openai.AuthenticationError):
        client_of(url, "not-a-token").models.list()
    # acme's conversation does not exist for globex: 404 on its reads, and naming it starts globex's own
    assert httpx.get(f"{url}/v1/conversations/private", headers={"Authorization": f"Bearer {tokens['globex']}"}).status_code == 404
    raw = globex.chat.completions.with_raw_response.create(
        model="mirror", messages=[{"role": "user", "content": "my secret plan"}, {"role": "assistant", "content": said},
                                  {"role": "user", "content": "what was it?"}], extra_headers=on("private"))
    # globex's new conversation holds the exchange its client sent (adopted), then the turn
    assert raw.headers["x-mirror-history"] == "adopted" and (raw.parse().model_extra or {})["mirror"]["turn"] == 1
    assert len(logged_turns(url, tokens["acme"], "private")) == 1


def test_models_list_the_minds_and_a_persona_streams_its_formulation(stack) -> None:
    url, tokens = stack
    client = client_of(url, tokens["acme"])
    stored = httpx.post(f"{url}/v1/personas", content=(EXAMPLES / "wren.json").read_bytes(),
                        headers={"Authorization": f"Bearer {tokens['acme']}", "Content-Type": "application/json"})
    assert stored.status_code == 201, stored.text
    name = stored.json()["name"]
    models = [model.id for model in client.models.list()]
    assert models[:5] == ["mirror", "mirror-baseline", "mirror-threads_only", "mirror-controller_only", "mirror-full"]
    assert f"persona:{name}" in models
    assert [m.id for m in client_of(url, tokens["globex"]).models.list()][-1] == "mirror:background"  # acme's store is its own
    stream = client.chat.completions.create(model=f"persona:{name}", messages=[{"role": "user", "content": "Hello!"}],
                                            stream=True, extra_headers=on("wren"))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    (turn,) = logged_turns(url, tokens["acme"], "wren")
    assert text == turn["payload"]["reply"]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="persona:nobody", messages=[{"role": "user", "content": "hi"}],
                                       extra_headers=on("nobody"))


def test_a_client_that_leaves_mid_stream_leaves_the_whole_turn_and_the_next_one_works(stack) -> None:
    url, tokens = stack
    client = client_of(url, tokens["acme"])
    stream = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "A long story, please."}],
                                            stream=True, extra_headers=on("left"))
    received = ""
    for chunk in stream:
        received += chunk.choices[0].delta.content or ""
        if len(received.split()) >= 2:
            break
    stream.close()
    (turn,) = logged_turns(url, tokens["acme"], "left")  # appended whole although nobody read the rest
    assert turn["payload"]["reply"].startswith(received) and len(turn["payload"]["reply"]) > len(received)
    after = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "And then?"}],
                                           extra_headers=on("left"))
    assert (after.model_extra or {})["mirror"]["turn"] == 1


def settled(url: str, tokens: dict[str, str]) -> None:
    """Every conversation of the stack done thinking (a scripted fault goes to the simulator's next
    chat call, whichever conversation makes it: an earlier test's thinker or persona steps would take it)."""
    def idle(headers: dict[str, str], conversation: str) -> bool:
        return not httpx.get(f"{url}/v1/conversations/{conversation}", headers=headers, timeout=30).json()["thinking"]

    for token in tokens.values():
        headers = {"Authorization": f"Bearer {token}"}
        for listed in httpx.get(f"{url}/v1/conversations", headers=headers, timeout=30).json()["conversations"]:
            until(partial(idle, headers, listed["id"]), f"conversation {listed['id']} done thinking", timeout=60)


def test_a_model_that_fails_mid_stream_ends_it_with_an_error_and_logs_nothing(stack, sim_url: str) -> None:
    url, tokens = stack
    client = client_of(url, tokens["acme"])
    for attempt in range(5):  # the scripted fault goes to the next chat call: a thinker still at work may take it
        settled(url, tokens)
        conversation = f"cut-{attempt}"
        httpx.post(f"{sim_url}/_sim/script", json={"faults": ["cut"]}).raise_for_status()
        stream = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "Go on."}],
                                                stream=True, extra_headers=on(conversation))
        received = []
        try:
            for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
        except openai.APIError as cut:
            assert received and "nothing was logged" in cut.message
            break
    else:
        pytest.fail("the cut fault never reached a Talker")
    after = client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "Again?"}],
                                           extra_headers=on(conversation))
    assert (after.model_extra or {})["mirror"]["turn"] == 0  # the cut turn left nothing in the log
    (turn,) = logged_turns(url, tokens["acme"], conversation)
    assert turn["payload"]["user_message"] == "Again?"


def test_the_native_turn_streams_tokens_then_the_turn(stack) -> None:
    url, tokens = stack
    events = []
    with httpx.stream("POST", f"{url}/v1/conversations/native-stream/turns", params={"stream": "true"},
                      headers={"Authorization": f"Bearer {tokens['acme']}"}, json={"message": "hello"}, timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                events.append((name, json.loads(line[6:])))
    *tokens_, (last, turn) = events
    assert last == "turn" and {name for name, _ in tokens_} == {"token"}
    assert "".join(data["text"] for _, data in tokens_) == turn["reply"]
    (logged,) = logged_turns(url, tokens["acme"], "native-stream")
    assert turn["seq"] == logged["seq"] and turn["turn"] == 0


@pytest.fixture
def lonely_broker(ray_cluster: None, tmp_path: Path) -> Iterator[tuple[EmbeddedNats, str, str]]:
    nats = EmbeddedNats(tmp_path / "nats").start()
    try:
        with gateway_stack(nats.url, tmp_path / "stack", shard="oai-down", latency="fixed:5") as (url, tokens):
            yield nats, url, tokens["acme"]
    finally:
        nats.stop()


def test_a_dead_broker_is_a_fast_503_with_retry_after(lonely_broker: tuple[EmbeddedNats, str, str]) -> None:
    nats, url, token = lonely_broker
    client = client_of(url, token)
    assert client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "hi"}],
                                          extra_headers=on("down")).choices[0].message.content
    nats.kill()
    for stream in (False, True):
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as down:
            client.chat.completions.create(model="mirror", messages=[{"role": "user", "content": "still there?"}],
                                           stream=stream, extra_headers=on("down"))
        assert time.monotonic() - started < 2.0
        assert down.value.status_code == 503 and down.value.response.headers["retry-after"].isdigit()
        assert down.value.body["type"] == "service_unavailable" and "NATS" in down.value.message  # type: ignore[index]
