"""`mirror sim-llm`, over real HTTP: pure content, schema-valid JSON, scripted and seeded faults,
Retry-After, overlapping latency, embeddings, admin endpoints and the CLI (its settings alone:
``tests/unit/test_sim_llm.py``)."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirror.sim.server import FAULT_KINDS, SimLLMServer, SimSettings
from tests.support.waits import until

MONOLOGUE_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string", "minLength": 1, "maxLength": 400},
        "memory": {"type": "string", "minLength": 1, "maxLength": 300},
        "goal": {"type": "string", "minLength": 1, "maxLength": 200},
    },
    "required": ["reasoning", "memory", "goal"],
    "additionalProperties": False,
}


SECRET = "sk-sim-VERY-SECRET-0123456789"


def chat_body(text: str = "Hello there", **extra: Any) -> dict[str, Any]:
    return {"model": "mirror-sim", "messages": [{"role": "user", "content": text}], **extra}


def schema_format(schema: Mapping[str, Any], name: str = "monologue_threads") -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def content_of(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


# ----------------------------------------------------------------------------- a small validator


def violations(value: Any, schema: Any, root: Mapping[str, Any] | None = None, path: str = "") -> list[str]:
    """What is wrong with `value` under `schema` (the simulator's subset), written independently."""
    root = schema if root is None else root
    if schema is True or schema == {}:
        return []
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return violations(value, target, root, path)
    if "const" in schema:
        return [] if value == schema["const"] else [f"{path}: {value!r} != const"]
    if "enum" in schema:
        return [] if value in schema["enum"] else [f"{path}: {value!r} not in enum"]
    for combinator in ("anyOf", "oneOf"):
        if combinator in schema:
            matching = [b for b in schema[combinator] if not violations(value, b, root, path)]
            ok = len(matching) == 1 if combinator == "oneOf" else bool(matching)
            return [] if ok else [f"{path}: {len(matching)} {combinator} branches match"]
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds] if kinds else None
    checks = {
        "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "null": lambda v: v is None,
    }
    if kinds is not None and not any(checks[kind](value) for kind in kinds):
        return [f"{path}: {value!r} is not {kinds}"]
    problems: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        problems += [f"{path}: missing {name}" for name in schema.get("required", []) if name not in value]
        for name, item in value.items():
            if name in properties:
                problems += violations(item, properties[name], root, f"{path}/{name}")
            elif schema.get("additionalProperties", True) is False:
                problems.append(f"{path}: extra key {name}")
    elif isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", math.inf):
            problems.append(f"{path}: {len(value)} items")
        for index, item in enumerate(value):
            problems += violations(item, schema.get("items", {}), root, f"{path}/{index}")
    elif isinstance(value, str):
        if not schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", math.inf):
            problems.append(f"{path}: length {len(value)}")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if not schema.get("minimum", -math.inf) <= value <= schema.get("maximum", math.inf):
            problems.append(f"{path}: {value} out of range")
    return problems


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def sim() -> Iterator[SimLLMServer]:
    """Its own simulator, not the session's: the ``timeout`` fault must hang only 0.2 s here."""
    with SimLLMServer(SimSettings(timeout_hang_s=0.2)) as server:
        yield server


@pytest.fixture(scope="module")
def client(sim: SimLLMServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sim.base_url, timeout=10) as http:
        yield http


@pytest.fixture
def fresh(sim: SimLLMServer, client: httpx.Client) -> httpx.Client:
    """The shared server with counters and script cleared, for tests that count."""
    sim.reset()
    return client


# ----------------------------------------------------------------------------- determinism


def test_the_same_request_gets_byte_identical_responses(client: httpx.Client) -> None:
    first = client.post("/chat/completions", json=chat_body("What did I say about the garden?"))
    second = client.post("/chat/completions", json=chat_body("What did I say about the garden?"))
    assert first.status_code == second.status_code == 200
    assert first.content == second.content
    response = first.json()
    assert response["object"] == "chat.completion" and response["model"] == "mirror-sim"
    assert response["choices"][0]["message"]["role"] == "assistant"
    assert response["choices"][0]["finish_reason"] == "stop"
    usage = response["usage"]
    assert usage["prompt_tokens"] == math.ceil(len("What did I say about the garden?") / 4)
    assert usage["completion_tokens"] == math.ceil(len(content_of(first)) / 4)
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_content_depends_on_the_request_only(client: httpx.Client) -> None:
    base = content_of(client.post("/chat/completions", json=chat_body("one")))
    assert content_of(client.post("/chat/completions", json=chat_body("two"))) != base
    assert content_of(client.post("/chat/completions", json=chat_body("one", temperature=0.2))) != base
    reordered = {"messages": [{"content": "one", "role": "user"}], "model": "mirror-sim"}
    assert content_of(client.post("/chat/completions", json=reordered)) == base
    assert content_of(client.post("/chat/completions", json=chat_body("one", user="ignored"))) == base


def test_plain_text_is_first_person_prose_within_max_tokens(client: httpx.Client) -> None:
    unlimited = content_of(client.post("/chat/completions", json=chat_body("tell me")))
    assert unlimited.startswith("I ") and unlimited.count(".") >= 3
    for max_tokens in (1, 3, 8, 20, 60, 400):
        response = client.post("/chat/completions", json=chat_body("tell me", max_tokens=max_tokens)).json()
        text = response["choices"][0]["message"]["content"]
        assert 0 < math.ceil(len(text) / 4) <= max_tokens
        assert response["usage"]["completion_tokens"] <= max_tokens
        expected = {1: "length", 3: "length", 400: "stop"}.get(max_tokens, response["choices"][0]["finish_reason"])
        assert response["choices"][0]["finish_reason"] == expected


def test_json_schema_answers_validate_like_monologue_threads(client: httpx.Client) -> None:
    for index in range(20):
        body = chat_body(f"turn {index}", response_format=schema_format(MONOLOGUE_SCHEMA))
        threads = json.loads(content_of(client.post("/chat/completions", json=body)))
        assert violations(threads, MONOLOGUE_SCHEMA) == []
        assert set(threads) == {"reasoning", "memory", "goal"}
        assert threads["reasoning"].startswith("I notice")
        assert threads["memory"].startswith("I remember")
        assert threads["goal"].startswith("My aim is")


def test_richer_schemas_and_json_object(client: httpx.Client) -> None:
    schema = {
        "type": "object",
        "properties": {
            "mood": {"enum": ["calm", "tense"]},
            "score": {"type": "number", "minimum": 0.5, "maximum": 0.6},
            "count": {"type": "integer", "minimum": -3, "maximum": -1},
            "done": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 2, "maxItems": 4},
            "note": {"anyOf": [{"type": "string", "minLength": 50}, {"type": "null"}]},
            "memory": {"$ref": "#/$defs/memory"},
        },
        "required": ["mood", "score", "count", "done", "tags", "note", "memory"],
        "additionalProperties": False,
        "$defs": {"memory": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"],
                             "additionalProperties": False}},
    }
    value = json.loads(content_of(client.post("/chat/completions", json=chat_body(response_format=schema_format(schema)))))
    assert violations(value, schema) == []
    anything = json.loads(content_of(client.post("/chat/completions", json=chat_body(response_format={"type": "json_object"}))))
    assert isinstance(anything, dict) and anything
    # llama-cpp-python's form: a json_object format carrying a schema is held to the schema
    llama_cpp_format = {"type": "json_object", "schema": schema}
    value = json.loads(content_of(client.post("/chat/completions", json=chat_body(response_format=llama_cpp_format))))
    assert violations(value, schema) == []


def test_an_unsatisfiable_schema_is_a_400(client: httpx.Client) -> None:
    schema = {"type": "string", "minLength": 10, "maxLength": 5}
    response = client.post("/chat/completions", json=chat_body(response_format=schema_format(schema)))
    assert response.status_code == 400
    assert "maxLength 5 < minLength 10" in response.json()["error"]["message"]


# A small generator of schemas from the supported subset, for the property below.
_strings = st.builds(
    lambda low, extra, has_max: {"type": "string", "minLength": low, **({"maxLength": low + extra} if has_max else {})},
    st.integers(0, 60), st.integers(0, 300), st.booleans(),
)


_integers = st.builds(lambda low, span: {"type": "integer", "minimum": low, "maximum": low + span},
                      st.integers(-1000, 1000), st.integers(0, 50))


_numbers = st.builds(lambda low, span: {"type": "number", "minimum": low, "maximum": low + span},
                     st.floats(-100, 100, allow_nan=False).map(lambda x: round(x, 3)), st.floats(0, 10).map(lambda x: round(x, 3)))


_leaves = st.one_of(
    _strings, _integers, _numbers, st.just({"type": "boolean"}), st.just({"type": "null"}),
    st.lists(st.one_of(st.text(max_size=8), st.integers()), min_size=1, max_size=4, unique=True).map(lambda e: {"enum": e}),
)


def _containers(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    names = st.sampled_from(["reasoning", "memory", "goal", "mood", "items", "score", "x", "note"])
    objects = st.dictionaries(names, children, max_size=4).flatmap(
        lambda properties: st.builds(
            lambda required, closed: {"type": "object", "properties": properties, "required": required,
                                      **({"additionalProperties": False} if closed else {})},
            st.lists(st.sampled_from(sorted(properties)), unique=True) if properties else st.just([]),
            st.booleans(),
        )
    )
    arrays = st.builds(
        lambda items, low, extra: {"type": "array", "items": items, "minItems": low, "maxItems": low + extra},
        children, st.integers(0, 3), st.integers(0, 3),
    )
    return objects | arrays


schemas = st.recursive(_leaves, _containers, max_leaves=8)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, prompt=st.text(max_size=20))
def test_generated_instances_validate_against_random_schemas(client: httpx.Client, schema: dict[str, Any], prompt: str) -> None:
    body = chat_body(prompt, response_format=schema_format(schema, "random"))
    first = client.post("/chat/completions", json=body)
    value = json.loads(content_of(first))
    assert violations(value, schema) == [], (schema, value)
    assert client.post("/chat/completions", json=body).content == first.content


def test_instances_also_satisfy_the_reference_validator(client: httpx.Client) -> None:
    for index in range(10):
        body = chat_body(f"check {index}", response_format=schema_format(MONOLOGUE_SCHEMA))
        jsonschema.validate(json.loads(content_of(client.post("/chat/completions", json=body))), MONOLOGUE_SCHEMA)


# ----------------------------------------------------------------------------- faults


def test_each_fault_kind_by_script(sim: SimLLMServer, fresh: httpx.Client) -> None:
    assert sim.script(*FAULT_KINDS, "ok") == [*FAULT_KINDS, "ok"]
    body = chat_body("faults please", response_format=schema_format(MONOLOGUE_SCHEMA))
    rate_limited = fresh.post("/chat/completions", json=body)
    assert rate_limited.status_code == 429 and rate_limited.json()["error"]["type"] == "rate_limit_error"
    assert "retry-after" not in rate_limited.headers  # only when settings.retry_after_s is set
    failed = fresh.post("/chat/completions", json=body)
    assert failed.status_code == 500 and failed.json()["error"]["type"] == "server_error"
    started = time.monotonic()
    timed_out = fresh.post("/chat/completions", json=body)
    assert timed_out.status_code == 504 and time.monotonic() - started >= 0.2
    malformed = content_of(fresh.post("/chat/completions", json=body))
    with pytest.raises(json.JSONDecodeError):
        json.loads(malformed)
    assert content_of(fresh.post("/chat/completions", json=body)) == ""
    garbage = fresh.post("/chat/completions", json=body)
    assert garbage.status_code == 200 and garbage.headers["content-type"].startswith("text/html")
    with pytest.raises(json.JSONDecodeError):
        json.loads(garbage.text)
    no_choices = fresh.post("/chat/completions", json=body)
    assert no_choices.status_code == 200 and no_choices.json()["choices"] == [] and "usage" in no_choices.json()
    no_usage = fresh.post("/chat/completions", json=body)
    assert "usage" not in no_usage.json()
    echoed = fresh.post("/chat/completions", json=body)
    assert echoed.status_code == 400 and echoed.json()["error"]["type"] == "invalid_request_error"
    assert echoed.json()["error"]["message"].endswith("faults please")
    cut = content_of(fresh.post("/chat/completions", json=body))  # not streamed: as malformed
    healthy_response = fresh.post("/chat/completions", json=body)
    healthy = content_of(healthy_response)
    assert violations(json.loads(healthy), MONOLOGUE_SCHEMA) == []
    assert malformed != healthy and healthy.startswith(malformed) and cut == malformed
    assert no_usage.json() == {key: value for key, value in healthy_response.json().items() if key != "usage"}
    stats = sim.stats()
    assert stats["faults"] == dict.fromkeys(FAULT_KINDS, 1) and stats["script"] == []
    assert stats["chat_calls"] == len(FAULT_KINDS) + 1 and stats["bad_requests"] == 0  # echo_error is a call


def test_echo_error_repeats_the_last_user_message_and_no_header(sim: SimLLMServer, fresh: httpx.Client) -> None:
    sim.script("echo_error", "echo_error")
    messages = [
        {"role": "system", "content": "system text"},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "an answer"},
        {"role": "user", "content": [{"type": "text", "text": "second "}, {"type": "text", "text": "question"}]},
    ]
    reply = fresh.post("/chat/completions", json={"model": "m", "messages": messages},
                       headers={"Authorization": f"Bearer {SECRET}"})
    message = reply.json()["error"]["message"]
    assert reply.status_code == 400 and message == "request rejected (simulated): second question"
    assert SECRET not in reply.text and "Bearer" not in reply.text
    without_user = fresh.post("/chat/completions", json={"model": "m", "messages": messages[:1]})
    assert without_user.json()["error"]["message"] == "request rejected (simulated): "
    assert sim.stats()["faults"]["echo_error"] == 2


def test_retry_after_is_sent_with_429s_only_when_configured() -> None:
    for seconds, header in ((0.25, "0.25"), (100.0, "100"), (0.0, "0")):
        with SimLLMServer(SimSettings(script=("429", "500", "ok"), retry_after_s=seconds)) as server:
            with httpx.Client(base_url=server.base_url, timeout=5) as http:
                replies = [http.post("/chat/completions", json=chat_body()) for _ in range(3)]
        assert [reply.status_code for reply in replies] == [429, 500, 200]
        assert replies[0].headers["retry-after"] == header
        assert "retry-after" not in replies[1].headers and "retry-after" not in replies[2].headers


def test_response_formats_received_are_counted(sim: SimLLMServer, fresh: httpx.Client) -> None:
    with_schema = {"type": "json_object", "schema": MONOLOGUE_SCHEMA, "extra": ["kept", "as", "sent"]}
    for response_format in (None, {"type": "text"}, {"type": "json_object"}, schema_format(MONOLOGUE_SCHEMA),
                            with_schema):
        extra: dict[str, Any] = {} if response_format is None else {"response_format": response_format}
        assert fresh.post("/chat/completions", json=chat_body(**extra)).status_code == 200
    assert sim.stats()["last_response_format"] == with_schema
    sim.script("500")
    assert fresh.post("/chat/completions", json=chat_body(response_format={"type": "json_object"})).status_code == 500
    rejected = (schema_format({"enum": []}), {"type": "xml"}, {"type": "json_object", "schema": "not a schema"})
    for response_format in rejected:  # bad requests are not calls, so they are not counted
        assert fresh.post("/chat/completions", json=chat_body(response_format=response_format)).status_code == 400
    stats = sim.stats()
    assert stats["response_formats"] == {"none": 1, "text": 1, "json_object": 3, "json_schema": 1}
    assert sum(stats["response_formats"].values()) == stats["chat_calls"] == 6
    assert stats["last_response_format"] == {"type": "json_object"}
    fresh.post("/chat/completions", json=chat_body())
    assert sim.stats()["last_response_format"] is None
    stats = sim.reset()
    assert stats["response_formats"] == {} and stats["last_response_format"] is None


def test_malformed_plain_text_is_not_json_either(sim: SimLLMServer, fresh: httpx.Client) -> None:
    sim.script("malformed")
    with pytest.raises(json.JSONDecodeError):
        json.loads(content_of(fresh.post("/chat/completions", json=chat_body("prose"))))


def test_a_timeout_is_released_when_the_client_gives_up() -> None:
    with SimLLMServer(SimSettings(script=("timeout",), timeout_hang_s=30)) as server:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(f"{server.base_url}/chat/completions", json=chat_body(), timeout=0.3)
        until(lambda: server.stats()["in_flight"] == 0, "the held call was released")
        started = time.monotonic()
    assert time.monotonic() - started < 2


def _run_sequence(settings: SimSettings, calls: int) -> list[tuple[int, str | None]]:
    with SimLLMServer(settings) as server, httpx.Client(base_url=server.base_url, timeout=5) as http:
        outcomes = []
        for index in range(calls):
            response = http.post("/chat/completions", json=chat_body(f"call {index}"))
            text = response.json()["choices"][0]["message"]["content"] if response.status_code == 200 else None
            outcomes.append((response.status_code, text))
        return outcomes


def test_fault_rates_with_a_seed_are_reproducible_across_fresh_servers() -> None:
    rates = (("429", 0.2), ("500", 0.2), ("malformed", 0.1), ("empty", 0.1))
    first = _run_sequence(SimSettings(fault_rates=rates, seed=7), 40)
    second = _run_sequence(SimSettings(fault_rates=rates, seed=7), 40)
    other_seed = _run_sequence(SimSettings(fault_rates=rates, seed=8), 40)
    assert first == second
    assert first != other_seed
    statuses = [status for status, _ in first]
    assert {200, 429, 500} <= set(statuses)
    assert 8 <= statuses.count(200) <= 32
    # healthy answers are the same pure content whatever the fault settings
    clean = dict(enumerate(_run_sequence(SimSettings(), 40)))
    for index, (status, text) in enumerate(first):
        if status == 200 and text and not text.endswith("\ufffd"):
            assert text == clean[index][1]


# ----------------------------------------------------------------------------- latency


async def test_latency_applies_and_concurrent_requests_overlap() -> None:
    with SimLLMServer(SimSettings(latency="fixed:100")) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as http:
            started = time.monotonic()
            assert (await http.post("/chat/completions", json=chat_body())).status_code == 200
            assert time.monotonic() - started >= 0.1
            started = time.monotonic()
            responses = await asyncio.gather(*(http.post("/chat/completions", json=chat_body(f"{i}")) for i in range(10)))
            elapsed = time.monotonic() - started
        assert all(response.status_code == 200 for response in responses)
        stats = server.stats()
        # Overlapping: several were held at once, and together they took less than one after another would (1 s).
        assert stats["max_in_flight"] >= 5 and stats["in_flight"] == 0 and stats["chat_calls"] == 11
        assert 0.1 <= elapsed < 1.0


async def test_chat_calls_in_flight_are_counted_apart_from_embedding_calls() -> None:
    """``max_chat_in_flight`` (what ``mirror bench recompute`` bounds by C) ignores embedding calls."""
    with SimLLMServer(SimSettings(latency="fixed:50")) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as http:
            embedding = [http.post("/embeddings", json={"input": [f"message {i}"]}) for i in range(4)]
            responses = await asyncio.gather(http.post("/chat/completions", json=chat_body()), *embedding)
        assert all(response.status_code == 200 for response in responses)
        stats = server.stats()
        assert stats["max_chat_in_flight"] == 1 and stats["chat_calls"] == 1 and stats["embedding_calls"] == 4
        assert stats["max_in_flight"] >= 1 and stats["in_flight"] == 0
        assert server.reset()["max_chat_in_flight"] == 0  # reset starts the count again


async def test_embedding_calls_can_take_their_own_latency() -> None:
    """A benchmark charges memory an embedding's wait, not a chat call's: the two are set apart."""
    with SimLLMServer(SimSettings(latency="fixed:300", embedding_latency="fixed:0")) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=5) as http:
            started = time.monotonic()
            assert (await http.post("/embeddings", json={"input": ["a short message"]})).status_code == 200
            embedded = time.monotonic() - started
            started = time.monotonic()
            assert (await http.post("/chat/completions", json=chat_body())).status_code == 200
            chatted = time.monotonic() - started
    assert embedded < 0.2 <= 0.3 <= chatted
    with pytest.raises(ValueError, match="invalid latency"):
        SimSettings(embedding_latency="soon")


# ----------------------------------------------------------------------------- embeddings


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_embeddings_are_deterministic_unit_vectors(client: httpx.Client) -> None:
    texts = ["I remember the garden at night", "the garden in the morning", "quarterly tax invoice"]
    response = client.post("/embeddings", json={"model": "mirror-sim", "input": texts})
    assert response.status_code == 200
    data = response.json()["data"]
    assert [item["index"] for item in data] == [0, 1, 2]
    vectors = [item["embedding"] for item in data]
    assert all(len(vector) == 64 for vector in vectors)
    assert all(abs(math.sqrt(_cosine(vector, vector)) - 1) < 1e-9 for vector in vectors)
    again = client.post("/embeddings", json={"input": texts[0]}).json()["data"][0]["embedding"]
    assert again == vectors[0]
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2])
    short = client.post("/embeddings", json={"input": "x", "dimensions": 16}).json()["data"][0]["embedding"]
    assert len(short) == 16
    encoded = client.post("/embeddings", json={"input": texts[0], "encoding_format": "base64"}).json()
    decoded = struct.unpack("<64f", base64.b64decode(encoded["data"][0]["embedding"]))
    assert max(abs(a - b) for a, b in zip(decoded, vectors[0], strict=True)) < 1e-6
    assert client.post("/embeddings", json={"input": []}).status_code == 400


# ----------------------------------------------------------------------------- HTTP surface


def test_bad_requests_are_openai_style_400s_that_do_not_count(sim: SimLLMServer, fresh: httpx.Client) -> None:
    for body in (b"{not json", b"[1, 2]", json.dumps({"model": "m"}).encode(),
                 json.dumps(chat_body(max_tokens=0)).encode(), json.dumps(chat_body(stream="yes")).encode(),
                 json.dumps(chat_body(response_format={"type": "xml"})).encode(),
                 json.dumps(chat_body(response_format={"type": "json_object", "schema": []})).encode()):
        response = fresh.post("/chat/completions", content=body, headers={"content-type": "application/json"})
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and error["message"]
    assert "messages" in fresh.post("/chat/completions", json={"model": "m"}).json()["error"]["message"]
    stats = sim.stats()
    assert stats["calls"] == 0 and stats["bad_requests"] == 8 and stats["response_formats"] == {}


def test_authorization_is_counted_never_echoed(sim: SimLLMServer, fresh: httpx.Client) -> None:
    headers = {"Authorization": f"Bearer {SECRET}"}
    replies = [
        fresh.post("/chat/completions", json=chat_body(SECRET[:3]), headers=headers),
        fresh.post("/chat/completions", content=b"{", headers=headers),
        fresh.post("/embeddings", json={"input": "hi"}, headers=headers),
        fresh.post("/chat/completions", json=chat_body()),
        httpx.get(f"{sim.url}/_sim/stats", headers=headers),
    ]
    assert all(SECRET not in reply.text and "Bearer" not in reply.text for reply in replies)
    assert all(SECRET not in value for reply in replies for value in reply.headers.values())
    stats = sim.stats()
    assert stats["authorized_calls"] == 2 and stats["calls"] == 3


def test_models_health_and_admin_endpoints(sim: SimLLMServer, fresh: httpx.Client) -> None:
    assert fresh.get("/models").json()["data"][0]["id"] == "mirror-sim"
    assert httpx.get(f"{sim.url}/healthz").json() == {"status": "ok"}
    assert httpx.post(f"{sim.url}/_sim/script", json={"faults": ["boom"]}).status_code == 400
    sim.script("429", "429")
    assert fresh.post("/chat/completions", json=chat_body()).status_code == 429
    stats = sim.reset()
    assert stats["script"] == [] and stats["calls"] == 0 and stats["faults"]["429"] == 0
    assert fresh.post("/chat/completions", json=chat_body()).status_code == 200
    assert sim.stats() == {
        "calls": 1, "chat_calls": 1, "embedding_calls": 0, "faults": dict.fromkeys(FAULT_KINDS, 0),
        "in_flight": 0, "max_in_flight": 1, "max_chat_in_flight": 1, "authorized_calls": 0, "bad_requests": 0,
        "script": [], "response_formats": {"none": 1}, "last_response_format": None,
    }


# ----------------------------------------------------------------------------- CLI


def mirror(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mirror", *args], capture_output=True, text=True, timeout=60)


def test_cli_help_and_bad_options() -> None:
    assert "--latency" in mirror("sim-llm", "--help").stdout
    result = mirror("sim-llm", "--latency", "nonsense")
    assert result.returncode == 2
    assert "invalid latency 'nonsense'" in result.stderr and "Traceback" not in result.stderr
    assert mirror("sim-llm", "--fault", "500=7").returncode == 2


def test_cli_serves_until_interrupted() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "mirror", "sim-llm", "--port", "0", "--script", "500", "--log-level", "WARNING"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        base_url = line.split()[3]
        assert base_url.startswith("http://127.0.0.1:") and base_url.endswith("/v1"), line
        deadline = time.monotonic() + 10
        while True:
            try:
                response = httpx.post(f"{base_url}/chat/completions", json=chat_body())
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert response.status_code == 500
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
