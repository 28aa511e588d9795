"""The Chat Completions request as Mirror reads it, and the response and chunk shapes it answers with.

Mirror holds the conversation's history: the request's **last message must be the user's**, and
it is the new turn. Earlier user and assistant messages are not replayed into the model: they place
the turn in the conversation's history (:mod:`~mirror.gateway.openai.transcript`: which branch it
continues, or where a regenerated or edited transcript forks a new one). ``system`` and
``developer`` messages are the client's *instructions*: their texts, in order, joined by a blank
line, recorded when they change and read by the Talker (:mod:`mirror.cognition.instructions`).

Parameters that would change what the model is asked are honoured or refused, never ignored:
``temperature`` must be the Talker's own (it is part of every recorded request, so a turn at
another would not replay); ``max_tokens`` / ``max_completion_tokens`` are honoured when at least
the Talker's limit (the reply can never be longer) and refused below it; ``stop``, ``n`` > 1,
``tools``, ``response_format`` other than text, ``logprobs`` and the sampling penalties are
refused with a 400 naming the parameter. Fields that change nothing about the answer
(``metadata``, ``store``, ``stream_options`` save ``include_usage``, ...) are accepted.
"""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from mirror.actors.results import TurnResult
from mirror.gateway.openai.errors import OpenAIError
from mirror.gateway.openai.transcript import Transcript

__all__ = [
    "ChatCompletionIn", "MessageIn", "chunk", "completion", "completion_id", "mirror_extension",
    "turn_message", "usage",
]


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[MessageIn]
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    user: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    n: int | None = None
    top_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    logit_bias: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    function_call: Any = None
    response_format: dict[str, Any] | None = None
    seed: int | None = None

    def check(self, *, temperature: float, max_tokens: int) -> None:
        """Refuse, with a 400 naming it, any parameter Mirror cannot honour (see the module docstring)."""
        if self.temperature is not None and abs(self.temperature - temperature) > 1e-9:
            raise OpenAIError(400, f"temperature {self.temperature:g} cannot be honoured: Mirror's Talker answers at "
                                   f"{temperature:g}, which every turn's recorded request holds (a turn at another "
                                   f"would not replay); send {temperature:g} or leave it out",
                              "unsupported_value", "temperature")
        for name in ("max_tokens", "max_completion_tokens"):
            asked = getattr(self, name)
            if asked is not None and asked < max_tokens:
                raise OpenAIError(400, f"{name} {asked} cannot be honoured: the Talker's replies are limited to "
                                       f"{max_tokens} tokens (a stack setting, part of each turn's recorded request); "
                                       f"send at least {max_tokens} or leave it out", "unsupported_value", name)
        refused = {
            "stop": bool(self.stop), "n": self.n not in (None, 1), "tools": bool(self.tools),
            "tool_choice": self.tool_choice not in (None, "none"), "functions": bool(self.functions),
            "function_call": self.function_call not in (None, "none"), "logprobs": bool(self.logprobs),
            "top_logprobs": bool(self.top_logprobs), "logit_bias": bool(self.logit_bias),
            "top_p": self.top_p not in (None, 1, 1.0), "presence_penalty": self.presence_penalty not in (None, 0, 0.0),
            "frequency_penalty": self.frequency_penalty not in (None, 0, 0.0), "seed": self.seed is not None,
            "response_format": self.response_format not in (None, {"type": "text"}),
        }
        for name, given in refused.items():
            if given:
                raise OpenAIError(400, f"{name} is not supported by Mirror's chat completions: the mind decides how "
                                       f"it is asked and every request is recorded for replay; leave {name} out",
                                  "unsupported_parameter", name)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.get("include_usage"))


def _text(message: MessageIn, index: int) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    parts = []
    for part in content:
        if part.get("type") != "text" or not isinstance(part.get("text"), str):
            raise OpenAIError(400, f"messages[{index}] has a {part.get('type')!r} part: Mirror reads text only",
                              "unsupported_content", f"messages[{index}].content")
        parts.append(part["text"])
    return "".join(parts)


def turn_message(body: ChatCompletionIn) -> Transcript:
    """The request as a :class:`~mirror.gateway.openai.transcript.Transcript`: the new turn's message
    (the last, a user's), the exchanges before it, the client's instructions; a 400 otherwise.

    How the earlier messages are read is :mod:`~mirror.gateway.openai.transcript`'s to say:
    leading assistant messages are a greeting and are dropped, consecutive messages of one role
    are one, and a user message left unanswered at the end joins the new one."""
    if not body.messages:
        raise OpenAIError(400, "messages is empty: send at least the user's message", "invalid_request", "messages")
    last = body.messages[-1]
    if last.role != "user":
        raise OpenAIError(400, f"the last message is the {last.role}'s: Mirror answers the newest user message, so "
                               "the last message must be role user", "invalid_request", "messages")
    instructions: list[str] = []
    said: list[list[str]] = []  # [role, text]: consecutive messages of one role joined
    for index, message in enumerate(body.messages):
        if message.role in ("system", "developer"):
            text = _text(message, index).strip()
            if text:
                instructions.append(text)
        elif message.role in ("user", "assistant"):
            text = _text(message, index)
            if said and said[-1][0] == message.role:
                said[-1][1] = f"{said[-1][1]}\n\n{text}"
            elif said or message.role == "user":  # leading assistant messages: a greeting, not compared
                said.append([message.role, text])
        else:
            raise OpenAIError(400, f"messages[{index}] is a {message.role} message: Mirror has no tools",
                              "unsupported_parameter", f"messages[{index}]")
    history = any(message.role == "assistant" for message in body.messages)  # a greeting alone is history too
    new = said.pop()[1]  # the last message is a user's: the new turn, with any unanswered one before it
    exchanges = tuple((said[i][1], said[i + 1][1]) for i in range(0, len(said), 2))
    return Transcript(new, exchanges, "\n\n".join(instructions), history)


def completion_id() -> str:
    return f"chatcmpl-{uuid.uuid4().hex}"


def usage(result: TurnResult) -> dict[str, int]:
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.completion_tokens,
            "total_tokens": result.prompt_tokens + result.completion_tokens}


def mirror_extension(result: TurnResult, conversation: str, branch: str = "main") -> dict[str, Any]:
    """Mirror's extension field: where the turn's event landed (its conversation, branch, seq and turn)."""
    return {"conversation": conversation, "branch": branch, "seq": result.seq, "turn": result.turn}


def completion(identifier: str, model: str, result: TurnResult, conversation: str, branch: str = "main") -> dict[str, Any]:
    """A ``chat.completion`` for an acknowledged turn."""
    return {
        "id": identifier, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.reply},
                     "finish_reason": "stop", "logprobs": None}],
        "usage": usage(result), "mirror": mirror_extension(result, conversation, branch),
    }


def chunk(identifier: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None = None,
          **extra: Any) -> dict[str, Any]:
    """A ``chat.completion.chunk`` of one choice (``extra``: ``usage``, ``mirror``)."""
    return {"id": identifier, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}], **extra}
