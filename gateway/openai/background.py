"""A front end's background tasks — titles, tags, follow-ups, autocompletion, search queries,
summaries — answered by the model statelessly, never as turns.

Chat front ends ask the same endpoint for their own bookkeeping (Open WebUI's title, tags and
follow-up requests carry the chat's own id). Taken as turns they would put "Generate a concise
title..." into the conversation's history, its memory and its thinking. Here such a request is
one plain call of the stack's model through its LLM client: no event is appended, nothing is
thought about, the conversation is not activated (it need not even be named) and nothing is
logged. Its reply says ``X-Mirror-Task: <task>`` and ``"mirror": {"task": ...}``.

A request is a background task when (first that applies):

1. the ``X-Mirror-Task`` header says ``background`` (or ``turn``: a turn, whatever it looks like);
2. its model ends in ``:background`` (``mirror:background``, ``persona:wren:background``: what a
   front end's "task model" setting can pick from ``GET /v1/models``);
3. its last message, or one of its system messages, holds one of :data:`RECOGNISED`'s phrases —
   the default prompts of Open WebUI, LibreChat and SillyTavern, as their source writes them
   (a front end whose prompts were edited is recognised by 1 or 2).

The call is the conversation's model (the stack's), at the Talker's temperature unless the
request sets one, and at most the Talker's reply limit of tokens; the client's messages are sent
as they came, text only. Nothing is recorded, so nothing here needs to replay. The call's tokens
count against a limited tenant's daily token budget like a turn's (:mod:`mirror.gateway.limits`).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping

from fastapi.responses import JSONResponse, Response, StreamingResponse

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.llm import ChatMessage, ChatRequest, ChatResponse, Role
from mirror.cognition.openai_client import OpenAIChatClient
from mirror.cognition.pipeline import MirrorConfig
from mirror.gateway.limits import metered_tokens
from mirror.gateway.openai.errors import OpenAIError
from mirror.gateway.openai.shapes import ChatCompletionIn, MessageIn, chunk, completion_id
from mirror.gateway.runtime import GatewayRuntime

__all__ = ["BACKGROUND_SUFFIX", "RECOGNISED", "TASK_HEADER", "answer", "base_model", "request_for", "task_of"]

BACKGROUND_SUFFIX = ":background"
"""A model name ending in it asks for a background answer (``mirror:background`` is listed)."""
TASK_HEADER = "X-Mirror-Task"
"""Request: ``background`` or ``turn`` forces either. Response: ``turn`` or the task's name."""

RECOGNISED: tuple[tuple[str, str, str], ...] = (
    # (task, client, a phrase of its default prompt) — Open WebUI backend/open_webui/config.py
    ("title", "Open WebUI", "### Task:\nGenerate a concise"),
    ("tags", "Open WebUI", "### Task:\nGenerate 1-3 broad tags"),
    ("follow_ups", "Open WebUI", "### Task:\nSuggest 3-5 relevant follow-up questions"),
    ("queries", "Open WebUI", "### Task:\nAnalyze the chat history to determine the necessity of generating search"),
    ("autocomplete", "Open WebUI", "### Task:\nYou are an autocompletion system."),
    ("image_prompt", "Open WebUI", "### Task:\nGenerate a detailed prompt for am image generation task"),
    ("emoji", "Open WebUI", "Your task is to reflect the speaker's likely facial expression through a fitting emoji."),
    # LibreChat: @librechat/agents src/utils/title.ts, api/app/clients/prompts/{titlePrompts,summaryPrompts}.js
    ("title", "LibreChat", "Provide a concise, 5-word-or-less title for the conversation"),
    ("title", "LibreChat", "Analyze this conversation and provide:\n1. The detected language of the conversation"),
    ("title", "LibreChat", "Write a concise title for this conversation in the given language."),
    ("summary", "LibreChat", "Summarize the conversation by integrating new lines into the current summary."),
    ("summary", "LibreChat", "Summarize the content as best as you can, noting that it was cut-off."),
    # SillyTavern: public/scripts/extensions/memory/index.js (the Summarize extension's default prompt)
    ("summary", "SillyTavern", "Summarize the most important facts and events in the story so far."),
)


def base_model(model: str) -> str:
    """``model`` without the ``:background`` suffix (the model that names the mind)."""
    return model.removesuffix(BACKGROUND_SUFFIX) if model.endswith(BACKGROUND_SUFFIX) else model


def task_of(body: ChatCompletionIn, headers: Mapping[str, str]) -> str | None:
    """The background task a request is (``background`` when forced), or None for a turn."""
    forced = headers.get(TASK_HEADER, "").strip().lower()
    if forced not in ("", "background", "turn"):
        raise OpenAIError(400, f"{TASK_HEADER}: {headers[TASK_HEADER]!r} is not one; send background (answer "
                               "statelessly, log nothing) or turn", "invalid_request", TASK_HEADER)
    if forced == "turn":
        return None
    if forced == "background" or body.model.endswith(BACKGROUND_SUFFIX):
        return "background"
    if not body.messages:
        return None
    candidates = [body.messages[-1], *(m for m in body.messages[:-1] if m.role in ("system", "developer"))]
    texts = [_text(message) for message in candidates]
    for task, _client, phrase in RECOGNISED:
        if any(phrase in text for text in texts):
            return task
    last = texts[0]
    if last.lstrip().startswith("### Task:") and "<chat_history>" in last:  # Open WebUI's template shape
        return "task"
    return None


def _text(message: MessageIn) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or () if part.get("type") == "text"
                   and isinstance(part.get("text"), str))


_ROLES: dict[str, Role] = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def request_for(body: ChatCompletionIn, settings: RuntimeSettings) -> ChatRequest:
    """The one plain model call: the client's messages, the stack's model, the Talker's bounds."""
    messages = []
    for index, message in enumerate(body.messages):
        role = _ROLES.get(message.role)
        if role is None:
            raise OpenAIError(400, f"messages[{index}] is a {message.role} message: Mirror has no tools",
                              "unsupported_parameter", f"messages[{index}]")
        if isinstance(message.content, list) and any(part.get("type") != "text" for part in message.content):
            raise OpenAIError(400, f"messages[{index}] has a non-text part: Mirror reads text only",
                              "unsupported_content", f"messages[{index}].content")
        messages.append(ChatMessage(role, _text(message)))
    if not messages:
        raise OpenAIError(400, "messages is empty: send at least one message", "invalid_request", "messages")
    limit = settings.talker_max_tokens
    asked = body.max_completion_tokens or body.max_tokens
    temperature = MirrorConfig(model=settings.llm.model).temperature if body.temperature is None else body.temperature
    return ChatRequest(tuple(messages), settings.llm.model, temperature=min(max(temperature, 0.0), 2.0),
                       max_tokens=min(asked, limit) if asked and asked > 0 else limit, seed=body.seed)


async def answer(body: ChatCompletionIn, task: str, runtime: GatewayRuntime, headers: dict[str, str]) -> Response:
    """The model's answer to a background request, as a completion or a stream; nothing logged.

    A client of its own per request: background requests are a few per chat, and the gateway's
    runtime holds no model client (the conversations' processes do)."""
    request = request_for(body, runtime.settings.runtime)
    async with OpenAIChatClient(runtime.settings.runtime.llm) as llm:
        response = await llm.chat(request)
    provenance = response.provenance
    metered_tokens(provenance.prompt_tokens + provenance.completion_tokens)  # a limited tenant's day, as its turns
    headers = {**headers, TASK_HEADER: task}
    identifier = completion_id()
    if body.stream:
        return StreamingResponse(_chunks(identifier, body, response, task), media_type="text/event-stream",
                                 headers={**headers, "Cache-Control": "no-cache"})
    return JSONResponse({
        "id": identifier, "object": "chat.completion", "created": int(time.time()), "model": body.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": response.content},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": _usage(response), "mirror": {"task": task},
    }, headers=headers)


def _usage(response: ChatResponse) -> dict[str, int]:
    prompt, completion = response.provenance.prompt_tokens, response.provenance.completion_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


async def _chunks(identifier: str, body: ChatCompletionIn, response: ChatResponse, task: str) -> AsyncIterator[bytes]:
    created = int(time.time())
    pieces = [chunk(identifier, body.model, created, {"role": "assistant", "content": response.content}),
              chunk(identifier, body.model, created, {}, "stop", mirror={"task": task})]
    if body.include_usage():
        final = chunk(identifier, body.model, created, {}, usage=_usage(response))
        final["choices"] = []
        pieces.append(final)
    for piece in pieces:
        yield f"data: {json.dumps(piece, ensure_ascii=False)}\n\n".encode()
    yield b"data: [DONE]\n\n"
