"""Idempotent turns at the edge: the headers a client names a request with, and the one that says
an answer was replayed.

A client (or a proxy, or an SDK's own retry) sends ``Idempotency-Key`` (or ``X-Idempotency-Key``,
for proxies that forward only ``x-`` headers) with a turn; the key goes into the
:class:`~mirror.cognition.turn.TurnRequest` and is recorded in the ``turn`` event, so a retry of
the same request — through any gateway, after a gateway died between the append and its
response, after the conversation's host restarted — is answered with the turn already appended
(``Idempotent-Replayed: true``), never a second one. The conversation decides
(:meth:`~mirror.actors.conversation.Conversation.turn`); this module only reads and writes headers.
"""

from __future__ import annotations

from collections.abc import Mapping

from mirror.actors.results import TurnResult

IDEMPOTENCY_HEADERS = ("Idempotency-Key", "X-Idempotency-Key")
"""The headers a request's idempotency key may come in, the first found wins."""
REPLAYED_HEADER = "Idempotent-Replayed"
"""Set to ``true`` on an answer that an earlier request with the same key produced (Stripe's name)."""


def idempotency_key(headers: Mapping[str, str]) -> str | None:
    """The request's idempotency key (``None``: it has none; an empty header counts as none)."""
    for name in IDEMPOTENCY_HEADERS:
        value = headers.get(name)
        if value:
            return value
    return None


def replayed_headers(result: TurnResult) -> dict[str, str]:
    """The headers that say an answer was replayed (none for a new turn)."""
    return {REPLAYED_HEADER: "true"} if result.replayed else {}


__all__ = ["IDEMPOTENCY_HEADERS", "REPLAYED_HEADER", "idempotency_key", "replayed_headers"]
