"""Replay: re-read and re-run history.

May import ``mirror.cognition``, ``mirror.projections`` and ``mirror.events``; the runtime
(``mirror.actors``) imports it, never the reverse.

- ``history``: :class:`History` — the one rebuild path (:meth:`History.rebuild`: snapshot + tail,
  skipping an unusable snapshot), and ``state_at`` any seq or time on any branch;
  :func:`serving_history` — the one the gateway (and the bench that measures it) reads with;
- ``diff``: :func:`diff` / :class:`StateDiff` — what changed between two states (seqs or branches);
- ``reflections``: :func:`read_reflections` / :func:`reflection_history` — each reflection of a
  branch with what it changed (the portrait's diff, the beliefs decayed and forgotten, the
  overruled decisions) and what it cost;
- ``recorded``: :class:`RecordedLLM` — the LLM port answered from the log by request fingerprint;
- ``recorded_vectors``: :class:`RecordedVectors` — the embeddings memory events recorded, by
  fingerprint or text; :class:`RecordedEmbedder` — the embedder port answered from them (zero
  embedding calls);
- ``verify``: :func:`verify_events` — re-run the recorded steps and report divergences (a request
  the log never answered says which stage asked it and which templates changed);
- ``compare``: what a verify compares and reports (:class:`VerifyReport`, :class:`Divergence`,
  ``compare``, ``config_from``, ``basis_of``), shared by the step verifiers;
- ``persona``: the persona mind's steps verified (its turn path, background steps and failures,
  the ``persona`` event's version against its card), with the persona prompt set;
- ``verify_log``: :func:`verify_conversations` — verify what a log holds, by name (an unknown
  conversation or branch is an error), each branch with the prompt set its fork recorded;
- ``prompt_record``: what a ``fork`` event records of its prompt set (:func:`recorded_fork`),
  rebuilding it (:func:`prompts_of_fork`), and prompt sets compared (:class:`PromptComparison`);
- ``recompute``: :func:`recompute_conversation` — re-think a conversation on a branch with a new
  prompt set;
- ``interrupted``: what a killed recompute left at its branch's end (a recall without its turn, a
  memory step without its ``memory_step``), for the next run to finish rather than redo;
- ``why``: :func:`~mirror.replay.why.why_event`, ``why_belief``, ``why_edge`` — what produced an
  event, a belief or an edge (its causes, each with its model call) and every event that touched
  a belief or an edge, read from a branch's events (pure);
- ``why_reads``: :func:`~mirror.replay.why_reads.read_why_belief`, ``events_for_event`` — which
  events a why question reads through a :class:`History` (a belief's: only those that name it);
- ``errors``.
"""

from .diff import StateDiff, diff, state_view
from .errors import (
    NonDeterminism,
    RecomputeError,
    RecordingMiss,
    ReplayError,
    UnknownBranch,
    UnknownConversation,
    UnknownPosition,
    UnknownPromptSet,
    UnknownReflection,
    UnknownSubject,
)
from .history import History, Rebuilt, serving_history
from .prompt_record import PromptComparison, prompts_of_fork, recorded_fork
from .recompute import Recomputation, RecomputePlan, recompute_conversation
from .recorded import RecordedLLM
from .recorded_vectors import RecordedEmbedder, RecordedVectors
from .reflections import ReflectionHistory, ReflectionView, read_reflections, reflection_history
from .verify import Divergence, VerifyReport, verify_events
from .verify_log import verify_conversations

__all__ = [
    "Divergence",
    "History",
    "NonDeterminism",
    "PromptComparison",
    "Recomputation",
    "RecomputeError",
    "RecomputePlan",
    "RecordedEmbedder",
    "RecordedLLM",
    "RecordedVectors",
    "Rebuilt",
    "RecordingMiss",
    "ReflectionHistory",
    "ReflectionView",
    "ReplayError",
    "StateDiff",
    "UnknownBranch",
    "UnknownConversation",
    "UnknownPosition",
    "UnknownPromptSet",
    "UnknownReflection",
    "UnknownSubject",
    "VerifyReport",
    "diff",
    "prompts_of_fork",
    "recompute_conversation",
    "read_reflections",
    "recorded_fork",
    "reflection_history",
    "serving_history",
    "state_view",
    "verify_conversations",
    "verify_events",
]
