"""Which conversation a Chat Completions request continues: decided here, once, in one order.

A chat front end cannot be taught to send Mirror's header, but each can send *something*: a base
URL with a path, a header its settings allow, its own chat-id header, OpenAI's ``metadata``, or
the ``user`` field. :func:`conversation_of` reads them in this order and the first one present
names the conversation (docs/http-api.md has the same table):

1. the base URL's path: ``/c/{conversation}/v1/chat/completions`` (``path``);
2. the ``X-Mirror-Conversation`` header (``header``);
3. Open WebUI's ``X-OpenWebUI-Chat-Id`` header, sent with ``ENABLE_FORWARD_USER_INFO_HEADERS=true``
   (``openwebui``);
4. ``metadata.conversation_id`` (``metadata``): OpenAI's free-form string pairs;
5. the ``user`` field (``user``): LibreChat sends it, and LiteLLM fills it;
6. ``prompt_cache_key`` (``prompt_cache_key``): what new SDKs send where a conversation's prefix repeats.

``safety_identifier`` (the new SDKs' successor of ``user``) is not read: it is documented as a
stable hash of an end user, so it would fold every chat of one person into one conversation.

A name that is present but not an identifier (the rules of :func:`mirror.events.ids.validate_identifier`)
is a 400 naming where it came from — never skipped for the next one, which would continue a
conversation the client did not name. A request naming none is a 400 ``missing_conversation``
whose message says what to set in the client that sent it (:func:`client_of` recognises it from
its headers). The native routes keep their own path parameter; only these routes come here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from mirror.events.errors import InvalidIdentifier
from mirror.events.ids import validate_identifier
from mirror.gateway.openai.errors import OpenAIError
from mirror.gateway.openai.shapes import ChatCompletionIn

__all__ = [
    "CONVERSATION_HEADER", "METADATA_KEY", "NAMED_BY_HEADER", "OPENWEBUI_CHAT_HEADER", "Named", "client_of",
    "conversation_of", "first_name", "named_in_path", "path_name_of",
]

CONVERSATION_HEADER = "X-Mirror-Conversation"
OPENWEBUI_CHAT_HEADER = "X-OpenWebUI-Chat-Id"
METADATA_KEY = "conversation_id"
NAMED_BY_HEADER = "X-Mirror-Named-By"
"""Response header: which source named the conversation (``path``, ``header``, ``openwebui``, ...)."""


@dataclass(frozen=True, slots=True)
class Named:
    """The conversation a request continues and the source that named it."""

    conversation: str
    source: str


_PATH = re.compile(r"^/c/([^/]+)/v1/chat/completions/?$")


def path_name_of(path: str) -> str | None:
    """The conversation a request's path names (``/c/{conversation}/v1/chat/completions``), or None."""
    found = _PATH.match(path)
    return unquote(found.group(1)) if found else None


def _sources(path_name: str | None, headers: Mapping[str, str], body: Mapping[str, Any]) -> tuple[tuple[str, str, Any], ...]:
    """(source, where, value) of every place a name can come from, in the module's order.
    ``headers`` answers lower-case names (Starlette's ``Headers`` answers any case)."""
    metadata = body.get("metadata")
    return (
        ("path", "the base URL's path /c/{conversation}/v1", path_name),
        ("header", f"the {CONVERSATION_HEADER} header", headers.get(CONVERSATION_HEADER.lower())),
        ("openwebui", f"the {OPENWEBUI_CHAT_HEADER} header", headers.get(OPENWEBUI_CHAT_HEADER.lower())),
        ("metadata", f"metadata.{METADATA_KEY}", metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None),
        ("user", "the user field", body.get("user")),
        ("prompt_cache_key", "the prompt_cache_key field", body.get("prompt_cache_key")),
    )


def first_name(path: str, headers: Mapping[str, str], body: Mapping[str, Any]) -> str | None:
    """The name the request's first present source gives, unchecked (the route checks it): for
    what must know a request's conversation before the route runs (the limits' middleware)."""
    for _source, _where, value in _sources(path_name_of(path), headers, body):
        if value is not None and value != "":
            return value if isinstance(value, str) else str(value)
    return None


def named_in_path(path_name: str) -> Named:
    """The conversation a ``/c/{conversation}/v1`` base URL names; the same 400 as :func:`conversation_of` if bad."""
    source, where, _value = _sources(path_name, {}, {})[0]
    try:
        return Named(validate_identifier("conversation", path_name), source)
    except InvalidIdentifier as bad:
        raise OpenAIError(400, f"{bad} (named by {where})", "invalid_conversation", _PARAMS.get(source)) from None


def conversation_of(path_name: str | None, headers: Mapping[str, str], body: ChatCompletionIn) -> Named:
    """The conversation the request names, by the first source present in the module's order; a 400 otherwise."""
    fields = {"metadata": body.metadata, "user": body.user, "prompt_cache_key": body.prompt_cache_key}
    for source, where, value in _sources(path_name, headers, fields):
        if value is None or value == "":
            continue
        try:
            return Named(validate_identifier("conversation", value), source)
        except InvalidIdentifier as bad:
            raise OpenAIError(400, f"{bad} (named by {where})", "invalid_conversation",
                              _PARAMS.get(source)) from None
    client = client_of(headers)
    raise OpenAIError(400, f"which conversation? Mirror keeps each conversation's history, so a request must name "
                           f"one. {_HINTS[client]} (Sources read, first wins: the base URL path /c/<name>/v1, "
                           f"{CONVERSATION_HEADER}, {OPENWEBUI_CHAT_HEADER}, metadata.{METADATA_KEY}, user, "
                           "prompt_cache_key; a name is 1-64 characters from [A-Za-z0-9_-].)",
                      "missing_conversation", "user")


_PARAMS = {"metadata": f"metadata.{METADATA_KEY}", "user": "user", "prompt_cache_key": "prompt_cache_key"}


def client_of(headers: Mapping[str, str]) -> str:
    """Which client sent a request, as far as its headers tell: ``openwebui``, ``sillytavern``,
    ``openai-python``, ``openai-js``, ``curl`` or ``unknown``.

    Open WebUI forwards ``X-OpenWebUI-User-*`` headers (with forwarding on); the official SDKs
    send ``x-stainless-lang`` (LangChain, the ``llm`` CLI and LiteLLM go through the Python SDK,
    LibreChat through the JS one); SillyTavern's server calls a Custom endpoint with node-fetch.
    """
    agent = headers.get("user-agent", "").lower()
    if any(name.lower().startswith("x-openwebui-") for name in headers.keys()):
        return "openwebui"
    language = headers.get("x-stainless-lang", "").lower()
    if language == "python" or agent.startswith("openai/python"):
        return "openai-python"
    if language in ("js", "javascript", "node") or agent.startswith("openai/js"):
        return "openai-js"
    if "node-fetch" in agent:
        return "sillytavern"
    if agent.startswith("curl/"):
        return "curl"
    return "unknown"


_HINTS = {
    "openwebui": "Open WebUI sends its chat id only with ENABLE_FORWARD_USER_INFO_HEADERS=true; set it, or make the "
                 "connection's URL http://<host>:<port>/c/<name>/v1.",
    "sillytavern": "In SillyTavern (Chat Completion, Custom source) set the Custom Endpoint to "
                   "http://<host>:<port>/c/<name>/v1, or add the header X-Mirror-Conversation: {{char}} under "
                   "Additional Parameters > Include Headers.",
    "openai-python": "With the openai package (and LangChain's ChatOpenAI, LiteLLM, the llm CLI) set "
                     "base_url='http://<host>:<port>/c/<name>/v1', or default_headers={'X-Mirror-Conversation': "
                     "'<name>'}, or send metadata={'conversation_id': '<name>'}.",
    "openai-js": "With the openai JS package set baseURL: 'http://<host>:<port>/c/<name>/v1' or defaultHeaders "
                 "{'X-Mirror-Conversation': '<name>'}; in LibreChat's custom endpoint add the header "
                 "X-Mirror-Conversation: '{{LIBRECHAT_BODY_CONVERSATIONID}}'.",
    "curl": "With curl add -H 'X-Mirror-Conversation: <name>', or post to /c/<name>/v1/chat/completions.",
    "unknown": "Set the client's base URL to http://<host>:<port>/c/<name>/v1, or send the header "
               "X-Mirror-Conversation: <name>.",
}
