"""The runtime's settings: one frozen :class:`RuntimeSettings`, built once at the edge.

The stack (or a test) builds it and hands it down; it crosses into Ray with every conversation
host and actor, so it holds plain values and the :class:`~mirror.events.infrastructure.Infrastructure`
recipe (chosen by the stack: NATS in production, in-memory in tests), never a live connection.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mirror.cognition.fair_share import FairShareSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.cognition.prompts import PromptSet, default_prompt_set, load_prompt_set
from mirror.cognition.reflection.policy import DEFAULT_POLICY, ReflectionPolicy
from mirror.events.infrastructure import Infrastructure
from mirror.replay.history import SNAPSHOT_EVERY
from mirror.tracing import TraceSettings

PLACEMENTS = ("hosted", "dedicated")


@dataclass(frozen=True)
class RuntimeSettings:
    """Everything a conversation needs to run; built once at the edge (CLI, tests).

    ``infrastructure`` says how a process opens its bus and the logs (the one place adapters are
    chosen is whoever builds these settings). ``memory`` turns the memory stage on (any
    ``mode``). Its vectors come from ``embedder``: ``endpoint`` asks the chat server's
    ``/v1/embeddings`` (``llm.base_url``, the simulator included) for ``embedding_model``;
    ``minilm`` runs the offline model of the ``[local]`` extra.

    ``placement`` says where a live conversation runs (:mod:`mirror.actors.placement`):
    ``hosted`` (the default) in one of ``hosts`` conversation hosts (0: one per CPU of the Ray
    cluster when the first is placed), at most ``max_live_per_host`` live in each;
    ``dedicated`` in a Ray actor of its own, at most ``max_live_actors`` live per node.

    ``fair_share``: how each process shares its ``llm.max_concurrency`` model slots between
    tenants (weights, queue bounds: :mod:`mirror.cognition.fair_share`).
    """

    infrastructure: Infrastructure
    llm: LLMSettings
    mode: str = "full"
    prompts_dir: str | None = None
    talker_max_tokens: int = 1024
    thinker_max_tokens: int = 3000
    snapshot_every: int = SNAPSHOT_EVERY
    thinking_attempts: int = 3
    idempotency_window_s: float = 86_400.0
    """How long a turn's idempotency key answers a retry (a day): a retry after it is a new turn."""
    memory: bool = True
    reflection: bool = True
    """Insights after each turn and reflection when due (:mod:`mirror.cognition.reflection`);
    the stack's default for conversations whose first turn does not say."""
    reflection_policy: ReflectionPolicy = DEFAULT_POLICY
    """When the conversations reflect and what their decay step may change (the defaults: every
    20 interactions, a cooldown of 10, at most 6 an hour); ``mirror bench reflection`` lifts the
    hourly cap, a wall-clock guard its compressed hours would otherwise hit."""
    embedder: Literal["endpoint", "minilm"] = "endpoint"
    embedding_model: str = "text-embedding-3-small"
    passivate_after_s: float = 300.0
    placement: Literal["hosted", "dedicated"] = "hosted"
    hosts: int = 0
    max_live_actors: int = 256
    max_live_per_host: int = 5_000
    snapshot_commit_timeout_s: float = 10.0
    fair_share: FairShareSettings = FairShareSettings()
    metrics: bool = True
    """Prometheus metrics in each process (:mod:`mirror.metrics`); off, nothing is recorded or served."""
    traces: TraceSettings = TraceSettings()
    """OpenTelemetry traces in each process (:mod:`mirror.tracing`): off unless the edge's ``OTEL_*`` variables or ``--traces`` say."""
    warnings_log: str | None = None
    """A file the runtime's Ray processes (gateways, conversation hosts and actors) append their
    warnings and errors to (:mod:`mirror.actors.log_file`); ``mirror up`` relays it to its stderr."""

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement {self.placement!r} is not one of {PLACEMENTS}")
        if self.hosts < 0 or self.max_live_per_host < 1 or self.max_live_actors < 1:
            raise ValueError(f"hosts ({self.hosts}) must be ≥ 0 and max_live_per_host ({self.max_live_per_host}), "
                             f"max_live_actors ({self.max_live_actors}) ≥ 1")

    def shard_of(self, tenant: str) -> str:
        """The shard whose log holds ``tenant``'s events: every reader routes by it."""
        return self.infrastructure.shard_of(tenant)


def settings_prompts(settings: RuntimeSettings) -> PromptSet:
    """The prompt set the settings name (``prompts_dir``, else the default set), read from disk."""
    return load_prompt_set(settings.prompts_dir) if settings.prompts_dir else default_prompt_set()


__all__ = ["PLACEMENTS", "RuntimeSettings", "settings_prompts"]
