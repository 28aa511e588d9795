"""The Chat Completions request as Mirror reads it, and the response and chunk shapes it answers with.

Mirror holds the conversation's history: the request's **last message must be the user's**, and
it is the new turn. Earlier user and assistant messages are not replayed into the model: they place
the turn in the conversation's history (:mod:`~mirror.gateway.openai.transcript`: which branch it
continues, or where a regenerated or edited transcript forks a new one). ``system`` and
``developer`` messages are the client's *instructions*: their texts, in order, joined by a blank
line, recorded when they change and read by the Talker (:mod:`mirror.cognition.instructions`).

Parameters are honoured, ignored out loud, or refused — never ignored silently
(:meth:`ChatCompletionIn.check`). Sampling knobs the mind decides for itself — ``temperature``
other than the Talker's, ``top_p``, ``presence_penalty``, ``frequency_penalty``, ``seed``,
``stop``, ``logit_bias``, ``top_k`` and ``max_tokens`` / ``max_completion_tokens`` below the
Talker's limit — are accepted and named in the ``X-Mirror-Ignored`` response header: front ends
send them by default (SillyTavern always sends temperature, top_p, both penalties and
max_tokens 300), and the Talker answers at its own recorded settings, so every turn replays.
``X-Mirror-Strict: true`` refuses them instead, each with a 400 naming it. What would change
the *shape* of the answer is always refused: ``n`` > 1, ``tools`` and functions,
``response_format`` other than text, ``logprobs``. Fields that change nothing about the answer
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
    "IGNORED_HEADER", "STRICT_HEADER", "ChatCompletionIn", "MessageIn", "chunk", "completion", "completion_id",
    "mirror_extension", "turn_message", "usage",
]

IGNORED_HEADER = "X-Mirror-Ignored"
"""Response header: the request's sampling parameters the Talker did not follow, comma-separated."""
STRICT_HEADER = "X-Mirror-Strict"
"""Request header: ``true`` refuses those parameters with a 400 instead."""
_LIMITS = ("max_tokens", "max_completion_tokens")


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
    metadata: dict[str, Any] | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
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

    def check(self, *, temperature: float, max_tokens: int, strict: bool = False) -> list[str]:
        """The sampling parameters the Talker will not follow (see the module docstring), to be named
        in ``X-Mirror-Ignored``; a 400 naming any parameter that would change the shape of the
        answer, and in ``strict`` mode the first sampling parameter too."""
        for name, given in self._shape_changing().items():
            if given:
                raise OpenAIError(400, f"{name} is not supported by Mirror's chat completions: it would change the "
                                       f"shape of the answer (one text reply, recorded for replay); leave {name} out",
                                  "unsupported_parameter", name)
        ignored = [name for name, given in self._sampling(temperature, max_tokens).items() if given]
        if strict and ignored:
            name = ignored[0]
            raise OpenAIError(400, f"{name} cannot be honoured ({STRICT_HEADER}: true): Mirror's Talker answers at its "
                                   f"own settings (temperature {temperature:g}, at most {max_tokens} tokens), which "
                                   f"every turn's recorded request holds; leave {name} out, or drop {STRICT_HEADER} "
                                   "to have it ignored and named in X-Mirror-Ignored",
                              "unsupported_value" if name in ("temperature", *_LIMITS) else "unsupported_parameter",
                              name)
        return ignored

    def _shape_changing(self) -> dict[str, bool]:
        return {
            "n": self.n not in (None, 1), "tools": bool(self.tools),
            "tool_choice": self.tool_choice not in (None, "none"), "functions": bool(self.functions),
            "function_call": self.function_call not in (None, "none"), "logprobs": bool(self.logprobs),
            "top_logprobs": bool(self.top_logprobs),
            "response_format": self.response_format not in (None, {"type": "text"}),
        }

    def _sampling(self, temperature: float, max_tokens: int) -> dict[str, bool]:
        top_k = (self.model_extra or {}).get("top_k")
        return {
            "temperature": self.temperature is not None and abs(self.temperature - temperature) > 1e-9,
            "top_p": self.top_p not in (None, 1, 1.0),
            "presence_penalty": self.presence_penalty not in (None, 0, 0.0),
            "frequency_penalty": self.frequency_penalty not in (None, 0, 0.0),
            "seed": self.seed is not None, "stop": bool(self.stop), "logit_bias": bool(self.logit_bias),
            "top_k": top_k not in (None, 0, -1),
            **{name: getattr(self, name) is not None and getattr(self, name) < max_tokens for name in _LIMITS},
        }

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
                     "finish_reason": result.finish_reason, "logprobs": None}],
        "usage": usage(result), "mirror": mirror_extension(result, conversation, branch),
    }


def chunk(identifier: str, model: str, created: int, delta: dict[str, Any], finish_reason: str | None = None,
          **extra: Any) -> dict[str, Any]:
    """A ``chat.completion.chunk`` of one choice (``extra``: ``usage``, ``mirror``)."""
    return {"id": identifier, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}], **extra}
