"""Reading a JSON object out of model output, strictly.

Models wrap JSON in code fences and prose even when asked not to, and servers that do not
enforce ``response_format`` return whatever the model wrote. :func:`parse_json_object` accepts
the wrapping but never the guessing: it takes the *first top-level balanced* ``{...}`` span in
the text (string-aware, so braces inside JSON strings do not count), and if that span is not
valid JSON, or does not match the schema, it raises :class:`StructuredOutputError`. It never
descends into a broken object to rescue an inner one, never repairs JSON, and never coerces
types.

Supported schema keywords (a subset of JSON Schema, enough for the prompts' answers): ``type``
(``string``, ``number``, ``integer``, ``boolean``, ``array``, ``object``, ``null`` or a list of
them), ``enum``, ``properties``, ``required``, ``additionalProperties`` (``false`` or a schema)
and ``items``. Other keywords are ignored. ``integer`` means a JSON integer literal: ``1.0`` is
refused, ``true`` is never a number.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import LLMBadResponse, StructuredOutputError
from .llm import LLM, ChatRequest, ChatResponse


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _top_level_spans(text: str) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of each balanced ``{...}`` span outside any other span, in order.

    Braces are counted only inside a span, where JSON strings (with escapes) are skipped. A
    span still open at the end of the text (truncated output) yields nothing.
    """
    depth = 0
    start = 0
    in_string = False
    escaped = False
    for index, char in enumerate(text):
        if depth == 0:
            if char == "{":
                depth, start = 1, index
            continue
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                yield start, index + 1


def _strip_fence(text: str) -> str:
    stripped = text.strip()
    if stripped.startswith("```"):
        stripped = stripped[3:]
        newline = stripped.find("\n")
        stripped = stripped[newline + 1 :] if newline >= 0 else ""
    return stripped.lstrip()


def extract_json_object(content: str, *, schema_name: str | None = None) -> dict[str, Any]:
    """The first top-level JSON object in ``content``; raises :class:`StructuredOutputError`."""
    if _strip_fence(content).startswith("["):
        raise StructuredOutputError("expected a JSON object, got an array", content, schema_name=schema_name)
    span = next(_top_level_spans(content), None)
    if span is None:
        raise StructuredOutputError("no complete JSON object found", content, schema_name=schema_name)
    try:
        value = _DECODER.decode(content[span[0] : span[1]])
    except (ValueError, RecursionError) as exc:
        raise StructuredOutputError(
            f"the first JSON object is not valid JSON ({exc})", content, schema_name=schema_name
        ) from exc
    assert isinstance(value, dict)  # a balanced '{...}' that decodes is an object
    return value


def _type_matches(value: Any, type_name: str) -> bool:
    if type_name == "string":
        return isinstance(value, str)
    if type_name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "number":
        if isinstance(value, float):
            return math.isfinite(value)  # '1e999' decodes to inf
        return isinstance(value, int) and not isinstance(value, bool)
    if type_name == "boolean":
        return isinstance(value, bool)
    if type_name == "array":
        return isinstance(value, list)
    if type_name == "object":
        return isinstance(value, dict)
    if type_name == "null":
        return value is None
    raise ValueError(f"unsupported schema type {type_name!r}")


def schema_errors(value: Any, schema: Mapping[str, Any], path: str = "$") -> Iterator[tuple[str, str]]:
    """``(path, reason)`` for each way ``value`` violates ``schema``, depth first."""
    expected = schema.get("type")
    if expected is not None:
        names = [expected] if isinstance(expected, str) else list(expected)
        if not any(_type_matches(value, name) for name in names):
            yield path, f"expected {' or '.join(names)}, got {_json_type(value)}"
            return
    if "enum" in schema and not any(_same_json(value, option) for option in schema["enum"]):
        yield path, f"{value!r} is not one of {list(schema['enum'])!r}"
    if isinstance(value, dict):
        properties: Mapping[str, Any] = schema.get("properties", {})
        for key in schema.get("required", ()):
            if key not in value:
                yield path, f"missing required key {key!r}"
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            if key in properties:
                yield from schema_errors(item, properties[key], f"{path}.{key}")
            elif extra is False:
                yield path, f"unexpected key {key!r} (additionalProperties is false)"
            elif isinstance(extra, Mapping):
                yield from schema_errors(item, extra, f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            yield from schema_errors(item, schema["items"], f"{path}[{index}]")


_JSON_TYPE_NAMES: dict[type, str] = {str: "string", list: "array", dict: "object"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _same_json(left: Any, right: Any) -> bool:
    """JSON equality for enum members: ``true`` is not ``1``, but ``1`` is ``1.0``."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    return bool(left == right)


def parse_json_object(
    content: str, schema: Mapping[str, Any] | None = None, *, schema_name: str | None = None
) -> dict[str, Any]:
    """The JSON object in ``content``, validated against ``schema`` when one is given.

    Raises :class:`StructuredOutputError` (and nothing else) when the text holds no complete
    JSON object or the first one does not match.
    """
    value = extract_json_object(content, schema_name=schema_name)
    if schema is not None:
        for path, reason in schema_errors(value, schema):
            raise StructuredOutputError(reason, content, path=path, schema_name=schema_name)
    return value


async def chat_json(llm: LLM, request: ChatRequest) -> tuple[dict[str, Any], ChatResponse]:
    """Ask ``llm`` and read its answer as the request's JSON schema (any JSON object if none).

    Works over any adapter of the port, recorded ones included. Empty content is
    :class:`LLMBadResponse`; content that is not the requested object is
    :class:`StructuredOutputError`.
    """
    response = await llm.chat(request)
    if not response.content.strip():
        raise LLMBadResponse("the model returned empty content")
    schema = request.json_schema
    value = parse_json_object(
        response.content,
        None if schema is None else schema.schema,
        schema_name=None if schema is None else schema.name,
    )
    return value, response


__all__ = ["parse_json_object", "extract_json_object", "schema_errors", "chat_json"]
