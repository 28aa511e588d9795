"""The thinking stages between turns, as one table: :data:`STAGES`.

Each :class:`Stage` is a name, whether it is behind for a state (the newest turn still needs
it), and how to run one step of it (its events, or a ``thinker_failed``, as a
:class:`~mirror.cognition.pipeline.Thinking`). Three readers iterate the same rows:

- the writer's think loop (:meth:`~mirror.cognition.writer.ConversationWriter.think_until_current`)
  runs the first stage behind, in table order, until none is;
- the live conversation asks whether any stage is behind (a re-activated conversation resumes
  the thinking its previous incarnation left);
- ``replay verify`` re-runs a recorded step through its stage's :attr:`Stage.run` (by the name
  the step's events or its failure carry).

So adding a stage is one row here. The order is the order the stages run in after a turn: a
persona's background steps (emotion, relationship, goal, importance: a persona conversation runs
no MIRROR stage), then MIRROR's thinking, memory, the insight and a reflection when one is due.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from mirror.projections.state import ConversationState

from .embeddings.port import Embedder
from .llm import LLM
from .memory.stage import memory_behind, remember
from .persona.background import PERSONA_STAGES, persona_step, persona_step_behind
from .persona.prompting import default_persona_prompts
from .pipeline import MirrorConfig, Thinking, think, thinking_behind
from .prompts import PromptSet
from .reflection.insight import draw_insight, insight_behind
from .reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from .reflection.step import reflect
from .reflection.triggers import due


@dataclass(frozen=True, slots=True)
class StageContext:
    """What a stage runs with: the model, the prompt sets, the conversation's configuration, the
    embedder (memory and a persona's episodes), the reflection policy. ``triggers``: a reflection's
    triggers when they are not the ones due (a forced reflection, or one replayed as recorded)."""

    llm: LLM
    prompts: PromptSet
    config: MirrorConfig
    embedder: Embedder | None = None
    policy: ReflectionPolicy = DEFAULT_POLICY
    persona_prompts: PromptSet | None = None
    triggers: tuple[str, ...] | None = None


Behind = Callable[[ConversationState, StageContext], bool]
Run = Callable[[ConversationState, StageContext, int], Awaitable[Thinking]]


@dataclass(frozen=True, slots=True)
class Stage:
    """One thinking stage: ``behind(state, context)`` and ``run(state, context, attempt)``."""

    name: str
    behind: Behind
    run: Run


def _persona_stage(name: str) -> Stage:
    async def run(state: ConversationState, context: StageContext, attempt: int) -> Thinking:
        return await persona_step(state, name, context.llm, context.embedder,
                                  context.persona_prompts or default_persona_prompts(), context.config, attempt=attempt)

    return Stage(name, lambda state, context: persona_step_behind(state, name), run)


async def _think(state: ConversationState, context: StageContext, attempt: int) -> Thinking:
    return await think(state, context.llm, context.prompts, context.config, attempt=attempt)


async def _remember(state: ConversationState, context: StageContext, attempt: int) -> Thinking:
    assert context.embedder is not None  # the stage is behind only with one
    return await remember(state, context.llm, context.embedder, context.prompts, context.config, attempt=attempt)


async def _draw_insight(state: ConversationState, context: StageContext, attempt: int) -> Thinking:
    return await draw_insight(state, context.llm, context.prompts, context.config, attempt=attempt)


async def _reflect(state: ConversationState, context: StageContext, attempt: int) -> Thinking:
    triggers = context.triggers if context.triggers is not None else due(state, context.policy)
    return await reflect(state, context.llm, context.prompts, context.config, context.policy, triggers=triggers,
                         attempt=attempt)


STAGES: tuple[Stage, ...] = (
    *(_persona_stage(name) for name in PERSONA_STAGES),
    Stage("thinking", lambda state, context: thinking_behind(state, context.config.mode), _think),
    Stage("memory", lambda state, context: context.config.memory and context.embedder is not None
          and memory_behind(state), _remember),
    Stage("insight", lambda state, context: context.config.reflection and insight_behind(state), _draw_insight),
    Stage("reflection", lambda state, context: context.config.reflection and bool(due(state, context.policy)),
          _reflect),
)
"""Every thinking stage, in the order they run after a turn."""

STAGE: dict[str, Stage] = {stage.name: stage for stage in STAGES}
"""The stages by name (the ``stage`` a ``thinker_failed`` records)."""


def stages_behind(state: ConversationState, context: StageContext) -> list[str]:
    """The stages the newest turn of ``state`` still needs, in the order they would run."""
    return [stage.name for stage in STAGES if stage.behind(state, context)]


__all__ = ["STAGE", "STAGES", "Stage", "StageContext", "stages_behind"]
