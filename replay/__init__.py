"""Replay: re-read and re-run history.

May import ``mirror.cognition``, ``mirror.projections`` and ``mirror.events``; the runtime
(``mirror.actors``) imports it, never the reverse.

- :class:`History` — ``state_at`` any seq or time on any branch, from snapshots at intervals.
- :func:`diff` / :class:`StateDiff` — what changed between two states (seqs or branches).
- :class:`RecordedLLM` — the LLM port answered from the log by request fingerprint.
- :class:`RecordedVectors` — the embeddings memory events recorded, by fingerprint or text;
  :class:`RecordedEmbedder` — the embedder port answered from them (zero embedding calls).
- :func:`verify_events` — re-run the recorded steps and report divergences.
- :func:`recompute_conversation` — re-think a conversation on a branch with a new prompt set.
"""

from .diff import StateDiff, diff, state_view
from .errors import NonDeterminism, RecomputeError, RecordingMiss, ReplayError, UnknownBranch, UnknownPosition
from .history import History
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
