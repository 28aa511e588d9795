"""The digest of a transcript: a branch's turns, or a client's exchanges, as one short string.

Chat completions resend the whole conversation each turn, and most of the time the transcript is
exactly the turns of ``main`` (issue 38). Comparing it text by text means reading the branch's
turns from the log; comparing digests does not: the gateway digests the request's exchanges, the
conversation (which holds its own turns) digests its branch, and the two strings match exactly
when the exchanges do, compared as the alignment compares them (without surrounding whitespace).

The digest is a chain, one link per exchange (``digest(turns + [t]) = link(digest(turns), t)``),
so the conversation extends it by its new turns instead of digesting its whole history again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["EMPTY", "digest_of", "link"]

EMPTY = ""
"""The digest of no exchanges."""


def link(digest: str, user_message: str, reply: str) -> str:
    """``digest`` extended by one exchange (each text length-prefixed, so no two lists collide by where they split)."""
    user, said = user_message.strip(), reply.strip()
    return hashlib.sha256(f"{digest}\0{len(user)}:{user}\0{len(said)}:{said}".encode()).hexdigest()


def digest_of(exchanges: Iterable[tuple[str, str]], digest: str = EMPTY) -> str:
    """The digest of ``exchanges`` (user message, reply), after ``digest``'s."""
    for user_message, reply in exchanges:
        digest = link(digest, user_message, reply)
    return digest
