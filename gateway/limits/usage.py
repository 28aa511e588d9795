"""A tenant's use of its limits, as one record, and the pure steps that change it.

One record per tenant (key :func:`usage_key`) in the deployment's shared counters
(:mod:`mirror.events.counters`), changed only by the steps here, each run under the port's
compare-and-set (so a step may run twice: they are pure, time passed in). One record, not one per
limit, so admitting a turn is one read-modify-write however many limits the tenant has.

- ``requests``: of the UTC minute ``minute`` (a record of an older minute counts from 0; a record
  of a *later* minute — another gateway's clock a little ahead — is kept, never rolled back);
- ``tokens``: the Talker's model tokens of the UTC day ``day``, added after each turn;
- ``turns``: the running turns (of a tenant with a ``concurrent_turns`` limit), each a lease ``holder -> expires_at``: its gateway renews it
  while the turn runs (every :data:`LEASE_S` / 3) and removes it when the turn ends, so the slots
  of a gateway that crashed are free again :data:`LEASE_S` after its last renewal;
- ``live``: ``conversation -> time of its last turn``, of the last passivation window: the
  conversations that are live, or would be were none passivated early (no cheap exact count of
  a tenant's live actors exists across hosts; this one is the upper bound the limit needs).

A refusal changes nothing (a refused request is not counted against the minute).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

from mirror.gateway.errors import LimitReached, TokenBudgetSpent
from mirror.gateway.tenants import TenantLimits

__all__ = [
    "LEASE_S", "Lease", "Usage", "charge", "lease", "ratelimit_headers", "release", "renew", "reset_duration", "usage_key",
]

LEASE_S = 30.0
"""How long a running turn's slot is held without a renewal: what a crashed gateway's slots outlive it by."""
MINUTE_S = 60
DAY_S = 86_400


def usage_key(tenant: str) -> str:
    return f"use.{tenant}"


@dataclass(frozen=True)
class Usage:
    """A tenant's record (see the module docstring)."""

    minute: int = 0
    requests: int = 0
    day: int = 0
    tokens: int = 0
    turns: dict[str, float] = field(default_factory=dict)
    live: dict[str, float] = field(default_factory=dict)
    live_window_s: float = 0.0
    """The passivation window ``live`` was last pruned with (so a reader elsewhere, the CLI, can count alike)."""

    @classmethod
    def decode(cls, data: bytes | None) -> Usage:
        if not data:
            return cls()
        values: dict[str, Any] = json.loads(data)
        return cls(**{name: values[name] for name in ("minute", "requests", "day", "tokens", "turns", "live", "live_window_s")
                      if name in values})

    def encode(self) -> bytes:
        return json.dumps({"minute": self.minute, "requests": self.requests, "day": self.day, "tokens": self.tokens,
                           "turns": self.turns, "live": self.live, "live_window_s": self.live_window_s}, separators=(",", ":")).encode()

    def current(self, now: float, live_window_s: float) -> Usage:
        """As of ``now``: counts of a past minute or day at 0, expired leases and stale conversations gone."""
        minute, day = int(now // MINUTE_S), int(now // DAY_S)
        return Usage(max(minute, self.minute), self.requests if self.minute >= minute else 0,
                     max(day, self.day), self.tokens if self.day >= day else 0,
                     {holder: until for holder, until in self.turns.items() if until > now},
                     {name: last for name, last in self.live.items() if last > now - live_window_s}, live_window_s)


def reset_duration(seconds: float) -> str:
    """``x-ratelimit-reset-*``'s form, as OpenAI writes it: ``1s``, ``42s``, ``6m0s``, ``3h2m1s``."""
    whole = max(1, math.ceil(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def ratelimit_headers(limits: TenantLimits, usage: Usage, now: float, turn: bool, *, unused_requests: int = 0,
             idle_slots: int = 0) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of the limits that apply: requests always; on turns the tokens,
    the running turns and the live conversations. ``unused_requests`` and ``idle_slots``: what
    this gateway has leased and not used, which the record counts as used."""
    headers: dict[str, str] = {}
    if limits.requests_per_minute is not None:
        used = usage.requests - unused_requests
        headers |= {"x-ratelimit-limit-requests": str(limits.requests_per_minute),
                    "x-ratelimit-remaining-requests": str(max(0, limits.requests_per_minute - used)),
                    "x-ratelimit-reset-requests": reset_duration((usage.minute + 1) * MINUTE_S - now)}
    if not turn:
        return headers
    if limits.tokens_per_day is not None:
        headers |= {"x-ratelimit-limit-tokens": str(limits.tokens_per_day),
                    "x-ratelimit-remaining-tokens": str(max(0, limits.tokens_per_day - usage.tokens)),
                    "x-ratelimit-reset-tokens": reset_duration((usage.day + 1) * DAY_S - now)}
    if limits.concurrent_turns is not None:
        running = len(usage.turns) - idle_slots
        headers |= {"x-ratelimit-limit-concurrent-turns": str(limits.concurrent_turns),
                    "x-ratelimit-remaining-concurrent-turns": str(max(0, limits.concurrent_turns - running))}
    if limits.live_conversations is not None:
        headers |= {"x-ratelimit-limit-live-conversations": str(limits.live_conversations),
                    "x-ratelimit-remaining-live-conversations": str(max(0, limits.live_conversations - len(usage.live)))}
    return headers


def _wait(seconds: float) -> int:
    return max(1, math.ceil(seconds))


@dataclass(frozen=True)
class Lease:
    """What one read-modify-write took for a gateway: ``requests`` of the minute ``minute`` (0: none
    asked), a turn's slot (``holder``, when asked), the conversation marked live; and the record
    as written (``usage``), which the gateway decides its next requests on until it writes again."""

    requests: int
    minute: int
    holder: str | None
    usage: Usage


def lease(data: bytes | None, *, tenant: str, limits: TenantLimits, now: float, live_window_s: float, turn: bool,
          requests: int, holder: str | None, conversation: str | None) -> tuple[bytes | None, Lease | LimitReached]:
    """The step of a gateway that cannot admit a request from what it holds: take up to
    ``requests`` of the minute's (at least one, or refuse), a slot as ``holder``, ``conversation``
    marked live — or refuse at the first limit it would pass: the day's tokens first (they need
    the longest wait), then the minute's requests, the running turns, the live conversations."""
    usage = Usage.decode(data).current(now, live_window_s)
    headers = ratelimit_headers(limits, usage, now, turn)
    budget = limits.tokens_per_day
    if turn and budget is not None and usage.tokens >= budget:
        return None, TokenBudgetSpent(tenant, "tokens_per_day", budget, _wait((usage.day + 1) * DAY_S - now), headers,
                                      f"{usage.tokens} tokens used today (UTC)")
    rpm = limits.requests_per_minute
    granted = 0
    if requests and rpm is not None:
        granted = min(requests, rpm - usage.requests)
        if granted < 1:
            return None, LimitReached(tenant, "requests_per_minute", rpm, _wait((usage.minute + 1) * MINUTE_S - now),
                                      headers, f"{usage.requests} requests this minute")
    concurrent = limits.concurrent_turns
    if holder is not None and concurrent is not None and len(usage.turns) >= concurrent:
        return None, LimitReached(tenant, "concurrent_turns", concurrent, 1, headers, f"{len(usage.turns)} turns running")
    live = limits.live_conversations
    if conversation is not None and live is not None and conversation not in usage.live and len(usage.live) >= live:
        oldest = min(usage.live.values())
        return None, LimitReached(tenant, "live_conversations", live, _wait(oldest + live_window_s - now), headers,
                                  f"{len(usage.live)} conversations had a turn in the last {live_window_s:g} s")
    usage = replace(usage, requests=usage.requests + granted)
    if holder is not None:
        usage = replace(usage, turns={**usage.turns, holder: now + LEASE_S})
    if conversation is not None:
        usage = replace(usage, live={**usage.live, conversation: now})
    return usage.encode(), Lease(granted, usage.minute, holder, usage)


def release(data: bytes | None, *, holder: str) -> tuple[bytes | None, Usage]:
    """The step of a slot given back (its turn ended): free (nothing to write if its lease is already gone)."""
    usage = Usage.decode(data)
    if holder not in usage.turns:
        return None, usage
    usage = replace(usage, turns={h: until for h, until in usage.turns.items() if h != holder})
    return usage.encode(), usage


def renew(data: bytes | None, *, holders: frozenset[str], now: float,
          live: dict[str, float] | None = None) -> tuple[bytes | None, Usage]:
    """The step of a gateway's slots (running turns and idle leases): their leases run :data:`LEASE_S`
    from ``now`` (a lease already expired and dropped is not taken back: that slot may have gone to
    another turn); and its turns' later times of conversations already live (``live``), written
    late (one still in the record counts once whatever its time; one gone from it is not re-added)."""
    usage = Usage.decode(data)
    renewed = {h: (now + LEASE_S if h in holders else until) for h, until in usage.turns.items()}
    seen = {name: max(last, (live or {}).get(name, last)) for name, last in usage.live.items()}
    if renewed == usage.turns and seen == usage.live:
        return None, usage
    usage = replace(usage, turns=renewed, live=seen)
    return usage.encode(), usage


def charge(data: bytes | None, *, tokens: int, now: float) -> tuple[bytes | None, Usage]:
    """The step of a finished turn: its tokens, added to the day's (of ``now``: a new day starts from 0)."""
    usage = Usage.decode(data)
    day = int(now // DAY_S)
    spent = usage.tokens if usage.day >= day else 0
    usage = replace(usage, day=max(day, usage.day), tokens=spent + tokens)
    return usage.encode(), usage
