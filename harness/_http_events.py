"""Reading a conversation's whole event log through the public HTTP API, page by page.

For the harnesses that drive a stack as its clients do (``mirror chaos``, ``mirror eval
curate``): one read of ``GET /v1/conversations/{id}/events`` at the API's largest page. Callers
decide how long to wait for the log to catch up; an HTTP failure is raised as httpx raised it.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["EVENTS_PAGE", "read_events"]

EVENTS_PAGE = 1000
"""The events API's largest page."""


async def read_events(client: httpx.AsyncClient, conversation: str) -> list[dict[str, Any]]:
    """Every event the log holds for ``conversation``'s main branch, in seq order."""
    events: list[dict[str, Any]] = []
    after = 0
    while True:
        response = await client.get(f"/v1/conversations/{conversation}/events", params={"after": after, "limit": EVENTS_PAGE})
        response.raise_for_status()
        page = response.json()["events"]
        events += page
        if len(page) < EVENTS_PAGE:
            return events
        after = page[-1]["seq"]
