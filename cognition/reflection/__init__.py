"""Reflection: the slow loop between turns that keeps a portrait of the user and tends memory.

Modules:

- ``policy`` — :class:`ReflectionPolicy`, the validated numbers (every 20 interactions, a
  cooldown of 10, at most 6 an hour, the event triggers, the decay rules' thresholds, the
  validation bounds);
- ``triggers`` — when one may run (:func:`refusal`: cooldown, hourly cap) and why it is due
  (:func:`due`: ``periodic``, ``review``, ``belief_burst``; :func:`forced_triggers`);
- ``insight`` — the per-turn insight call (:func:`draw_insight`, :func:`insight_behind`);
- ``decay`` — decay candidates, the decay call and the rules that overrule a proposed FORGET
  or DECAY (:func:`decide`);
- ``consolidate`` — the consolidation call, validation and the health check;
- ``step`` — :func:`reflect`, one whole reflection or one failure;
- ``calls`` — what the calls share (request building, :class:`UnusableReflection`).

What a reflection changed, read back from the log, is :mod:`mirror.replay.reflections`.

Pure given an LLM, like :mod:`mirror.cognition.pipeline` and :mod:`mirror.cognition.memory`:
each function takes the projected state and returns what happened (a
:class:`~mirror.cognition.pipeline.Thinking`); the
:class:`~mirror.cognition.writer.ConversationWriter` appends it. Part of the cognition layer:
may import the rest of ``mirror.cognition`` (the LLM port, prompts, the pipeline's result
types, ``responses``, ``structured``), ``mirror.projections`` and ``mirror.events``; never the
runtime (``actors``) or ``replay``.
"""

from .calls import UnusableReflection
from .consolidate import PORTRAIT_SCHEMA, health_warning, unique_ratio, validate
from .decay import DECAY_SCHEMA, decay_candidates, decide, is_protected, overruling_rule
from .insight import INSIGHT_SCHEMA, draw_insight, insight_behind
from .policy import DEFAULT_POLICY, ReflectionPolicy
from .step import reflect
from .triggers import Refusal, due, forced_triggers, refusal

__all__ = [
    "DECAY_SCHEMA",
    "DEFAULT_POLICY",
    "INSIGHT_SCHEMA",
    "PORTRAIT_SCHEMA",
    "ReflectionPolicy",
    "Refusal",
    "UnusableReflection",
    "decay_candidates",
    "decide",
    "draw_insight",
    "due",
    "forced_triggers",
    "health_warning",
    "insight_behind",
    "is_protected",
    "overruling_rule",
    "reflect",
    "refusal",
    "unique_ratio",
    "validate",
]
