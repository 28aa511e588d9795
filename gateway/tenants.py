"""Tenants and their bearer tokens, stored hashed in a small JSON file.

A token maps to exactly one tenant. Only ``sha256(token)`` is stored, so the file cannot be
used to call the API; the token itself is shown once, when it is created. Writes go to a
temporary file and are renamed into place, so a crash never leaves a half-written registry.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mirror.events.ids import validate_identifier

TOKEN_PREFIX = "mrr_"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class TenantRecord:
    tenant: str
    token_hash: str
    created_at: float
    revoked: bool = False


class TenantRegistry:
    """The tenants file; re-read when it changes on disk, so a running gateway sees revocations."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._records: list[TenantRecord] = []
        self._mtime: float | None = None

    def _load(self) -> list[TenantRecord]:
        try:
            mtime = self.path.stat().st_mtime
        except FileNotFoundError:
            self._records, self._mtime = [], None
            return self._records
        if mtime != self._mtime:
            rows = json.loads(self.path.read_text(encoding="utf-8"))
            self._records = [TenantRecord(**row) for row in rows]
            self._mtime = mtime
        return self._records

    def _save(self, records: list[TenantRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps([asdict(record) for record in records], indent=2), encoding="utf-8")
        os.chmod(temporary, 0o600)
        temporary.replace(self.path)
        self._mtime = None

    def add(self, tenant: str) -> str:
        """Create a token for ``tenant`` (a tenant may hold several); returns the token, once."""
        validate_identifier("tenant", tenant)
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        records = [*self._load(), TenantRecord(tenant, token_hash(token), time.time())]
        self._save(records)
        return token

    def revoke(self, tenant: str) -> int:
        """Revoke every token of ``tenant``; returns how many were active."""
        validate_identifier("tenant", tenant)
        records = self._load()
        active = sum(1 for r in records if r.tenant == tenant and not r.revoked)
        self._save([TenantRecord(r.tenant, r.token_hash, r.created_at, r.revoked or r.tenant == tenant) for r in records])
        return active

    def list(self) -> list[TenantRecord]:
        return list(self._load())

    def tenant_of(self, token: str) -> str | None:
        """The tenant a bearer token belongs to, or None (compared in constant time)."""
        digest = token_hash(token)
        found = None
        for record in self._load():
            if hmac.compare_digest(record.token_hash, digest) and not record.revoked:
                found = record.tenant
        return found


__all__ = ["TOKEN_PREFIX", "TenantRecord", "TenantRegistry", "token_hash"]
