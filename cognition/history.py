"""The Thinker's view of the conversation, bounded in tokens (MIRROR's truncation rule).

Keep every system message and the first user message; then the most recent messages — 10,
else 6, else 4, else 2 — the largest tail that still fits the budget. When not even the last
two fit, they are kept anyway: the newest exchange is what the Thinker must think about.
"""

from __future__ import annotations

from collections.abc import Sequence

from mirror.projections.monologue import estimate_tokens

from .llm import ChatMessage

THINKER_HISTORY_TOKENS = 20_000
TAIL_SIZES = (10, 6, 4, 2)


def message_tokens(messages: Sequence[ChatMessage]) -> int:
    return sum(estimate_tokens(message.content) for message in messages)


def bound_history(
    messages: Sequence[ChatMessage], budget: int = THINKER_HISTORY_TOKENS, tails: Sequence[int] = TAIL_SIZES
) -> tuple[ChatMessage, ...]:
    """``messages`` cut to ``budget`` estimated tokens by the rule above, order preserved."""
    if message_tokens(messages) <= budget:
        return tuple(messages)
    system = [index for index, message in enumerate(messages) if message.role == "system"]
    first_user = next((index for index, message in enumerate(messages) if message.role == "user"), None)
    pinned = set(system) | ({first_user} if first_user is not None else set())
    others = [index for index in range(len(messages)) if index not in pinned]
    pinned_tokens = message_tokens([messages[index] for index in pinned])
    chosen: list[int] = others[-min(tails) :]
    for size in tails:
        tail = others[-size:]
        if pinned_tokens + message_tokens([messages[index] for index in tail]) <= budget:
            chosen = tail
            break
    keep = sorted(pinned | set(chosen))
    return tuple(messages[index] for index in keep)


__all__ = ["TAIL_SIZES", "THINKER_HISTORY_TOKENS", "bound_history", "message_tokens"]
