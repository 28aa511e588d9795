"""The Inner Monologue Manager's own history, bounded by estimated tokens.

The monologue sees its past thoughts on every call, so the history must stay within a token
budget or the prompt grows with the conversation. Rule (from the MIRROR paper): when the
history exceeds the high-water mark (90% of 10,000 tokens by default) the oldest entries are
dropped until it is at or under the low-water mark (80%).

Invariant after every append: ``history_tokens(history) * 100 <= budget * trim_above_percent``;
and if a cut happened, ``<= budget * trim_to_percent``. An entry larger than the low-water
mark on its own is dropped too: the latest threads are kept separately in the state, so the
bound holds without losing what the Talker needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def estimate_tokens(text: str) -> int:
    """A provider-independent token estimate: one token per four characters, rounded up."""
    return math.ceil(len(text) / 4)


@dataclass(frozen=True, slots=True)
class Threads:
    """The three parallel first-person thought streams of one monologue call."""

    reasoning: str
    memory: str
    goal: str

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.reasoning) + estimate_tokens(self.memory) + estimate_tokens(self.goal)


@dataclass(frozen=True, slots=True)
class MonologueEntry:
    """One past monologue output, with the seq of the event that recorded it."""

    seq: int
    threads: Threads

    @property
    def tokens(self) -> int:
        return self.threads.tokens


def history_tokens(history: tuple[MonologueEntry, ...]) -> int:
    return sum(entry.tokens for entry in history)


def append_bounded(
    history: tuple[MonologueEntry, ...],
    total_tokens: int,
    entry: MonologueEntry,
    *,
    budget: int,
    trim_above_percent: int,
    trim_to_percent: int,
) -> tuple[tuple[MonologueEntry, ...], int]:
    """``history`` with ``entry`` appended and cut oldest-first if over the high-water mark.

    ``total_tokens`` is the caller's running total for ``history`` (kept so an append is
    O(1) unless it cuts); the new total is returned with the new history. Percentages are
    compared in integers, so the marks are exact for any budget.
    """
    history = (*history, entry)
    total_tokens += entry.tokens
    if total_tokens * 100 <= budget * trim_above_percent:
        return history, total_tokens
    start = 0
    while start < len(history) and total_tokens * 100 > budget * trim_to_percent:
        total_tokens -= history[start].tokens
        start += 1
    return history[start:], total_tokens


__all__ = ["estimate_tokens", "Threads", "MonologueEntry", "history_tokens", "append_bounded"]
