"""Retention: the shard's ingester forgets the conversations its tenants' policies no longer keep.

A tenant's policy (``mirror tenants retention TENANT --idle-days N``) is kept in the tenants file's
``retention`` section (written by :mod:`mirror.gateway.tenants`, read here on every round, so a
changed policy applies at the next one). A conversation whose newest event, on any branch, is
older than ``N`` days is forgotten through the one erasure path (:meth:`Ingester.forget
<mirror.events.duckdb.ingester.Ingester.forget>`: tombstone, stream erased, rows deleted, the file
copied fresh), exactly as a ``DELETE`` would.

Why the ingester runs it: it owns the log, so "which conversations are idle" is a query on its own
file, not a round trip; there is exactly one per shard, so no two sweepers race over the same
conversations (gateways are many); and forgetting already runs there. Before each round it waits
until it has committed everything the stream held when the round began, so a conversation with a
turn still in the stream is not judged by the log's older view of it.

The clock is injected (``clock``): tests move it forward instead of waiting days.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirror.events.duckdb.log import DuckDBEventLog

log = logging.getLogger(__name__)

__all__ = ["DAY_S", "RetentionSettings", "RetentionSweeper", "Swept", "idle_days_by_tenant"]

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    tenants_file: str | None = None
    """The tenants file whose ``retention`` section holds the policies; None: no sweeper runs."""
    interval_s: float = 3600.0
    """Between rounds. A conversation may outlive its policy by up to this much."""
    catch_up_timeout_s: float = 60.0
    """How long a round waits for the ingester to commit what the stream held; past it, the round is skipped."""


@dataclass(frozen=True, slots=True)
class Swept:
    """One conversation a round forgot, and why."""

    tenant: str
    conversation: str
    idle_days: float
    policy_days: int


def idle_days_by_tenant(tenants_file: str | Path) -> dict[str, int]:
    """Each tenant's ``idle_days`` from the tenants file (tenants without one left out); {} when
    there is no file. A file that cannot be read is an error the round logs, not a policy of none."""
    try:
        text = Path(tenants_file).read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    document: Any = json.loads(text)
    retention = document.get("retention", {}) if isinstance(document, dict) else {}
    found = {}
    for tenant, policy in retention.items():
        days = policy.get("idle_days")
        if isinstance(days, int) and not isinstance(days, bool) and days >= 1:
            found[tenant] = days
        else:
            log.warning("retention: tenant %s has an invalid idle_days %r in %s; its conversations are kept",
                        tenant, days, tenants_file)
    return found


class RetentionSweeper:
    """Rounds of retention over one shard's log; :meth:`run_round` is one, :meth:`run` loops them."""

    def __init__(self, event_log: DuckDBEventLog, forget: Callable[[str, str], Awaitable[dict[str, Any]]],
                 caught_up: Callable[[float], Awaitable[bool]], settings: RetentionSettings,
                 clock: Callable[[], float] = time.time) -> None:
        self.log = event_log
        self._forget = forget
        self._caught_up = caught_up
        self.settings = settings
        self.clock = clock
        self.rounds = 0
        """Rounds finished since the ingester started (tests wait on it)."""
        self.swept: list[Swept] = []
        """Every conversation forgotten by retention since the ingester started."""

    async def run_round(self) -> list[Swept]:
        """Forget every conversation idle beyond its tenant's policy, as of ``clock()``."""
        assert self.settings.tenants_file is not None, "a sweeper runs only with a tenants file"
        policies = idle_days_by_tenant(self.settings.tenants_file)
        swept: list[Swept] = []
        if policies and not await self._caught_up(self.settings.catch_up_timeout_s):
            log.warning("retention: the ingester did not catch up with the stream within %.0f s; round skipped",
                        self.settings.catch_up_timeout_s)
            return swept
        now = self.clock()
        for tenant, days in sorted(policies.items()):
            for summary in await self.log.conversations(tenant):  # forgotten ones have no rows left
                idle = (now - summary.updated_at) / DAY_S
                if idle <= days or await self.log.tombstone(tenant, summary.conversation) is not None:
                    continue  # kept, or being forgotten already (its rows go when that sweep ends)
                tombstone = await self._forget(tenant, summary.conversation)
                swept.append(Swept(tenant, summary.conversation, idle, days))
                log.info("retention: forgetting %s/%s (%d event(s)): idle %.1f days, tenant's policy %d days",
                         tenant, summary.conversation, tombstone["events"], idle, days)
        self.swept.extend(swept)
        self.rounds += 1
        log.info("retention round %d: %d conversation(s) forgotten over %d tenant(s) with a policy",
                 self.rounds, len(swept), len(policies))
        return swept

    async def run(self, stopping: asyncio.Event) -> None:
        """A round, then one every ``interval_s``, until ``stopping``; a failed round is logged and retried."""
        while not stopping.is_set():
            try:
                await self.run_round()
            except Exception:
                log.exception("retention round failed; trying again in %.0f s", self.settings.interval_s)
            try:
                await asyncio.wait_for(stopping.wait(), self.settings.interval_s)
            except TimeoutError:
                pass
