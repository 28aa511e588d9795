"""The model names of the OpenAI-compatible API and the mind and mode each selects.

- ``mirror``: the conversation's own mind — for a new conversation the stack's default (the
  MIRROR mind in the stack's mode); for an existing one whatever its first turn fixed;
- ``mirror-<mode>`` (``mirror-baseline``, ``mirror-threads_only``, ``mirror-controller_only``,
  ``mirror-full``): the MIRROR mind in that mode; a conversation fixed otherwise is a 409;
- ``persona:<name>``: the persona ``name`` of the tenant's store (``POST /v1/personas``); a
  conversation fixed to another mind or character is a 409;
- any of these with ``:background`` (``mirror:background`` is listed): a front end's background
  task, answered statelessly (:mod:`~mirror.gateway.openai.background`), for a front end's
  "task model" setting.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirror.cognition.persona.choice import MindChoice
from mirror.cognition.pipeline import MODES
from mirror.gateway.error_table import answer
from mirror.gateway.openai.background import BACKGROUND_SUFFIX
from mirror.gateway.openai.errors import OpenAIError
from mirror.gateway.routes.personas import MindIn, mind_choice
from mirror.gateway.runtime import GatewayRuntime

__all__ = ["BACKGROUND_MODEL", "MIRROR_MODELS", "PERSONA_PREFIX", "Selected", "model_names", "selected"]

MIRROR_MODELS = ("mirror", *(f"mirror-{mode}" for mode in MODES))
PERSONA_PREFIX = "persona:"
BACKGROUND_MODEL = "mirror" + BACKGROUND_SUFFIX
"""The one background model listed (``<any model>:background`` is taken too)."""


@dataclass(frozen=True)
class Selected:
    """What a ``model`` asks of a turn: a mode (None: the conversation's) and a mind (None: not asked)."""

    mode: str | None
    mind: MindChoice | None


async def selected(runtime: GatewayRuntime, tenant: str, model: str) -> Selected:
    """The mind and mode ``model`` names; a 404 ``model_not_found`` for a name that is not one."""
    if model == "mirror":
        return Selected(None, None)
    if model in MIRROR_MODELS:
        return Selected(model.removeprefix("mirror-"), MindChoice("mirror"))
    if model.startswith(PERSONA_PREFIX) and model[len(PERSONA_PREFIX):]:
        name = model[len(PERSONA_PREFIX):]
        try:
            return Selected(None, await mind_choice(runtime, tenant, MindIn(mind="persona", persona=name)))
        except OpenAIError:
            raise
        except Exception as exc:  # the store's 404 or 400, in this API's words
            if answer(exc).status in (400, 404):
                raise OpenAIError(404, f"the model {model!r} does not exist: no persona {name!r} in this tenant's store "
                                       "(POST /v1/personas first; GET /v1/models lists the models)",
                                  "model_not_found", "model") from None
            raise
    raise OpenAIError(404, f"the model {model!r} does not exist; choose one of {', '.join(MIRROR_MODELS)} or "
                           f"{PERSONA_PREFIX}<name> for a persona of this tenant's store (GET /v1/models lists them)",
                      "model_not_found", "model")


async def model_names(runtime: GatewayRuntime, tenant: str) -> list[str]:
    """Every model this tenant can ask for: the MIRROR ones, the background one, then its personas by name."""
    names = await runtime.personas.names(await runtime.bus(), tenant)
    return [*MIRROR_MODELS, BACKGROUND_MODEL, *(PERSONA_PREFIX + name for name in sorted(names))]
