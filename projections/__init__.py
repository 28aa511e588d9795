"""Projections: state folded from events by pure ``apply(state, event) -> state``.

May import ``mirror.events`` (the model: envelope, payloads, ids) and nothing else of Mirror;
no I/O. ``conversation`` (the fold), ``state`` (the state and its limits), ``beliefs`` and
``edges`` (decay, reinforcement, contradictions), ``monologue`` (the bounded thought history),
``persona`` (the persona mind's state: emotions,
relationship, goals, episodes), ``snapshot`` (cached folds, versioned), ``constants`` (the papers' parameters), ``errors``,
``_frozen`` (the immutable map states are built from).
"""

from .conversation import apply, fold
from .snapshot import PROJECTION_VERSION, snapshot_bytes, state_from_snapshot
from .state import ConversationState, Limits, initial_state

__all__ = [
    "ConversationState", "Limits", "PROJECTION_VERSION", "apply", "fold", "initial_state",
    "snapshot_bytes", "state_from_snapshot",
]
