"""The persona cycle's prompt set, and how each of its requests is built.

The templates live in ``prompts/`` beside this module, a prompt set of their own (``persona-<hash>``,
:class:`~mirror.cognition.prompts.PromptSet`), so changing one is a new version that replay and
recompute notice, and the MIRROR mind's set is untouched by them. A prompt directory's
``persona/`` sub-directory (``mirror prompts export`` writes it) overrides the templates it holds
(:func:`persona_prompt_set`).

Every request starts from the character block (``character.md``): the card's identity, the Big
Five, the goals (the active hard goal named), and the current emotions and relationship from the
projected :class:`~mirror.projections.persona.PersonaState`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

from mirror.cognition.errors import PromptSetError
from mirror.cognition.llm import ChatMessage, ChatRequest, JsonSchema
from mirror.cognition.pipeline import MirrorConfig
from mirror.cognition.prompts import PromptSet, load_prompt_set
from mirror.projections.persona import PersonaState

from .macros import substitute

PERSONA_TEMPLATES = (
    "character.md", "think.md", "memories.md", "appraisal.md", "plan.md", "formulation.md",
    "emotion.md", "relationship.md", "goal.md", "importance.md",
)
PERSONA_PROMPTS = Path(__file__).with_name("prompts")


def load_persona_prompts(directory: str | Path) -> PromptSet:
    """Every persona template of ``directory``; a missing or empty one is a :class:`PromptSetError`."""
    return load_prompt_set(directory, PERSONA_TEMPLATES, "persona")


@cache
def default_persona_prompts() -> PromptSet:
    return load_persona_prompts(PERSONA_PROMPTS)


def persona_prompt_set(directory: str | Path | None = None) -> PromptSet:
    """The persona templates of a prompt directory's ``persona/`` sub-directory (where
    ``mirror prompts export`` writes them) over the built-in ones: as for the MIRROR templates, a
    directory may hold only the templates it changes. No such sub-directory: the built-in set."""
    default = default_persona_prompts()
    folder = None if directory is None else Path(directory) / "persona"
    if folder is None or not folder.is_dir():
        return default
    templates = dict(default.templates)
    for name in PERSONA_TEMPLATES:
        path = folder / name
        if path.is_file():
            text = path.read_text(encoding="utf-8")
            if not text.strip():
                raise PromptSetError(f"persona prompt set {folder}: {name} is empty")
            templates[name] = text
    return PromptSet("persona", templates)  # named as the built-in set: its version says whether it differs


def card_content(persona: PersonaState) -> dict[str, Any]:
    """The persona's content (as :meth:`~mirror.cognition.persona.model.Persona.content` wrote it)."""
    return _content(persona.card)


@cache
def _content(card: str) -> dict[str, Any]:
    value = json.loads(card)
    return value if isinstance(value, dict) else {}


def card_text(persona: PersonaState, field: str) -> str:
    """The card's ``field`` (``description``, ``mes_example``, ...) as the prompts carry it: macros
    substituted for the conversation's user (:mod:`~mirror.cognition.persona.macros`; a
    conversation recorded before that, ``user_name == ""``, keeps the text as it ran)."""
    content = card_content(persona)
    text = content.get(field) or ""
    return substitute(text, char=persona.name, user=persona.user_name, card=content) if isinstance(text, str) else ""


def _scores(values: Any) -> str:
    return ", ".join(f"{name} {float(value):.2f}" for name, value in dict(values).items()) or "(none)"


def _listed(items: Sequence[str]) -> str:
    return "; ".join(f"({index}) {item}" for index, item in enumerate(items, 1)) or "(none)"


def character_block(persona: PersonaState, prompts: PromptSet) -> str:
    content = card_content(persona)
    return prompts.render(
        "character.md", name=persona.name, description=card_text(persona, "description") or "(no description)",
        personality=card_text(persona, "personality") or "(not described)",
        scenario=card_text(persona, "scenario") or "(not described)",
        big_five=_scores(content.get("big_five", {})), hard_goals=_listed(persona.hard_goals),
        active_goal=persona.active_hard_goal or "(every hard goal is met)",
        soft_goals=_listed(tuple(persona.soft_goals)), emotions=_scores(persona.emotions),
        relationship=_scores(persona.relationship),
    )


def request(system: str, messages: Sequence[ChatMessage], prompts: PromptSet, config: MirrorConfig, *,
            max_tokens: int | None = None, schema: JsonSchema | None = None) -> ChatRequest:
    """A persona call: the step's instructions as the system message, then ``messages``."""
    return ChatRequest(
        messages=(ChatMessage("system", system), *messages), model=config.model, temperature=config.temperature,
        max_tokens=config.thinker_max_tokens if max_tokens is None else max_tokens, json_schema=schema,
        prompt_set=prompts.version, seed=config.seed,
    )


def data_message(data: object) -> ChatMessage:
    """The data a structured step works on, as one JSON user message (the simulator reads it too)."""
    return ChatMessage("user", json.dumps(data, ensure_ascii=False))


__all__ = [
    "PERSONA_PROMPTS", "PERSONA_TEMPLATES", "card_content", "card_text", "character_block", "data_message",
    "default_persona_prompts", "load_persona_prompts", "persona_prompt_set", "request",
]
