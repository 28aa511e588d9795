"""What every reflection call shares: how a request is built, and what an unusable answer is.

The data each call works on travels as a JSON user message (as the memory stage's calls do):
the instructions stay one template, and whatever serves the model — the simulator included —
reads the data without parsing prose. Model, temperature, seed and the thinker's token budget
come from the :class:`~mirror.cognition.pipeline.MirrorConfig`, as for the other thinking stages,
so replay rebuilds them from the recorded provenance.
"""

from __future__ import annotations

import json

from mirror.cognition.errors import LLMError
from mirror.cognition.llm import ChatMessage, ChatRequest, JsonSchema
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet


class UnusableReflection(LLMError):
    """The answer matched its schema but cannot be used (an empty insight, an oversized one)."""


def request(system: str, data: object, schema: JsonSchema, prompts: PromptSet, config: MirrorConfig) -> ChatRequest:
    """A schema-constrained call: ``system`` instructions, ``data`` as the JSON user message."""
    return ChatRequest(
        messages=(ChatMessage("system", system), ChatMessage("user", json.dumps(data, ensure_ascii=False))),
        model=config.model, temperature=config.temperature, max_tokens=config.thinker_max_tokens,
        json_schema=schema, prompt_set=prompts.version, seed=config.seed,
    )


def clean(text: str) -> str:
    """Whitespace runs as single spaces, ends stripped."""
    return " ".join(text.split())


__all__ = ["UnusableReflection", "clean", "request"]
