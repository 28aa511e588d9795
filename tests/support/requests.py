"""A chat request and the schema the LLM client's tests share (in process and against the simulator)."""

from __future__ import annotations

import dataclasses
from typing import Any

from mirror.cognition import ChatMessage, ChatRequest, JsonSchema

API_KEY = "sk-test-0123456789abcdef-SECRET"
THREADS_SCHEMA = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string"},
        "memory": {"type": "string"},
        "goal": {"type": "string"},
    },
    "required": ["reasoning", "memory", "goal"],
    "additionalProperties": False,
}

def request(text: str = "What do I notice?", **changes: Any) -> ChatRequest:
    base = ChatRequest(
        messages=(ChatMessage("system", "You are Mirror's inner voice."), ChatMessage("user", text)),
        model="sim-1",
        temperature=0.7,
        max_tokens=300,
        json_schema=JsonSchema("threads", THREADS_SCHEMA),
        prompt_set="default-v1",
        seed=7,
    )
    return dataclasses.replace(base, **changes)
