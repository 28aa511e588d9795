"""Replay: time travel, deterministic re-thinking and recompute on branches (not built yet)."""

__all__: list[str] = []
