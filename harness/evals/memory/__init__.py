"""``mirror eval memory``: recall@5 of keyword-only, vector-only and fused memory retrieval.

``dialogues.json`` (the labelled set: stated sentences, distractors, a later question and the
sentences it needs) and ``run`` (:func:`run_memory_eval` for one embedder, :func:`run_memory_evals`
for several).
"""

from .run import EMBEDDERS, Dialogue, load_dialogues, run_memory_eval, run_memory_evals

__all__ = ["EMBEDDERS", "Dialogue", "load_dialogues", "run_memory_eval", "run_memory_evals"]
