"""Cognition: what to think, given a language model behind the :class:`LLM` port."""

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
