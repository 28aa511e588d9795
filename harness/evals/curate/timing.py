"""How a person paces a dialogue (``--timing human``): reading the reply, then typing the next message.

Reading takes words(reply) / 250 words a minute × U(0.85, 1.15); typing the next message takes
words(message) / 40 words a minute × U(0.8, 1.2). The pause before each turn after the first is
their sum times ``time_scale`` (1.0 is a person's pace; 0.01 makes a simulator run quick), so the
Thinker gets the time a person would give it. Seeded per conversation: a re-run waits the same.
``--timing sync`` waits for thinking instead (``?sync=true`` on every turn), as the papers' benchmark did.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

__all__ = ["READING_SPREAD", "READING_WPM", "TYPING_SPREAD", "TYPING_WPM", "HumanPacing", "words"]

READING_WPM = 250.0
READING_SPREAD = 0.15
TYPING_WPM = 40.0
TYPING_SPREAD = 0.20
_WORD = re.compile(r"\S+")


def words(text: str) -> int:
    return len(_WORD.findall(text))


@dataclass
class HumanPacing:
    """The pauses of one simulated person in one conversation, drawn from ``Random(f"{seed}|{conversation}")``."""

    seed: int
    conversation: str
    time_scale: float = 1.0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.time_scale < 0:
            raise ValueError(f"time_scale {self.time_scale} must not be negative")
        self._rng = random.Random(f"{self.seed}|{self.conversation}")

    def reading_s(self, reply: str) -> float:
        return words(reply) / READING_WPM * 60 * self._rng.uniform(1 - READING_SPREAD, 1 + READING_SPREAD)

    def typing_s(self, message: str) -> float:
        return words(message) / TYPING_WPM * 60 * self._rng.uniform(1 - TYPING_SPREAD, 1 + TYPING_SPREAD)

    def pause_s(self, reply: str, next_message: str) -> float:
        """Seconds between receiving ``reply`` and sending ``next_message`` (scaled)."""
        return (self.reading_s(reply) + self.typing_s(next_message)) * self.time_scale
