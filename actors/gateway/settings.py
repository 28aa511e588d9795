"""The gateway's configuration: one frozen dataclass, built once by whoever starts a gateway.

It crosses into Ray (each :class:`~mirror.actors.gateway.actor.GatewayActor` gets it as a
constructor argument), so it holds plain values only.
"""

from __future__ import annotations

from dataclasses import dataclass

from mirror.actors.conversation import RuntimeSettings

__all__ = ["DEFAULT_MAX_FINISHED_JOBS", "DEFAULT_MAX_MESSAGE_BYTES", "GatewaySettings"]

DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024
DEFAULT_MAX_FINISHED_JOBS = 1_000


@dataclass(frozen=True)
class GatewaySettings:
    runtime: RuntimeSettings
    tenants_file: str
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    actor_timeout_s: float = 300.0
    max_finished_jobs: int = DEFAULT_MAX_FINISHED_JOBS
    """Finished recompute jobs whose final status a gateway remembers; the oldest go first.
    A gateway process lives for weeks, and each record holds a whole report."""

    def __post_init__(self) -> None:
        if self.max_finished_jobs < 1:
            raise ValueError(f"max_finished_jobs is {self.max_finished_jobs}; it must be at least 1")
