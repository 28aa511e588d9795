"""Long-term memory: the memory stage that writes beliefs and edges (and, beside it, recall).

``extract`` (the two schema-constrained calls of the memory stage — extraction and the
contradiction check — their schemas, requests and strict parsing), ``gate`` (the dedup gate, the
contradiction decisions and the edge rules: pure functions from state and recorded vectors to
``belief`` / ``edge`` payloads) and ``stage`` (:func:`remember`, one all-or-nothing memory step
after the controller, and :func:`memory_behind`, which the writer's think loop asks).

Part of the cognition layer: may import the rest of ``mirror.cognition`` (the LLM and
:class:`~mirror.cognition.embeddings.Embedder` ports, prompts, the pipeline's result types),
``mirror.projections`` (state, the confidence constants) and ``mirror.events``, plus numpy;
never the runtime (``actors``) or ``replay``. It appends nothing itself: the
:class:`~mirror.cognition.writer.ConversationWriter` does.
"""

from .extract import CONTRADICTION_SCHEMA, MEMORY_SCHEMA
from .gate import OPPOSITE_RELATIONS, belief_id
from .stage import EMBEDDING_FAILED, RecordedStepFailure, memory_behind, remember

__all__ = [
    "CONTRADICTION_SCHEMA",
    "EMBEDDING_FAILED",
    "MEMORY_SCHEMA",
    "OPPOSITE_RELATIONS",
    "RecordedStepFailure",
    "belief_id",
    "memory_behind",
    "remember",
]
