"""The insight step: one sentence about the newest interaction, pending the next reflection.

One schema-constrained call per thinking step (``insight.md``, schema ``reflection_insight``:
``{"insight": str}``) about the newest exchange; its answer becomes an
:class:`~mirror.events.payloads.Insight` naming its turn, which marks that turn's insight done
(``ConversationState.insight_turn``). A failure is one ``thinker_failed`` of stage
``insight``, retried by the writer on its own (the thinking and memory already done are not
re-run). The payload gives the answer back (:func:`mirror.cognition.responses.one_copy`).
"""

from __future__ import annotations

from mirror.cognition.errors import LLMError
from mirror.cognition.llm import LLM, ChatRequest, ChatResponse, JsonSchema
from mirror.cognition.pipeline import MirrorConfig, Thinking, Thought, failure_thought
from mirror.cognition.prompts import PromptSet
from mirror.cognition.responses import one_copy
from mirror.cognition.structured import parse_json_object
from mirror.events.payloads import Insight
from mirror.projections.state import ConversationState

from .calls import UnusableReflection, clean, request

INSIGHT_SCHEMA = JsonSchema(
    "reflection_insight",
    {
        "type": "object",
        "properties": {"insight": {"type": "string", "minLength": 1}},
        "required": ["insight"],
        "additionalProperties": False,
    },
)
MAX_INSIGHT_CHARS = 400


def insight_behind(state: ConversationState) -> bool:
    """True when the newest turn of ``state`` has no insight yet."""
    if state.turn_count == 0:
        return False
    done = -1 if state.insight_turn is None else state.insight_turn
    return done < state.turn_count - 1


def insight_request(state: ConversationState, prompts: PromptSet, config: MirrorConfig) -> ChatRequest:
    """The insight call for the newest exchange of ``state``."""
    latest = state.recent_turns[-1]
    exchange = {"user_message": latest.user_message, "reply": latest.reply}
    return request(prompts.render("insight.md"), exchange, INSIGHT_SCHEMA, prompts, config)


def parse_insight(content: str) -> str:
    """The insight sentence of an answer; an ``LLMError`` if it is unusable."""
    fields = parse_json_object(content, INSIGHT_SCHEMA.schema, schema_name=INSIGHT_SCHEMA.name)
    text = clean(str(fields["insight"]))
    if not text:
        raise UnusableReflection("the insight is empty")
    if len(text) > MAX_INSIGHT_CHARS:
        raise UnusableReflection(f"the insight is longer than {MAX_INSIGHT_CHARS} characters")
    return text


async def draw_insight(state: ConversationState, llm: LLM, prompts: PromptSet, config: MirrorConfig,
                       *, attempt: int = 1) -> Thinking:
    """The insight of the newest turn of ``state``, or the failure to draw it."""
    if not state.recent_turns:
        raise ValueError("there is no turn to draw an insight from")
    turn = state.turn_count - 1
    chat = insight_request(state, prompts, config)
    response: ChatResponse | None = None
    try:
        response = await llm.chat(chat)
        text = parse_insight(response.content)
    except LLMError as exc:
        return Thinking(turn, (failure_thought("insight", exc, attempt, turn, chat, response),))
    insight = Insight(text, for_turn=turn)
    provenance = one_copy(insight, response.provenance, lambda answer: Insight(parse_insight(answer), for_turn=turn))
    return Thinking(turn, (Thought(insight, provenance),))


__all__ = ["INSIGHT_SCHEMA", "MAX_INSIGHT_CHARS", "draw_insight", "insight_behind", "insight_request", "parse_insight"]
