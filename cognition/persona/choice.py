"""A conversation's choice of mind: ``mirror`` (the Talker/Thinker) or ``persona`` (a character).

Made at the edge (the gateway, a test, the CLI) and handed with a turn to the conversation, which
records it in its first events (a ``persona`` event for a character) and refuses another later.
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import Persona
from .turn_path import PLAN_ORDERS

MINDS = ("mirror", "persona")
MAX_USER_NAME = 100
"""A user's name is a name, not a prompt: longer is refused."""


class InvalidMindChoice(ValueError):
    """A mind choice that cannot be made: an unknown mind or order, a persona without a card."""


@dataclass(frozen=True)
class MindChoice:
    """``mind``; for ``persona``, the character, the order of plan and appraisal, and the name of
    the user it talks to (what the card's ``{{user}}`` becomes; ``None``: not given —
    :data:`~mirror.cognition.persona.macros.DEFAULT_USER_NAME` for a new conversation, and no
    conflict with the name an existing one recorded)."""

    mind: str = "mirror"
    persona: Persona | None = None
    order: str = "appraisal_first"
    user_name: str | None = None

    def __post_init__(self) -> None:
        if self.mind not in MINDS:
            raise InvalidMindChoice(f"unknown mind {self.mind!r}; choose one of {', '.join(MINDS)}")
        if self.order not in PLAN_ORDERS:
            raise InvalidMindChoice(f"unknown order {self.order!r}; choose one of {', '.join(PLAN_ORDERS)}")
        if self.mind == "persona" and self.persona is None:
            raise InvalidMindChoice("the persona mind needs a persona (a card, or a name from the persona store)")
        if self.mind == "mirror" and self.persona is not None:
            raise InvalidMindChoice("a persona is given, but the mind is mirror: ask for mind=persona")
        if self.user_name is not None:
            if self.mind != "persona":
                raise InvalidMindChoice("user_name names who a persona talks to: it needs mind=persona")
            if not isinstance(self.user_name, str) or not self.user_name.strip() or len(self.user_name) > MAX_USER_NAME:
                raise InvalidMindChoice(f"user_name must be 1 to {MAX_USER_NAME} characters, not only spaces; "
                                        f"got {self.user_name!r:.80}")


__all__ = ["MAX_USER_NAME", "MINDS", "InvalidMindChoice", "MindChoice"]
