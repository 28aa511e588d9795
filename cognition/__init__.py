"""Cognition: what to think, given a language model behind the :class:`LLM` port.

May import ``mirror.projections`` and ``mirror.events`` (the model and its ports), never the
runtime. ``pipeline`` (the MIRROR Talker, Inner Monologue and Cognitive Controller), ``llm``
(the port), ``openai_client`` and ``http_transport`` (the adapter for any OpenAI-compatible
API), ``chat_stream`` (reading a streamed answer's server-sent chunks), ``structured`` (schema-constrained output), ``prompts`` and ``prompt_sets/`` (versioned
prompt sets), ``history`` (bounded conversation views), ``embeddings/`` (the embedder port and
its adapters: OpenAI-compatible endpoints and offline MiniLM), ``memory/`` (the memory stage:
extraction, the dedup and contradiction gates, recall), ``reflection/`` (insights, the portrait
and the decay of old beliefs: the slow loop between turns), ``persona/`` (persona files:
character cards V2/V3 as JSON or PNG, and native TOML, read, validated and written back), ``turn`` (the turn written once: its
``TurnRequest`` and the code that makes a turn's events, for the live conversation, recompute
and replay verify), ``stages`` (the thinking stages between turns as one table), ``instructions`` (the client's system text: when a turn records it, how a prompt carries it), ``transcript_digest`` (a transcript's exchanges as one chained digest: a chat completion placed on ``main`` without reading the log), ``fair_share`` (each
process's model slots shared between tenants by weight, the Talker first, bounded queues), ``talker_first``
(a process's thinking steps start only while none of its turns is busy), ``writer`` (the
one writer: fenced appends, the turn and the think loop, for the live conversation and
recompute), ``responses`` (parsing
what the models answer), ``errors``.
"""

from .errors import (
    CognitionError,
    LLMBadResponse,
    LLMError,
    LLMRateLimited,
    LLMRequestRejected,
    LLMTimeout,
    LLMUnavailable,
    StructuredOutputError,
)
from .llm import LLM, ChatMessage, ChatRequest, ChatResponse, JsonSchema, estimate_tokens
from .openai_client import LLMSettings, OpenAIChatClient
from .structured import chat_json, parse_json_object

__all__ = [
    "CognitionError",
    "LLMError",
    "LLMUnavailable",
    "LLMTimeout",
    "LLMRateLimited",
    "LLMRequestRejected",
    "LLMBadResponse",
    "StructuredOutputError",
    "LLM",
    "ChatMessage",
    "ChatRequest",
    "ChatResponse",
    "JsonSchema",
    "estimate_tokens",
    "LLMSettings",
    "OpenAIChatClient",
    "chat_json",
    "parse_json_object",
]
