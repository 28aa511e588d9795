"""A bench's turn as a real client sends it: a refusal for overload is waited out, not an error.

Mirror's fair share answers a Talker call it cannot queue with 503 (the stack is serving all it
can) or 429 (the tenant's share is used up), both with ``Retry-After`` (:mod:`mirror.cognition.fair_share`,
:mod:`mirror.gateway.slots`); a dependency that is behind (the log's owner, the broker) is a 503
with ``Retry-After`` too. The ``openai`` SDKs retry all of them twice by default, after the
``Retry-After`` the server sent; a bench that counted such an answer as a failed turn would report
the product's overload protection as a bug. So the benches that drive many conversations at once
retry the same way and count the answers apart: ``refusals`` (the fair share's, body ``error``
``AdmissionRefused``), ``unavailable`` (any other 429/503 with ``Retry-After``); a turn still
refused after the retries is an error, as the SDK would raise it to its caller.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

MAX_RETRIES = 2
"""Retries after a refusal, as the ``openai`` SDKs' default ``max_retries``."""
MAX_RETRY_AFTER_S = 120.0
"""The longest ``Retry-After`` waited out (longer: the SDK falls back to its own backoff; here, this)."""
REFUSED = frozenset({429, 503})


@dataclass(slots=True)
class Refusals:
    """Refusals a bench met: answers 429/503 with ``Retry-After``, and the seconds waited on them."""

    refusals: int = 0
    """The fair share's refusals (429/503, ``AdmissionRefused``)."""
    unavailable: int = 0
    """Other answers to wait out (a 503 for a dependency that is behind: the log's owner, the broker)."""
    refused_turns: int = 0
    """Turns refused at least once (answered after a retry, or an error after the last)."""
    waited_s: float = 0.0

    def figures(self) -> dict[str, Any]:
        return {"refusals": self.refusals, "unavailable": self.unavailable, "refused_turns": self.refused_turns,
                "refusals_waited_s": round(self.waited_s, 1)}

    def count(self, response: httpx.Response) -> None:
        try:
            overload = response.json().get("error") == "AdmissionRefused"
        except ValueError:
            overload = False
        if overload:
            self.refusals += 1
        else:
            self.unavailable += 1


def retry_after_s(response: httpx.Response) -> float | None:
    """The seconds a refusal asks to wait (None: not a refusal for overload, or no ``Retry-After``)."""
    if response.status_code not in REFUSED:
        return None
    try:
        return min(MAX_RETRY_AFTER_S, max(0.0, float(response.headers["retry-after"])))
    except (KeyError, ValueError):
        return None


async def post_retrying(client: httpx.AsyncClient, path: str, body: dict[str, Any], refusals: Refusals) -> httpx.Response:
    """``POST path`` with ``body``, a refusal waited out and sent again (at most :data:`MAX_RETRIES`
    times); the last response, whatever its status."""
    refused = False
    for attempt in range(MAX_RETRIES + 1):
        response = await client.post(path, json=body)
        wait = retry_after_s(response)
        if wait is None:
            break
        refusals.count(response)
        if not refused:
            refused = True
            refusals.refused_turns += 1
        if attempt == MAX_RETRIES:
            break
        refusals.waited_s += wait
        await asyncio.sleep(wait)
    return response


__all__ = ["MAX_RETRIES", "Refusals", "post_retrying", "retry_after_s"]
