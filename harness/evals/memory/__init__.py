"""``mirror eval memory``: recall@5 of keyword-only, vector-only and fused memory retrieval,
and the same before and after a reflection's decay step.

``dialogues.json`` (the labelled set: stated sentences, distractors, a later question and the
sentences it needs), ``dialogues`` (:class:`Dialogue`, :func:`load_dialogues`), ``run``
(:func:`run_memory_eval` for one embedder, :func:`run_memory_evals` for several) and
``reflection`` (the reflection column: each dialogue's beliefs reflected on by the simulator or
a given model, recall asked of what the projection still holds).
"""

from .dialogues import Dialogue, load_dialogues
from .reflection import ReflectionEvalSettings
from .run import EMBEDDERS, run_memory_eval, run_memory_evals

__all__ = ["EMBEDDERS", "Dialogue", "ReflectionEvalSettings", "load_dialogues", "run_memory_eval", "run_memory_evals"]
