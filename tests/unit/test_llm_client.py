"""The LLM port's pure parts, in process: request fingerprints and validation, strict JSON reading,
redaction and ``Retry-After`` parsing. The OpenAI-compatible adapter against the simulator over
HTTP is in ``tests/system/test_llm_client.py``.
"""

from __future__ import annotations

import hashlib
import json
import string
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirror.cognition import (
    ChatMessage,
    JsonSchema,
    StructuredOutputError,
    parse_json_object,
)
from mirror.cognition.errors import redact
from mirror.cognition.llm import canonical_json
from mirror.cognition.openai_client import OpenAIChatClient, _chat_encoded, parse_retry_after
from tests.support.requests import API_KEY, THREADS_SCHEMA, request

SIMPLE_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "count": {"type": "integer"},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "kind": {"enum": ["belief", "edge", "insight"]},
        "detail": {
            "type": "object",
            "properties": {"why": {"type": "string"}},
            "required": ["why"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "count", "ok"],
    "additionalProperties": False,
}




# --- fingerprints ----------------------------------------------------------------------------


def test_fingerprint_is_stable_and_sha256_hex() -> None:
    first, second = request(), request()
    assert first.fingerprint() == second.fingerprint()
    assert len(first.fingerprint()) == 64 and set(first.fingerprint()) <= set("0123456789abcdef")
    assert request(temperature=1).fingerprint() == request(temperature=1.0).fingerprint()


@pytest.mark.parametrize(
    "change",
    [
        {"messages": (ChatMessage("user", "What do I notice?"),)},
        {"messages": (ChatMessage("system", "You are Mirror's inner voice."), ChatMessage("assistant", "What do I notice?"))},
        {"model": "sim-2"},
        {"temperature": 0.2},
        {"max_tokens": 301},
        {"json_schema": None},
        {"json_schema": JsonSchema("other", THREADS_SCHEMA)},
        {"json_schema": JsonSchema("threads", {**THREADS_SCHEMA, "required": ["reasoning"]})},
        {"seed": None},
        {"seed": 8},
    ],
)
def test_fingerprint_changes_with_everything_that_reaches_the_model(change: dict[str, Any]) -> None:
    assert request(**change).fingerprint() != request().fingerprint()


def test_fingerprint_ignores_prompt_set_and_later_schema_mutation() -> None:
    assert request(prompt_set="other").fingerprint() == request().fingerprint()
    schema = json.loads(json.dumps(THREADS_SCHEMA))
    mutable = request(json_schema=JsonSchema("threads", schema))
    before = mutable.fingerprint()
    schema["required"].append("extra")
    assert mutable.fingerprint() == before == request().fingerprint()


_TEXT = st.text(st.characters(codec="utf-8"), max_size=40)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=st.lists(st.tuples(st.sampled_from(["system", "user", "assistant"]), _TEXT), min_size=1, max_size=4),
    model=_TEXT.filter(bool), temperature=st.floats(0, 2), max_tokens=st.integers(1, 10**6),
    seed=st.none() | st.integers(-(2**63), 2**63 - 1), schema=st.sampled_from([None, SIMPLE_SCHEMA, THREADS_SCHEMA]),
)
def test_fingerprint_is_the_sha256_of_the_sorted_canonical_identity(
    messages: list[tuple[str, str]], model: str, temperature: float, max_tokens: int, seed: int | None,
    schema: dict[str, Any] | None,
) -> None:
    """The fingerprint is built without sorting (the host's hot path): it must stay exactly the
    sha256 of ``canonical_json(identity())``, which every recorded provenance holds."""
    chat = request(messages=tuple(ChatMessage(role, content) for role, content in messages),  # type: ignore[arg-type]  # roles drawn from ROLES
                   model=model, temperature=temperature, max_tokens=max_tokens, seed=seed,
                   json_schema=None if schema is None else JsonSchema("s", schema))
    assert chat.fingerprint() == hashlib.sha256(canonical_json(chat.identity()).encode()).hexdigest()


@settings(max_examples=100)
@given(messages=st.lists(st.tuples(st.sampled_from(["system", "user", "assistant"]), _TEXT), min_size=1, max_size=4),
       mode=st.sampled_from(["json_schema", "json_object_schema", "json_object", "none"]), stream=st.booleans())
def test_a_chat_body_is_encoded_as_json_dumps_writes_it(messages: list[tuple[str, str]], mode: str, stream: bool) -> None:
    """The model client writes a chat body from remembered message texts: the bytes must be the
    ones ``json.dumps`` writes for the body's dict (what was sent before)."""
    chat = request(messages=tuple(ChatMessage(role, content) for role, content in messages),  # type: ignore[arg-type]  # roles drawn from ROLES
                   json_schema=JsonSchema("s", SIMPLE_SCHEMA))
    body = OpenAIChatClient._chat_body(chat, mode)  # type: ignore[arg-type]  # modes drawn from StructuredOutputMode
    if stream:
        body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    plain = json.loads(json.dumps(body, default=dict))  # the schema's read-only view as a dict
    assert _chat_encoded(chat, body) == json.dumps(plain, ensure_ascii=False, separators=(",", ":")).encode()


def test_request_validation() -> None:
    with pytest.raises(ValueError):
        request(messages=())
    with pytest.raises(ValueError):
        ChatMessage("tool", "x")  # type: ignore[arg-type]  # a role the type refuses: the constructor must refuse it too
    assert isinstance(request(messages=[ChatMessage("user", "x")]).messages, tuple)


# --- strict JSON reading ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        '{"name": "a", "count": 1, "ok": true}',
        '```json\n{"name": "a", "count": 1, "ok": true}\n```',
        'Sure! Here it is:\n```\n{"name": "a", "count": 1, "ok": true}\n```\nHope that helps {:',
        'Answer: {"name": "a", "count": 1, "ok": true} and that is all.',
    ],
)
def test_parse_accepts_wrapping(content: str) -> None:
    assert parse_json_object(content, SIMPLE_SCHEMA) == {"name": "a", "count": 1, "ok": True}


def test_parse_keeps_braces_inside_strings() -> None:
    content = 'x {"name": "a } \\" {", "count": 1, "ok": false}'
    assert parse_json_object(content, SIMPLE_SCHEMA)["name"] == 'a } " {'


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("", "no complete JSON object"),
        ("I cannot answer that.", "no complete JSON object"),
        ('{"name": "a", "count": 1, "ok": true', "no complete JSON object"),  # truncated
        ('{"name": "a", "count": 1, "ok": true, "detail": {"why": "x"}, ', "no complete JSON object"),
        ('{"name": "a", "count": NaN, "ok": true}', "not valid JSON"),
        ("{'name': 'a'}", "not valid JSON"),
        ('[{"name": "a", "count": 1, "ok": true}]', "array"),
        ('{"name": "a", "ok": true}', "missing required key 'count'"),
        ('{"name": "a", "count": 1, "ok": true, "mood": "x"}', "unexpected key 'mood'"),
        ('{"name": "a", "count": 1.0, "ok": true}', "expected integer"),
        ('{"name": "a", "count": true, "ok": true}', "expected integer"),
        ('{"name": "a", "count": 1, "ok": "yes"}', "expected boolean"),
        ('{"name": 3, "count": 1, "ok": true}', "expected string"),
        ('{"name": "a", "count": 1, "ok": true, "score": 1e999}', "expected number"),
        ('{"name": "a", "count": 1, "ok": true, "tags": ["x", 2]}', "expected string"),
        ('{"name": "a", "count": 1, "ok": true, "kind": "mood"}', "is not one of"),
        ('{"name": "a", "count": 1, "ok": true, "detail": {"why": "x", "how": 1}}', "unexpected key 'how'"),
    ],
)
def test_parse_refuses_rather_than_guesses(content: str, fragment: str) -> None:
    with pytest.raises(StructuredOutputError) as caught:
        parse_json_object(content, SIMPLE_SCHEMA, schema_name="simple")
    assert fragment in str(caught.value)
    assert caught.value.content == content


def test_structured_error_truncates_raw_content() -> None:
    with pytest.raises(StructuredOutputError) as caught:
        parse_json_object("x" * 10_000, SIMPLE_SCHEMA)
    assert len(caught.value.content) == 2000
    assert len(str(caught.value)) < 1000


def test_retry_after_parsing() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 0.5 ") == 0.5
    assert parse_retry_after("-3") == 0.0
    assert parse_retry_after("garbage") is None
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    now = datetime(2015, 10, 21, 7, 27, 30, tzinfo=UTC)
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=now) == 30.0


def test_redact_replaces_every_occurrence_and_only_a_real_secret() -> None:
    text = f"Incorrect API key provided: {API_KEY}. You sent {API_KEY}."
    assert redact(text, API_KEY) == "Incorrect API key provided: ***. You sent ***."
    assert redact(text, None) == redact(text, "") == text


simple_values = st.fixed_dictionaries(
    {"name": st.text(), "count": st.integers(), "ok": st.booleans()},
    optional={
        "score": st.floats(allow_nan=False, allow_infinity=False),
        "tags": st.lists(st.text(), max_size=4),
        "kind": st.sampled_from(["belief", "edge", "insight"]),
        "detail": st.fixed_dictionaries({"why": st.text()}),
    },
)


# Prose before the object must not open a brace or an array: that would be a different answer.
leading_prose = st.text(alphabet=st.characters(exclude_characters="{}["), max_size=40)


@st.composite
def wrapped(draw: st.DrawFn, value: dict[str, Any]) -> str:
    encoded = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2])))
    style = draw(st.sampled_from(["bare", "fence", "json-fence", "prose", "prose-fence"]))
    if style == "bare":
        return encoded
    if style == "fence":
        return f"```\n{encoded}\n```"
    if style == "json-fence":
        return f"```json\n{encoded}\n```\n"
    if style == "prose":
        return f"{draw(leading_prose)} {encoded} {draw(st.text(max_size=40))}"
    return f"{draw(leading_prose)}\n```json\n{encoded}\n```\n{draw(st.text(max_size=40))}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), value=simple_values)
def test_parse_round_trips_wrapped_objects(data: st.DataObject, value: dict[str, Any]) -> None:
    content = data.draw(wrapped(value))
    assert parse_json_object(content, SIMPLE_SCHEMA) == value


json_ish = st.text(alphabet='{}[]":,.-+0123456789eEtrufalsn \\\n`' + string.ascii_letters, max_size=80)


@settings(max_examples=300, deadline=None)
@given(content=st.one_of(st.text(max_size=200), json_ish))
def test_parse_raises_only_structured_output_error(content: str) -> None:
    try:
        value = parse_json_object(content, SIMPLE_SCHEMA)
    except StructuredOutputError as error:
        assert error.content == content[:2000]
    else:
        assert isinstance(value, dict) and {"name", "count", "ok"} <= value.keys()
