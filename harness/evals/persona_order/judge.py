"""The order experiment's judge: does a reply express the emotion of its turn's appraisal?

Any OpenAI-compatible model, through Mirror's own client
(:meth:`~mirror.cognition.openai_client.OpenAIChatClient.chat_json`), answers the
``persona_order_verdict`` schema: the emotion the appraisal expresses, whether the reply expresses
it (in words, or unmistakably in tone), and why. The user message has two sections, ``APPRAISAL:``
and ``REPLY:`` (:func:`judge_message`); the simulator's judge (:mod:`mirror.sim.persona`) reads the
same sections.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from mirror.cognition.llm import ChatMessage, ChatRequest, JsonSchema
from mirror.cognition.openai_client import OpenAIChatClient

__all__ = ["JUDGE_MAX_TOKENS", "RUBRIC", "VERDICT_SCHEMA", "Verdict", "judge_message", "judge_request", "judge_turn"]

JUDGE_MAX_TOKENS = 300
VERDICT_SCHEMA = JsonSchema("persona_order_verdict", {
    "type": "object",
    "properties": {
        "appraised_emotion": {"type": "string"},
        "expressed": {"type": "boolean"},
        "reason": {"type": "string"},
    },
    "required": ["appraised_emotion", "expressed", "reason"],
    "additionalProperties": False,
})
RUBRIC = """You judge a role-played character's reply against the character's private gut reaction.

You are shown the APPRAISAL (the character's visceral, unspoken reaction to what was just said to
them) and the REPLY (what the character actually said aloud). First name the one emotion the
appraisal expresses most strongly (one word, e.g. fear, sadness, anger, joy). Then decide whether
the reply expresses that same emotion: in its words, or unmistakably in its tone. A reply that
hides the feeling, states only facts or plans, or expresses a different emotion does not.

Reply with a JSON object: "appraised_emotion" (one word), "expressed" (true or false) and
"reason" (one sentence)."""


def judge_message(appraisal: str, reply: str) -> str:
    return f"APPRAISAL:\n{appraisal}\n\nREPLY:\n{reply}"


def judge_request(appraisal: str, reply: str, model: str, max_tokens: int = JUDGE_MAX_TOKENS) -> ChatRequest:
    """Temperature 0, the rubric as the system message, the schema attached."""
    return ChatRequest(
        messages=(ChatMessage("system", RUBRIC), ChatMessage("user", judge_message(appraisal, reply))),
        model=model, temperature=0.0, max_tokens=max_tokens, json_schema=VERDICT_SCHEMA,
        prompt_set="persona-order-judge-1",
    )


@dataclass(frozen=True, slots=True)
class Verdict:
    appraised_emotion: str
    expressed: bool
    reason: str
    provenance: dict[str, Any]


async def judge_turn(client: OpenAIChatClient, appraisal: str, reply: str, model: str | None = None) -> Verdict:
    """One verdict; raises the client's typed errors (``LLMError``, ``StructuredOutputError``)."""
    data, response = await client.chat_json(judge_request(appraisal, reply, model or client.model))
    return Verdict(str(data["appraised_emotion"]).strip().lower(), bool(data["expressed"]), str(data["reason"]),
                   asdict(response.provenance))
