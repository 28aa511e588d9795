"""Replay: re-read and re-run history.

May import ``mirror.cognition``, ``mirror.projections`` and ``mirror.events``; the runtime
(``mirror.actors``) imports it, never the reverse.

- ``history``: :class:`History` — the one rebuild path (:meth:`History.rebuild`: snapshot + tail,
  skipping an unusable snapshot), and ``state_at`` any seq or time on any branch;
- ``diff``: :func:`diff` / :class:`StateDiff` — what changed between two states (seqs or branches);
- ``recorded``: :class:`RecordedLLM` — the LLM port answered from the log by request fingerprint;
- ``recorded_vectors``: :class:`RecordedVectors` — the embeddings memory events recorded, by
  fingerprint or text; :class:`RecordedEmbedder` — the embedder port answered from them (zero
  embedding calls);
- ``verify``: :func:`verify_events` — re-run the recorded steps and report divergences;
- ``recompute``: :func:`recompute_conversation` — re-think a conversation on a branch with a new
  prompt set;
- ``errors``.
"""

from .diff import StateDiff, diff, state_view
from .errors import NonDeterminism, RecomputeError, RecordingMiss, ReplayError, UnknownBranch, UnknownPosition
from .history import History, Rebuilt
from .recompute import Recomputation, RecomputePlan, recompute_conversation
from .recorded import RecordedLLM
from .recorded_vectors import RecordedEmbedder, RecordedVectors
from .verify import Divergence, VerifyReport, verify_events

__all__ = [
    "Divergence",
    "History",
    "NonDeterminism",
    "Recomputation",
    "RecomputeError",
    "RecomputePlan",
    "RecordedEmbedder",
    "RecordedLLM",
    "RecordedVectors",
    "Rebuilt",
    "RecordingMiss",
    "ReplayError",
    "StateDiff",
    "UnknownBranch",
    "UnknownPosition",
    "VerifyReport",
    "diff",
    "recompute_conversation",
    "state_view",
    "verify_events",
]
