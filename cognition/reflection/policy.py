"""The numbers reflection runs by: one frozen, validated :class:`ReflectionPolicy`.

When it may run (every ``every`` interactions, or on an event trigger; never within
``cooldown`` interactions of the last one, forced included; at most ``max_per_hour`` an hour),
which beliefs its decay step asks about (not touched for ``decay_after_turns`` turns, oldest
first, at most ``max_decay_candidates``: the prompt stays bounded however long the
conversation), the rules that overrule a proposed FORGET (and, for protected beliefs, a
proposed DECAY), and what a consolidated portrait must pass (``min_chars``,
``min_length_ratio``, ``max_chars``) and the health check's threshold (``warn_unique_ratio``).

The defaults follow Sonality's design (``DESIGN.md`` §3) and issue 23. Everything here is read
from the log's state only (turn counts, counters, event timestamps): the same log gives the
same decisions, live, on replay and on recompute.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from mirror.cognition.errors import ReflectionPolicyError

PROTECTED_TERMS: tuple[str, ...] = (
    "allerg", "anaphyla", "epipen", "epi-pen", "medication", "medicine", "insulin", "diabet", "asthma",
    "inhaler", "pregnan", "seizure", "epilep", "intoleran", "celiac", "coeliac", "heart condition",
)
"""Safety constraints, matched as lower-case substrings of a belief's statement (``allerg``
covers allergy, allergic, allergies): a belief that names one is never forgotten nor decayed."""

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class ReflectionPolicy:
    """When reflection runs and what it may change (see the module docstring)."""

    every: int = 20
    """A periodic reflection once this many interactions (turns) passed since the last one."""
    cooldown: int = 10
    """Never within this many interactions of the last reflection (a forced one included)."""
    max_per_hour: int = 6
    """The runaway guard: reflections that ran within the hour before the newest event."""
    review_trigger: int = 1
    """Reflect (outside the cooldown) once this many contradiction reviews opened since the last one; 0: never."""
    belief_burst: int = 8
    """Reflect (outside the cooldown) once this many beliefs are new since the last one; 0: never."""
    decay_after_turns: int = 20
    """A belief not asserted, reinforced or supported for this many turns is a decay candidate."""
    max_decay_candidates: int = 20
    recent_recall_turns: int = 20
    """A belief recalled within this many turns is never forgotten (rule ``recently_recalled``)."""
    strong_confidence: float = 0.85
    """A belief at or above this confidence is never forgotten (rule ``strong``)."""
    protected_memory_types: tuple[str, ...] = ()
    """Memory types never forgotten nor decayed (rule ``protected``), besides :attr:`protected_terms`."""
    protected_terms: tuple[str, ...] = PROTECTED_TERMS
    max_episodes: int = 10
    """The recent turns the consolidation is given."""
    min_chars: int = 30
    min_length_ratio: float = 0.6
    """A new portrait shorter than this share of the old one is rejected (the first one: any length)."""
    max_chars: int = 6000
    """A new portrait longer than this is rejected: no runaway context."""
    warn_unique_ratio: float = 0.4
    """The health check warns below this ratio of unique words to words."""

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in ("protected_memory_types", "protected_terms"):
                if not isinstance(value, tuple) or not all(isinstance(term, str) and term for term in value):
                    raise ReflectionPolicyError(item.name, value, "a tuple of non-empty strings")
            elif item.name in ("strong_confidence", "min_length_ratio", "warn_unique_ratio"):
                if not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise ReflectionPolicyError(item.name, value, "a number in [0, 1]")
            elif type(value) is not int or value < 0:
                raise ReflectionPolicyError(item.name, value, "a whole number >= 0")
        for name in ("every", "max_per_hour", "max_episodes", "max_chars"):
            if getattr(self, name) < 1:
                raise ReflectionPolicyError(name, getattr(self, name), "a whole number >= 1")
        if self.min_chars > self.max_chars:
            raise ReflectionPolicyError("min_chars", self.min_chars, f"at most max_chars ({self.max_chars})")


DEFAULT_POLICY = ReflectionPolicy()


__all__ = ["DEFAULT_POLICY", "PROTECTED_TERMS", "ReflectionPolicy", "SECONDS_PER_HOUR"]
