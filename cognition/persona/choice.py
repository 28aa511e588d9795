"""A conversation's choice of mind: ``mirror`` (the Talker/Thinker) or ``persona`` (a character).

Made at the edge (the gateway, a test, the CLI) and handed with a turn to the conversation, which
records it in its first events (a ``persona`` event for a character) and refuses another later.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Persona
from .turn_path import PLAN_ORDERS

MINDS = ("mirror", "persona")


class InvalidMindChoice(ValueError):
    """A mind choice that cannot be made: an unknown mind or order, a persona without a card."""


@dataclass(frozen=True)
class MindChoice:
    """``mind``; for ``persona``, the character and the order of plan and appraisal."""

    mind: str = "mirror"
    persona: Persona | None = None
    order: str = "appraisal_first"

    def __post_init__(self) -> None:
        if self.mind not in MINDS:
            raise InvalidMindChoice(f"unknown mind {self.mind!r}; choose one of {', '.join(MINDS)}")
        if self.order not in PLAN_ORDERS:
            raise InvalidMindChoice(f"unknown order {self.order!r}; choose one of {', '.join(PLAN_ORDERS)}")
        if self.mind == "persona" and self.persona is None:
            raise InvalidMindChoice("the persona mind needs a persona (a card, or a name from the persona store)")
        if self.mind == "mirror" and self.persona is not None:
            raise InvalidMindChoice("a persona is given, but the mind is mirror: ask for mind=persona")


__all__ = ["MINDS", "InvalidMindChoice", "MindChoice"]
