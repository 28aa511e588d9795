"""Tenants, their bearer tokens (stored hashed) and their limits, in a small JSON file.

A token maps to exactly one tenant. Only ``sha256(token)`` is stored, so the file cannot be
used to call the API; the token itself is shown once, when it is created. Writes go to a
temporary file and are renamed into place, so a crash never leaves a half-written registry.

The file is ``{"tokens": [record, ...], "limits": {tenant: {limit: value}}, "retention": {tenant:
{"idle_days": N}}}`` (a bare list of records, the older form, is read as tokens without limits).
Each tenant's :class:`TenantLimits` are what :mod:`mirror.gateway.limits` enforces; a running
gateway re-reads the file when it changes on disk, as for a revocation, so a new limit applies at
once. Each tenant's :class:`RetentionPolicy` is what the shard's ingester enforces
(:mod:`mirror.events.duckdb.retention` reads the ``retention`` section on every sweep).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from mirror.events.ids import validate_identifier
from mirror.gateway.errors import InvalidLimit, InvalidRetention, UnknownTenant

TOKEN_PREFIX = "mrr_"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class TenantRecord:
    tenant: str
    token_hash: str
    created_at: float
    revoked: bool = False
    admin: bool = False
    """An admin token may also act on a whole tenant (export one, import into any; docs/http-api.md)."""


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """A tenant's limits; ``None``: no limit of that kind. Each is a whole number, at least 1."""

    requests_per_minute: int | None = None
    """Requests of any ``/v1`` route in one clock minute (UTC)."""
    concurrent_turns: int | None = None
    """Turns (native or OpenAI-compatible) running at once."""
    tokens_per_day: int | None = None
    """The Talker's model tokens (prompt and completion) of the tenant's turns in one UTC day."""
    live_conversations: int | None = None
    """Distinct conversations with a turn in the last passivation window (``passivate_after_s``)."""

    def __post_init__(self) -> None:
        for name, value in self.as_dict().items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidLimit(name, value)

    @property
    def any(self) -> bool:
        """Whether any limit is set (a tenant with none is never counted: no shared state is touched)."""
        return any(getattr(self, name) is not None for name in LIMIT_NAMES)

    def as_dict(self) -> dict[str, int]:
        """The limits that are set, by name."""
        return {name: value for name in LIMIT_NAMES if (value := getattr(self, name)) is not None}


LIMIT_NAMES = tuple(field.name for field in fields(TenantLimits))
NO_LIMITS = TenantLimits()

EVENTS_DAYS_REFUSED = (
    "dropping a conversation's older events and keeping a snapshot as its base is not supported: a "
    "snapshot is a cache of one projection version (rebuilt from the events after every change of the "
    "projections), so a base without its events could neither be rebuilt nor verified, and the beliefs and "
    "narrative in it would lose their provenance; use --idle-days, or export then forget "
    "(docs/operations.md, \"Retention\")")


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long a tenant's conversations are kept; ``None``: for ever."""

    idle_days: int | None = None
    """A conversation whose newest event (any branch) is older than this many days is forgotten."""

    def __post_init__(self) -> None:
        value = self.idle_days
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidRetention("idle_days", value)

    def as_dict(self) -> dict[str, int]:
        return {} if self.idle_days is None else {"idle_days": self.idle_days}


KEEP_FOREVER = RetentionPolicy()


class TenantRegistry:
    """The tenants file; re-read when it changes on disk, so a running gateway sees revocations and limits."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._records: list[TenantRecord] = []
        self._limits: dict[str, TenantLimits] = {}
        self._retention: dict[str, RetentionPolicy] = {}
        self._stamp: tuple[float, int] | None = None

    def _load(self) -> list[TenantRecord]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._records, self._limits, self._retention, self._stamp = [], {}, {}, None
            return self._records
        stamp = (stat.st_mtime, stat.st_size)
        if stamp != self._stamp:
            document: Any = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(document, list):  # the older form: tokens only
                document = {"tokens": document}
            self._records = [TenantRecord(**row) for row in document.get("tokens", [])]
            self._limits = {tenant: TenantLimits(**values) for tenant, values in document.get("limits", {}).items()}
            self._retention = {tenant: RetentionPolicy(**values)
                               for tenant, values in document.get("retention", {}).items()}
            self._stamp = stamp
        return self._records

    def _save(self, records: list[TenantRecord], limits: dict[str, TenantLimits] | None = None,
              retention: dict[str, RetentionPolicy] | None = None) -> None:
        limits = self._limits if limits is None else limits
        retention = self._retention if retention is None else retention
        document = {"tokens": [asdict(record) for record in records],
                    "limits": {tenant: limits[tenant].as_dict() for tenant in sorted(limits) if limits[tenant].any},
                    "retention": {tenant: retention[tenant].as_dict() for tenant in sorted(retention)
                                  if retention[tenant].as_dict()}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(document, indent=2), encoding="utf-8")
        os.chmod(temporary, 0o600)
        temporary.replace(self.path)
        self._stamp = None

    def add(self, tenant: str, *, admin: bool = False) -> str:
        """Create a token for ``tenant`` (a tenant may hold several; ``admin``: with the admin scope);
        returns the token, once."""
        validate_identifier("tenant", tenant)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        records = [*self._load(), TenantRecord(tenant, token_hash(token), time.time(), admin=admin)]
        self._save(records)
        return token

    def revoke(self, tenant: str) -> int:
        """Revoke every token of ``tenant``; returns how many were active."""
        validate_identifier("tenant", tenant)
        records = self._load()
        active = sum(1 for r in records if r.tenant == tenant and not r.revoked)
        self._save([replace(r, revoked=r.revoked or r.tenant == tenant) for r in records])
        return active

    def remove(self, tenant: str) -> int:
        """Remove every token of ``tenant`` (active or revoked) and its limits, as if it never was
        (a forgotten tenant); returns how many tokens there were."""
        validate_identifier("tenant", tenant)
        records = self._load()
        kept = [record for record in records if record.tenant != tenant]
        if len(kept) < len(records) or tenant in self._limits:
            self._save(kept, {name: limits for name, limits in self._limits.items() if name != tenant})
        return len(records) - len(kept)

    def list(self) -> list[TenantRecord]:
        return list(self._load())

    def tenants(self) -> tuple[str, ...]:
        """Every tenant with a token (active or revoked) or limits, sorted."""
        records = self._load()
        return tuple(sorted({record.tenant for record in records} | set(self._limits) | set(self._retention)))

    def limits_of(self, tenant: str) -> TenantLimits:
        """``tenant``'s limits (:data:`NO_LIMITS` when none are set); a dict lookup while the file is unchanged."""
        self._load()
        return self._limits.get(tenant, NO_LIMITS)

    def set_limits(self, tenant: str, *, clear: bool = False, **changes: int | None) -> TenantLimits:
        """Set the given limits of ``tenant`` (``None``: leave that one as it is; ``clear``: drop the
        others first); :class:`UnknownTenant` for a tenant with no token, :class:`InvalidLimit` for a
        value that is not a whole number of at least 1. Returns the tenant's limits now."""
        validate_identifier("tenant", tenant)
        records = self._load()
        if not any(record.tenant == tenant for record in records):
            raise UnknownTenant(tenant)
        unknown = sorted(set(changes) - set(LIMIT_NAMES))
        if unknown:
            raise InvalidLimit(unknown[0], changes[unknown[0]])
        current = NO_LIMITS if clear else self._limits.get(tenant, NO_LIMITS)
        limits = replace(current, **{name: value for name, value in changes.items() if value is not None})
        self._save(records, {**self._limits, tenant: limits})
        return limits

    def retention_of(self, tenant: str) -> RetentionPolicy:
        """``tenant``'s retention policy (:data:`KEEP_FOREVER` when none is set)."""
        self._load()
        return self._retention.get(tenant, KEEP_FOREVER)

    def set_retention(self, tenant: str, *, idle_days: int | None = None, events_days: int | None = None,
                      clear: bool = False) -> RetentionPolicy:
        """Set ``tenant``'s retention (``clear``: keep its conversations for ever); returns it.
        :class:`UnknownTenant` for a tenant with no token; :class:`InvalidRetention` for a period that
        is not a whole number of days of at least 1, and for ``events_days`` (refused:
        :data:`EVENTS_DAYS_REFUSED`). Nothing changes when it is refused."""
        validate_identifier("tenant", tenant)
        if events_days is not None:
            raise InvalidRetention("events_days", events_days, EVENTS_DAYS_REFUSED)
        records = self._load()
        if not any(record.tenant == tenant for record in records):
            raise UnknownTenant(tenant)
        policy = KEEP_FOREVER if clear else RetentionPolicy(
            idle_days=idle_days if idle_days is not None else self._retention.get(tenant, KEEP_FOREVER).idle_days)
        self._save(records, retention={**self._retention, tenant: policy})
        return policy

    def _record_of(self, token: str) -> TenantRecord | None:
        """The active record of a bearer token, or None: every record is compared (in constant
        time), so how long the lookup takes says nothing of which matched."""
        digest = token_hash(token)
        found = None
        for record in self._load():
            if hmac.compare_digest(record.token_hash, digest) and not record.revoked:
                found = record
        return found

    def tenant_of(self, token: str) -> str | None:
        """The tenant a bearer token belongs to, or None."""
        record = self._record_of(token)
        return None if record is None else record.tenant

    def is_admin(self, token: str) -> bool:
        """Whether ``token`` is an active token with the admin scope."""
        record = self._record_of(token)
        return record is not None and record.admin


__all__ = ["EVENTS_DAYS_REFUSED", "KEEP_FOREVER", "LIMIT_NAMES", "NO_LIMITS", "TOKEN_PREFIX", "RetentionPolicy", "TenantLimits", "TenantRecord", "TenantRegistry", "token_hash"]
