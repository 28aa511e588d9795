"""The LLM port: what cognition asks of a language model, whatever serves it.

Adapters: :class:`mirror.cognition.openai_client.OpenAIChatClient` (any OpenAI-compatible HTTP
API) and, for replay, recorded responses looked up by :meth:`ChatRequest.fingerprint`.

Invariant: the fingerprint covers exactly what reaches the model — messages, model,
temperature, max_tokens, JSON schema and seed — so two requests with equal fingerprints are the
same question. ``prompt_set`` is a label for humans and forks, and API keys live in the adapter's
settings; neither is part of a request's identity. Nor is streaming (:class:`StreamingLLM`): how
the answer travels back changes neither the question nor the answer recorded.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring
from types import MappingProxyType
from typing import Any, Literal, Protocol, runtime_checkable

from mirror.events.payloads import Provenance
from mirror.projections.monologue import estimate_tokens

Role = Literal["system", "user", "assistant"]
ROLES: frozenset[str] = frozenset({"system", "user", "assistant"})


def canonical_json(value: object) -> str:
    """Sorted keys, no whitespace, unicode kept: one text per value, for hashing."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@functools.lru_cache(maxsize=1024)
def json_string(text: str) -> str:
    """``text`` as a JSON string, exactly as :func:`json.dumps` writes it with ``ensure_ascii=False``.

    Remembered: each request sends the conversation's recent messages again (every Thinker step
    of every turn), and encoding them afresh, twice a request (the fingerprint and the body), was
    most of a long request's CPU in the host. 1,024 texts (a few MB at most) hold the recent
    turns of the conversations thinking at once; one that fell out is encoded again, as before."""
    return encode_basestring(text)


def messages_json(messages: Sequence[ChatMessage], *, content_first: bool) -> str:
    """The JSON array of ``messages`` as :func:`json.dumps` writes ``[m.as_dict() ...]`` compactly
    (``content_first``: with each object's keys sorted, as :func:`canonical_json` writes them)."""
    if content_first:
        return "[" + ",".join(['{"content":' + json_string(message.content) + ',"role":"' + message.role + '"}'
                               for message in messages]) + "]"
    return "[" + ",".join(['{"role":"' + message.role + '","content":' + json_string(message.content) + "}"
                           for message in messages]) + "]"


def _thaw(value: Any) -> Any:
    """A plain, deep copy of a JSON-like value (mappings become dicts, sequences lists)."""
    if isinstance(value, Mapping):
        return {str(key): _thaw(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_thaw(item) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Role
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"chat message role {self.role!r} is not one of {sorted(ROLES)}")
        if not isinstance(self.content, str):
            raise TypeError(f"chat message content must be str, got {type(self.content).__name__}")

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, slots=True)
class JsonSchema:
    """A named JSON schema the answer must match (OpenAI ``response_format.json_schema``).

    The schema is copied on construction, so changing the caller's dict later changes neither
    what is sent nor the request's fingerprint.
    """

    name: str
    schema: Mapping[str, Any] = field(hash=False)
    canonical: str = field(init=False, repr=False, compare=False, hash=False)
    """``canonical_json({"name": name, "schema": schema})``, made once: every request's
    fingerprint holds it, and sorting and thawing the schema again per model call was a few per
    cent of a conversation host's CPU."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a JSON schema needs a name (OpenAI requires one)")
        copied = _thaw(self.schema)
        # Made here, it also fails early on values JSON cannot carry.
        object.__setattr__(self, "canonical", canonical_json({"name": self.name, "schema": copied}))
        object.__setattr__(self, "schema", MappingProxyType(copied))

    def as_dict(self) -> dict[str, Any]:
        return _thaw(self.schema)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    messages: tuple[ChatMessage, ...]
    model: str
    temperature: float = 0.7
    max_tokens: int = 3000
    json_schema: JsonSchema | None = None
    prompt_set: str = ""
    seed: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.messages, tuple):
            object.__setattr__(self, "messages", tuple(self.messages))
        if not self.messages:
            raise ValueError("a chat request needs at least one message")
        if not self.model:
            raise ValueError("a chat request needs a model name")
        if not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature {self.temperature} is outside [0, 2]")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")

    def identity(self) -> dict[str, Any]:
        """Everything that reaches the model, as plain JSON values."""
        return {
            "messages": [message.as_dict() for message in self.messages],
            "model": self.model,
            "temperature": float(self.temperature),
            "max_tokens": int(self.max_tokens),
            "json_schema": (
                None
                if self.json_schema is None
                else {"name": self.json_schema.name, "schema": self.json_schema.as_dict()}
            ),
            "seed": self.seed,
        }

    def fingerprint(self) -> str:
        """sha256 hex of the canonical JSON of :meth:`identity`; what replay looks responses up by.

        The text is ``canonical_json(self.identity())`` to the byte, built without sorting or
        re-encoding: the keys are written in their sorted order, the schema's part is the one
        :attr:`JsonSchema.canonical` made once and the messages' texts are :func:`json_string`'s
        (a test holds the two equal)."""
        rest = json.dumps({"model": self.model, "seed": self.seed, "temperature": float(self.temperature)},
                          separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        schema = "null" if self.json_schema is None else self.json_schema.canonical
        text = (f'{{"json_schema":{schema},"max_tokens":{int(self.max_tokens)},'
                f'"messages":{messages_json(self.messages, content_first=True)},{rest[1:]}')
        return hashlib.sha256(text.encode()).hexdigest()

    def prompt_text(self) -> str:
        return "\n".join(message.content for message in self.messages)


@dataclass(frozen=True, slots=True)
class ChatResponse:
    """The model's answer and where it came from.

    From a live model ``provenance.response`` equals ``content``; replayed from a log whose
    provenance points at its payload (``response_in_payload``), ``content`` is the answer
    rebuilt from the payload and ``provenance`` is the recorded one, unchanged.
    """

    content: str
    provenance: Provenance
    finish_reason: str = "stop"
    """Why the model stopped, as it said (``length``: its ``max_tokens`` cut the answer). Not part
    of the provenance: no replay decides anything by it; an answer served from the log says ``stop``."""


@runtime_checkable
class LLM(Protocol):
    """A language model. Adapters translate their backend's failures into ``LLMError``s."""

    async def chat(self, request: ChatRequest) -> ChatResponse: ...

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


TokenSink = Callable[[str], None]
"""Where a streamed answer's text goes as it arrives: called with each new piece, in order; the
pieces joined are the answer's content. Synchronous and quick (it hands the piece on)."""


@runtime_checkable
class StreamingLLM(LLM, Protocol):
    """A language model that can also hand its answer on as it is written.

    Streaming is a transport choice, not part of the question: :meth:`chat_streamed` sends the same
    request (same :meth:`ChatRequest.fingerprint`) and returns the same :class:`ChatResponse` as
    :meth:`LLM.chat` would for the same content, so a streamed turn replays like any other.
    Failures before the first piece are retried and raised exactly as :meth:`LLM.chat`'s are;
    after it, a failure is raised without retrying (the sink has already seen the pieces).
    """

    async def chat_streamed(self, request: ChatRequest, on_token: TokenSink) -> ChatResponse: ...


async def chat_to(llm: LLM, request: ChatRequest, on_token: TokenSink | None) -> ChatResponse:
    """``llm.chat(request)``, streamed to ``on_token`` when given and the model can stream; a model
    that cannot hands the sink its whole answer at once."""
    if on_token is None:
        return await llm.chat(request)
    if isinstance(llm, StreamingLLM):
        return await llm.chat_streamed(request, on_token)
    response = await llm.chat(request)
    on_token(response.content)
    return response


class StrippedTokens:
    """A sink that passes on the pieces of ``content.strip()``: leading whitespace is dropped and a
    run of whitespace is held back until text follows it, so the pieces passed on join to exactly
    what a caller keeping ``content.strip()`` records (a Talker's reply)."""

    __slots__ = ("_sink", "_started", "_held")

    def __init__(self, sink: TokenSink) -> None:
        self._sink = sink
        self._started = False
        self._held = ""

    def __call__(self, piece: str) -> None:
        if not self._started:
            piece = piece.lstrip()
            if not piece:
                return
            self._started = True
        text = self._held + piece
        shown = text.rstrip()
        self._held = text[len(shown):]
        if shown:
            self._sink(shown)


def unanswered_provenance(request: ChatRequest) -> Provenance:
    """The provenance of a call that got no answer: its fingerprint and the run-time parameters
    replay rebuilds the request from (without the seed it would ask another one)."""
    parameters: dict[str, float | int | str] = {"temperature": float(request.temperature), "max_tokens": request.max_tokens}
    if request.seed is not None:
        parameters["seed"] = request.seed
    return Provenance(model=request.model, prompt_set=request.prompt_set, request_fingerprint=request.fingerprint(),
                      parameters=parameters)


__all__ = [
    "unanswered_provenance",
    "Role",
    "ChatMessage",
    "JsonSchema",
    "ChatRequest",
    "ChatResponse",
    "LLM",
    "StreamingLLM",
    "StrippedTokens",
    "TokenSink",
    "canonical_json",
    "chat_to",
    "estimate_tokens",
]
