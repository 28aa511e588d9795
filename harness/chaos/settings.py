"""The settings of one chaos run, built once by the CLI and validated before anything starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mirror.harness.errors import HarnessError

__all__ = ["KILL_KINDS", "ChaosOptionError", "ChaosSettings", "parse_kill_kinds"]

KILL_KINDS = ("nats", "ingester", "actor", "gateway")
"""What ``--kill`` may name: the nats-server, an ingester actor, a conversation actor or host, a gateway actor."""


class ChaosOptionError(HarnessError, ValueError):
    """An option of ``mirror chaos`` is invalid; nothing was started (exit status 2)."""


def parse_kill_kinds(text: str) -> tuple[str, ...]:
    """``"nats,actor"`` → ``("nats", "actor")``, in the given order (the round robin's); empty → ``()``."""
    kinds = tuple(part.strip().lower() for part in text.split(",") if part.strip())
    unknown = [kind for kind in kinds if kind not in KILL_KINDS]
    if unknown:
        raise ChaosOptionError(f"--kill {text!r}: unknown kind {', '.join(map(repr, unknown))}; "
                               f"the valid kinds are {', '.join(KILL_KINDS)} (comma-separated)")
    if len(set(kinds)) != len(kinds):
        raise ChaosOptionError(f"--kill {text!r} names a kind twice; name each of {', '.join(KILL_KINDS)} at most once")
    return kinds


@dataclass(frozen=True)
class ChaosSettings:
    url: str
    token: str
    conversations: int = 6
    turns: int = 8
    kill: tuple[str, ...] = ()
    every_s: float = 3.0
    data_dir: Path | None = None
    """Where the local stack's ``stack.json`` is; None or no matching stack: drive and check only."""
    seed: int = 0
    """Chooses which process of a kind is killed when there are several (hosts, gateways)."""
    timeout_s: float = 600.0
    """The drive's deadline: turns not acknowledged by then are counted as unacknowledged."""
    request_timeout_s: float = 30.0
    retry_pause_s: float = 0.2
    """Pause after a failed turn before the next attempt (a new message)."""
    catch_up_s: float = 60.0
    """How long the checker waits for the log to hold every acknowledged turn, and for the last turn's answer."""
    sample_every_s: float = 0.25
    pause_s: float | None = None
    """A user's pause before each turn; None: when killing, the T turns are spread over a whole
    round of kills plus one interval (``(kinds + 1) × every_s / turns``) so every kind is killed
    while turns are still being sent, else 0 (turns back to back)."""

    @property
    def turn_pause_s(self) -> float:
        if self.pause_s is not None:
            return self.pause_s
        return (len(self.kill) + 1) * self.every_s / self.turns if self.kill else 0.0

    def __post_init__(self) -> None:
        if self.conversations < 1 or self.turns < 1:
            raise ChaosOptionError("--conversations and --turns must be at least 1")
        if self.every_s <= 0:
            raise ChaosOptionError(f"--every {self.every_s}: the kill interval must be positive (seconds)")
        if self.pause_s is not None and self.pause_s < 0:
            raise ChaosOptionError(f"--pause {self.pause_s}: a pause cannot be negative")
        unknown = [kind for kind in self.kill if kind not in KILL_KINDS]
        if unknown:
            raise ChaosOptionError(f"unknown kill kind {unknown}; the valid kinds are {', '.join(KILL_KINDS)}")
