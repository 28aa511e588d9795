"""The gateway's configuration: one frozen dataclass, built once by whoever starts a gateway.

It crosses into Ray (each :class:`~mirror.gateway.actor.GatewayActor` gets it as a
constructor argument), so it holds plain values only.

The gateway embeds one thing only: the query of ``GET …/memory`` (what the Talker would
recall). ``embedder`` names that endpoint; left ``None`` it is the runtime LLM's own server and
model (the simulator and most local servers answer ``/v1/embeddings`` there), asked with short
timeouts and one retry, so an embedder that is down is a prompt 503, never a hanging request.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings

__all__ = [
    "DEFAULT_EMBED_RETRIES", "DEFAULT_EMBED_TIMEOUT_S", "DEFAULT_MAX_FINISHED_JOBS", "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_READ_SETTLE_S", "GatewaySettings", "MAX_READ_SETTLE_S",
]

DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024
DEFAULT_MAX_FINISHED_JOBS = 1_000
DEFAULT_EMBED_TIMEOUT_S = 5.0
"""Per attempt, for the derived embedder: one short query, so seconds mean the server is in trouble."""
DEFAULT_EMBED_RETRIES = 1
DEFAULT_READ_SETTLE_S = 5.0
"""How long a read waits for the log to commit what the bus acknowledged (read-your-writes). The
ingester commits ~50 ms after an append at a trickle; seconds behind means it is in trouble."""
MAX_READ_SETTLE_S = 5.0
"""The longest wait the log's owner grants one request (a tenant's list waits there)."""


@dataclass(frozen=True)
class GatewaySettings:
    runtime: RuntimeSettings
    tenants_file: str
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    actor_timeout_s: float = 300.0
    max_finished_jobs: int = DEFAULT_MAX_FINISHED_JOBS
    """Finished recompute jobs whose final status a gateway remembers; the oldest go first.
    A gateway process lives for weeks, and each record holds a whole report."""
    embedder: LLMSettings | None = None
    """The ``/v1/embeddings`` endpoint for memory queries (default: see :meth:`embedder_settings`)."""
    warnings_log: str | None = None
    """Where this gateway's processes append their warnings; None: the runtime's ``warnings_log``.
    ``mirror node`` gives its own (its machine's file, relayed to its stderr) while its runtime
    settings stay the head's to the byte (they name the conversation hosts)."""
    read_settle_timeout_s: float = DEFAULT_READ_SETTLE_S
    """A read of a conversation first waits this long at most for the log to hold everything the
    bus acknowledged for it; past it the read is a 503 with ``Retry-After`` (docs/http-api.md,
    "Read your writes")."""

    def __post_init__(self) -> None:
        if self.max_finished_jobs < 1:
            raise ValueError(f"max_finished_jobs is {self.max_finished_jobs}; it must be at least 1")
        if not 0 < self.read_settle_timeout_s <= MAX_READ_SETTLE_S:
            raise ValueError(f"read_settle_timeout_s is {self.read_settle_timeout_s}; it must be above 0 and at "
                             f"most {MAX_READ_SETTLE_S:g} s")

    def embedder_settings(self) -> LLMSettings:
        """``embedder``, or the runtime LLM's server with the conversations' embedding model (the
        one the Talker's recall embeds with, so the memory API answers what the Talker got), with
        short timeouts and one retry."""
        if self.embedder is not None:
            return self.embedder
        return replace(self.runtime.llm, model=self.runtime.embedding_model, timeout_s=DEFAULT_EMBED_TIMEOUT_S,
                       connect_timeout_s=min(self.runtime.llm.connect_timeout_s, DEFAULT_EMBED_TIMEOUT_S),
                       max_retries=DEFAULT_EMBED_RETRIES, backoff_max_s=1.0, max_concurrency=4)
