"""What `mirror sim-llm` says: pure functions from a request to its content.

Every function here is deterministic: its randomness comes from a `random.Random` seeded by
the request digest, whose integer seeding and `choice`/`randint`/`random` draws are stable
across Python versions. So the same request yields byte-identical content on every run and
every machine, which is what lets tests and benchmarks compare runs.

Content reads like Mirror's inner voice (short first-person sentences: "I notice…",
"I remember…", "My aim is…") so logs of simulated runs stay legible.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from mirror.projections.monologue import estimate_tokens  # the simulator counts usage as Mirror estimates it
from mirror.sim import curate as sim_curate
from mirror.sim import memory as sim_memory
from mirror.sim import persona as sim_persona
from mirror.sim import reflection as sim_reflection
from mirror.sim.errors import UnsatisfiableSchema

# The request fields that decide the content; anything else (user, stream_options, ...) does not.
CONTENT_FIELDS = ("model", "messages", "temperature", "max_tokens", "max_completion_tokens", "response_format", "seed")
MAX_SCHEMA_DEPTH = 32

_SUBJECTS = ("the user", "my last reply", "the conversation", "this question", "the silence",
             "our plan", "the story", "their tone", "the pause", "my first guess")
_TOPICS = ("the garden", "the old house", "a missed train", "the river", "their sister", "the winter",
           "a promise", "the new job", "the letter", "music", "the night shift", "a small boat",
           "the move", "an apology", "the lake", "a birthday")
_WHEN = ("yesterday", "earlier today", "at the start", "last week", "a while ago", "in our first talk")
_NOTICE = ("keeps returning to {topic}", "sounds more hopeful than before", "changed direction quickly",
           "leaves {topic} unresolved", "hints at {topic}", "asks about {topic} again", "grows quieter")
_AIM_VERBS = ("understand", "ask gently about", "return to", "follow up on", "keep track of", "learn more about")
_MANNER = ("without rushing", "with care", "step by step", "before the day ends", "in plain words")
_FEEL = ("calm", "curious", "uncertain", "hopeful", "careful", "glad")

_VOICES: dict[str, tuple[str, ...]] = {
    "notice": ("I notice {subject} {notice}.", "I notice that {subject} {notice}."),
    "remember": ("I remember {subject} mentioning {topic} {when}.", "I remember that {topic} mattered {when}.",
                 "I remember how {subject} sounded {when}."),
    "aim": ("My aim is to {aim_verb} {topic} {manner}.", "My aim is to {aim_verb} {subject} {manner}."),
    "reflect": ("I think {subject} {notice}.", "I wonder whether {topic} still matters.",
                "I feel {feel} about {topic}.", "I suspect {subject} {notice}."),
}
_HINTS = (
    (("memor", "remember", "recall", "past"), "remember"),
    (("goal", "aim", "intent", "plan", "next", "want"), "aim"),
    (("reason", "notice", "thought", "observ", "think", "analysis"), "notice"),
)
_WORD = re.compile(r"\w+")


def request_digest(body: Mapping[str, Any]) -> bytes:
    """sha256 of the content-deciding fields as canonical JSON (sorted keys, no spaces)."""
    chosen = {field: body.get(field) for field in CONTENT_FIELDS}
    canonical = json.dumps(chosen, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode()).digest()


def rng_for(digest: bytes) -> random.Random:
    return random.Random(int.from_bytes(digest, "big"))


def voice_for(name: str) -> str:
    """Which voice a property's sentences use: 'memory' remembers, 'goal' aims, 'reasoning' notices."""
    lowered = name.lower()
    for needles, voice in _HINTS:
        if any(needle in lowered for needle in needles):
            return voice
    return ""


def sentence(rng: random.Random, voice: str = "") -> str:
    """One short first-person sentence; a random voice unless one is asked for."""
    template = rng.choice(_VOICES[voice or rng.choice(tuple(_VOICES))])
    slots = {
        "subject": rng.choice(_SUBJECTS), "topic": rng.choice(_TOPICS), "when": rng.choice(_WHEN),
        "aim_verb": rng.choice(_AIM_VERBS), "manner": rng.choice(_MANNER), "feel": rng.choice(_FEEL),
    }
    slots["notice"] = rng.choice(_NOTICE).format(topic=rng.choice(_TOPICS))
    return template.format(**slots)


def prose(rng: random.Random, max_tokens: int | None) -> tuple[str, str]:
    """A narrative of 3-6 sentences cut to fit `max_tokens`; returns (text, finish_reason)."""
    wanted = rng.randint(3, 6)
    budget = None if max_tokens is None else max_tokens * 4
    text = ""
    for index in range(wanted):
        voice = "notice" if index == 0 else ""
        candidate = (text + " " + sentence(rng, voice)).strip()
        if budget is not None and len(candidate) > budget:
            if not text:  # not even one sentence fits: cut it mid-way, as a model would
                return _clip(candidate, 0, budget), "length"
            return text, "length"
        text = candidate
    return text, "stop"


def json_object(rng: random.Random) -> dict[str, Any]:
    """The answer to a bare `json_object` request: one monologue thread."""
    return {
        "reasoning": sentence(rng, "notice"),
        "memory": sentence(rng, "remember"),
        "goal": sentence(rng, "aim"),
        "confidence": round(rng.uniform(0.3, 0.95), 2),
    }


def instance(schema: Mapping[str, Any], rng: random.Random) -> Any:
    """A JSON value that validates against `schema` (the subset named in sim_llm's docstring)."""
    return _Generator(schema, rng).value(schema, "", "", 0)


def chat_completion(body: Mapping[str, Any], digest: bytes, model: str) -> dict[str, Any]:
    """The whole `chat.completion` object for a validated request: a pure function of both.

    JSON answers are never cut to `max_tokens`: a truncated instance would not validate, and
    truncation is what the `malformed` fault is for. A `json_object` format that carries a
    `schema` (llama-cpp-python's form, where the schema becomes a grammar) is answered like
    `json_schema`.
    """
    rng = rng_for(digest)
    response_format = body.get("response_format") or {"type": "text"}
    finish_reason = "stop"
    memory_kind = sim_memory.schema_kind(response_format)
    remembered = None if memory_kind is None else sim_memory.answer(memory_kind, last_user_text(body["messages"]))
    reflection_kind = sim_reflection.schema_kind(response_format) if remembered is None else None
    if reflection_kind is not None:  # Mirror's reflection: content read from the request (see sim.reflection)
        remembered = sim_reflection.answer(reflection_kind, last_user_text(body["messages"]),
                                           system_text(body["messages"]))
    persona_kind = sim_persona.schema_kind(response_format) if remembered is None else None
    if persona_kind is not None:  # the persona mind's structured steps and the order judge (see sim.persona)
        remembered = sim_persona.answer(persona_kind, response_format, last_user_text(body["messages"]),
                                        system_text(body["messages"]))
    if remembered is None:  # the CuRaTe eval's judge: a rating read from the request (see sim.curate)
        remembered = sim_curate.answer(response_format, last_user_text(body["messages"]))
    if remembered is not None:  # Mirror's memory stage: content read from the request (see sim.memory)
        content = json.dumps(remembered, ensure_ascii=False)
    elif response_format["type"] == "json_schema":
        content = json.dumps(instance(response_format["json_schema"]["schema"], rng), ensure_ascii=False)
    elif response_format["type"] == "json_object" and "schema" in response_format:
        content = json.dumps(instance(response_format["schema"], rng), ensure_ascii=False)
    elif response_format["type"] == "json_object":
        content = json.dumps(json_object(rng), ensure_ascii=False)
    elif (step := sim_persona.step_of(system_text(body["messages"]))) is not None:  # a persona prose step
        content = sim_persona.prose(step, system_text(body["messages"]), last_user_text(body["messages"]), rng)
    else:
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        content, finish_reason = prose(rng, max_tokens)
    response = {
        "id": "chatcmpl-sim-" + digest.hex()[:24],
        "object": "chat.completion",
        "created": 1_700_000_000 + int.from_bytes(digest[:3], "big"),
        "model": model,
        "system_fingerprint": "mirror-sim",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": None,
                     "finish_reason": finish_reason}],
        "usage": {},
    }
    return with_content(response, content, prompt_tokens=estimate_tokens(prompt_text(body["messages"])))


def with_content(response: dict[str, Any], content: str, *, prompt_tokens: int | None = None) -> dict[str, Any]:
    """A copy of `response` whose message says `content`, with usage counted again."""
    prompt = response["usage"].get("prompt_tokens", 0) if prompt_tokens is None else prompt_tokens
    choice = {**response["choices"][0], "message": {"role": "assistant", "content": content}}
    completion = estimate_tokens(content)
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {**response, "choices": [choice], "usage": usage}


def without_usage(response: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `response` with no `usage` field, as some OpenAI-compatible servers answer."""
    return {key: value for key, value in response.items() if key != "usage"}


def _text_of(content: object) -> str:
    """The text of one message's content: a string, or the text parts of a part list joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return ""


def last_user_text(messages: list[Mapping[str, Any]]) -> str:
    """The text of the last `user` message ("" when there is none): what `echo_error` repeats."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text_of(message.get("content"))
    return ""


def system_text(messages: list[Mapping[str, Any]]) -> str:
    """The text of the system messages run together ("" when there is none): the instructions."""
    return "\n".join(_text_of(message.get("content")) for message in messages if message.get("role") == "system")


def prompt_text(messages: list[Mapping[str, Any]]) -> str:
    """The text of the messages run together: string contents and the text parts of part lists."""
    return "".join(_text_of(message.get("content")) for message in messages)


GARBAGE_BODY = "<html><body><h1>502 Bad Gateway</h1><p>mirror sim-llm: a proxy's page, not JSON</p></body></html>"
"""What a `garbage` fault answers with HTTP 200: a body no JSON parser accepts."""


def garble(content: str) -> str:
    """Content that is not valid JSON: a proper prefix of an object, or prose cut mid-stream."""
    if content.startswith("{"):
        return content[: max(1, len(content) // 2)]
    return content[: max(1, len(content) // 2)] + "\ufffd\ufffd"


def _clip(text: str, low: int, high: int) -> str:
    """Cut `text` to at most `high` characters, at a word boundary when that keeps `low`."""
    if len(text) <= high:
        return text
    cut = text[:high]
    space = cut.rfind(" ")
    if space >= max(low, 1):
        cut = cut[:space]
    stripped = cut.rstrip(" ,;")
    if len(stripped) >= low:
        cut = stripped
    if len(cut) < high and cut and cut[-1].isalnum():
        cut += "."
    return cut


class _Generator:
    """Walks a schema; holds the root so `$ref` to `#/$defs/...` resolves."""

    def __init__(self, root: Mapping[str, Any], rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def value(self, schema: Any, path: str, hint: str, depth: int) -> Any:
        if depth > MAX_SCHEMA_DEPTH:
            raise UnsatisfiableSchema(path, f"nested deeper than {MAX_SCHEMA_DEPTH} levels (a recursive $ref?)")
        if schema is True or schema == {}:
            return sentence(self.rng, voice_for(hint))
        if not isinstance(schema, Mapping):
            raise UnsatisfiableSchema(path, f"expected a schema object, got {schema!r}")
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"], path), path, hint, depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            if not schema["enum"]:
                raise UnsatisfiableSchema(path, "enum is empty")
            return self.rng.choice(list(schema["enum"]))
        for combinator in ("anyOf", "oneOf"):
            if combinator in schema:
                branches = [b for b in schema[combinator] if not (isinstance(b, Mapping) and b.get("type") == "null")]
                return self.value(self.rng.choice(branches or schema[combinator]), path, hint, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in schema else "array" if "items" in schema else "string"
        if kind == "object":
            return self._object(schema, path, depth)
        if kind == "array":
            return self._array(schema, path, hint, depth)
        if kind == "string":
            return self._string(schema, path, hint)
        if kind in ("integer", "number"):
            return self._number(schema, path, integer=kind == "integer")
        if kind == "boolean":
            return self.rng.random() < 0.5
        if kind == "null":
            return None
        raise UnsatisfiableSchema(path, f"unsupported type {kind!r}")

    def _resolve(self, ref: str, path: str) -> Any:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise UnsatisfiableSchema(path, f"only local $ref ('#/$defs/...') is supported, got {ref!r}")
        target: Any = self.root
        for part in filter(None, ref[1:].split("/")):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(target, Mapping) or part not in target:
                raise UnsatisfiableSchema(path, f"$ref {ref!r} points nowhere")
            target = target[part]
        return target

    def _object(self, schema: Mapping[str, Any], path: str, depth: int) -> dict[str, Any]:
        properties: Mapping[str, Any] = schema.get("properties") or {}
        required = list(schema.get("required") or ())
        additional = schema.get("additionalProperties", True)
        result: dict[str, Any] = {}
        for name, subschema in properties.items():
            if name in required or self.rng.random() < 0.5:
                result[name] = self.value(subschema, f"{path}/{name}", name, depth + 1)
        for name in required:
            if name in result:
                continue
            if additional is False:
                raise UnsatisfiableSchema(path, f"{name!r} is required but not a property and additionalProperties is false")
            extra = {} if additional is True else additional
            result[name] = self.value(extra, f"{path}/{name}", name, depth + 1)
        if not properties and not required and additional is not False:
            extra = {} if additional is True else additional
            result["thought"] = self.value(extra, f"{path}/thought", "thought", depth + 1)
        return result

    def _array(self, schema: Mapping[str, Any], path: str, hint: str, depth: int) -> list[Any]:
        low = int(schema.get("minItems", 0))
        high = int(schema["maxItems"]) if "maxItems" in schema else low + 3
        if high < low:
            raise UnsatisfiableSchema(path, f"maxItems {high} < minItems {low}")
        count = self.rng.randint(max(low, min(1, high)), min(high, max(low, 3)))
        items = schema.get("items", {})
        if not schema.get("uniqueItems"):
            return [self.value(items, f"{path}/{i}", hint, depth + 1) for i in range(count)]
        result: list[Any] = []
        seen: set[str] = set()
        for _ in range(count * 20):
            item = self.value(items, f"{path}/{len(result)}", hint, depth + 1)
            key = json.dumps(item, sort_keys=True)
            if key not in seen:
                seen.add(key)
                result.append(item)
            if len(result) == count:
                return result
        if len(result) < low:
            raise UnsatisfiableSchema(path, f"cannot find {low} distinct items for uniqueItems")
        return result

    def _string(self, schema: Mapping[str, Any], path: str, hint: str) -> str:
        low = int(schema.get("minLength", 0))
        high = int(schema["maxLength"]) if "maxLength" in schema else None
        if high is not None and high < low:
            raise UnsatisfiableSchema(path, f"maxLength {high} < minLength {low}")
        formatted = self._formatted(schema.get("format"))
        if formatted is not None and low <= len(formatted) <= (high if high is not None else len(formatted)):
            return formatted
        voice = voice_for(hint)
        text = sentence(self.rng, voice)
        while len(text) < low:
            text += " " + sentence(self.rng)
        return text if high is None else _clip(text, low, high)

    def _formatted(self, form: object) -> str | None:
        rng = self.rng
        if form == "date-time":
            return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z"
        if form == "date":
            return f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        if form == "email":
            return f"{rng.choice(_FEEL)}.{rng.randint(1, 999)}@example.com"
        if form in ("uri", "url"):
            return f"https://example.com/{rng.choice(_FEEL)}/{rng.randint(1, 999)}"
        if form == "uuid":
            digits = f"{rng.getrandbits(128):032x}"
            return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-a{digits[17:20]}-{digits[20:]}"
        return None

    def _number(self, schema: Mapping[str, Any], path: str, *, integer: bool) -> int | float:
        low, low_open = _bound(schema, "minimum", "exclusiveMinimum")
        high, high_open = _bound(schema, "maximum", "exclusiveMaximum")
        if high is None:  # a missing bound is 100 from the other one; no bounds at all: 0..100
            high = 100 if low is None else low + 100
        if low is None:
            low = high - 100
        if integer:
            first = math.floor(low) + 1 if low_open and float(low).is_integer() else math.ceil(low)
            last = math.ceil(high) - 1 if high_open and float(high).is_integer() else math.floor(high)
            if last < first:
                raise UnsatisfiableSchema(path, f"no integer in the range {low}..{high}")
            return self.rng.randint(first, last)
        if high < low or (high == low and (low_open or high_open)):
            raise UnsatisfiableSchema(path, f"no number in the range {low}..{high}")
        value = round(self.rng.uniform(low, high), 2)
        value = min(max(value, low), high)
        if (low_open and value <= low) or (high_open and value >= high):
            value = (low + high) / 2
        return value


def _bound(schema: Mapping[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    """A bound and whether it is open; `exclusive*` may be a number (2019+) or a flag (draft 4)."""
    flag_or_number = schema.get(exclusive)
    if isinstance(flag_or_number, bool):
        return schema.get(inclusive), flag_or_number and inclusive in schema
    if flag_or_number is not None:
        inclusive_value = schema.get(inclusive)
        if inclusive_value is not None and inclusive_value > flag_or_number:
            return inclusive_value, False
        return flag_or_number, True
    return schema.get(inclusive), False


@lru_cache(maxsize=65536)
def _direction(feature: str, dimensions: int) -> tuple[float, ...]:
    """A pseudo-random vector in [-1, 1]^d for one feature, from blake2b in counter mode."""
    values: list[float] = []
    counter = 0
    while len(values) < dimensions:
        block = hashlib.blake2b(f"{counter}:{feature}".encode(), digest_size=64).digest()
        values.extend(int.from_bytes(block[i : i + 2], "big") / 32767.5 - 1.0 for i in range(0, 64, 2))
        counter += 1
    return tuple(values[:dimensions])


def embedding(text: str, dimensions: int) -> list[float]:
    """A unit vector from a hashed bag of words and word pairs.

    Why not a hash of the whole text: texts that share words then land near each other, so
    retrieval code sees cosine similarity that means something, yet everything stays pure.
    """
    words = _WORD.findall(text.lower())
    features = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)] or [f"\0{text}"]
    vector = [0.0] * dimensions
    for feature in features:
        for index, component in enumerate(_direction(feature, dimensions)):
            vector[index] += component
    norm = math.sqrt(sum(component * component for component in vector))
    if norm == 0.0:  # every feature cancelled out: fall back to the whole text
        vector = list(_direction(f"\0{text}", dimensions))
        norm = math.sqrt(sum(component * component for component in vector)) or 1.0
    return [component / norm for component in vector]


__all__ = [
    "CONTENT_FIELDS", "GARBAGE_BODY", "MAX_SCHEMA_DEPTH", "chat_completion", "embedding", "garble",
    "instance", "json_object", "last_user_text", "prompt_text", "prose", "request_digest", "system_text",
    "rng_for", "sentence", "voice_for", "with_content", "without_usage",
]
