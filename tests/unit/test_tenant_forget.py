"""The pieces of forgetting a tenant that need no servers: the registry forgets its tokens and
limits (and only its), and the job sums every shard's tombstone, finished only when all are."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirror.events.errors import InvalidIdentifier
from mirror.gateway.routes.tenants import tenant_job
from mirror.gateway.tenants import TenantRegistry


def test_removing_a_tenant_drops_its_tokens_and_limits_only(tmp_path: Path) -> None:
    registry = TenantRegistry(tmp_path / "tenants.json")
    gone, kept = registry.add("acme"), registry.add("globex")
    registry.add("acme", admin=True)
    registry.set_limits("acme", requests_per_minute=5)
    registry.set_limits("globex", requests_per_minute=7)
    assert registry.remove("acme") == 2
    assert registry.tenant_of(gone) is None and registry.tenant_of(kept) == "globex"
    assert registry.tenants() == ("globex",) and registry.limits_of("globex").requests_per_minute == 7
    assert "acme" not in (tmp_path / "tenants.json").read_text()
    assert registry.remove("acme") == 0  # again: nothing left, nothing changed
    with pytest.raises(InvalidIdentifier):
        registry.remove("bad.name")


def test_the_job_is_forgotten_once_every_shard_is() -> None:
    shard = lambda status, conversations, events, at, done: {  # noqa: E731
        "status": status, "conversations": conversations, "events": events, "requested_at": at, "finished_at": done}
    job = tenant_job("acme", {"0": shard("forgotten", 2, 30, 10.0, 12.0), "1": shard("forgetting", 1, 5, 11.0, None)})
    assert (job["status"], job["conversations"], job["events"], job["requested_at"], job["finished_at"]) == (
        "forgetting", 3, 35, 10.0, None)
    assert job["shards"] == {"0": "forgotten", "1": "forgetting"} and job["poll"] == "/v1/tenants/acme/forget"
    done = tenant_job("acme", {"0": shard("forgotten", 2, 30, 10.0, 12.0), "1": shard("forgotten", 1, 5, 11.0, 14.0)})
    assert done["status"] == "forgotten" and done["finished_at"] == 14.0
