"""Projections: state folded from events by pure ``apply(state, event) -> state``."""

from .conversation import apply, fold
from .snapshot import PROJECTION_VERSION, snapshot_bytes, state_from_snapshot
from .state import ConversationState, Limits, initial_state

__all__ = [
    "ConversationState", "Limits", "PROJECTION_VERSION", "apply", "fold", "initial_state",
    "snapshot_bytes", "state_from_snapshot",
]
