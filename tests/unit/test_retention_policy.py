"""Retention policies in the tenants file and `mirror tenants retention`: set, shown, read back by the
ingester's sweeper; a bad value or the refused ``--events-days`` changes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mirror.events.duckdb.retention import idle_days_by_tenant
from mirror.gateway.errors import InvalidRetention, UnknownTenant
from mirror.gateway.tenants import KEEP_FOREVER, RetentionPolicy, TenantRegistry
from tests.support.cli import run_main


def test_a_policy_is_kept_beside_tokens_and_limits_and_read_by_the_sweeper(tmp_path: Path) -> None:
    registry = TenantRegistry(tmp_path / "tenants.json")
    registry.add("acme")
    registry.add("other")
    registry.set_limits("acme", concurrent_turns=2)
    assert registry.retention_of("acme") == KEEP_FOREVER
    assert registry.set_retention("acme", idle_days=30) == RetentionPolicy(idle_days=30)
    registry.set_limits("acme", concurrent_turns=3)  # another section's change keeps the policy
    assert TenantRegistry(tmp_path / "tenants.json").retention_of("acme").idle_days == 30
    assert idle_days_by_tenant(tmp_path / "tenants.json") == {"acme": 30}
    assert registry.set_retention("acme", clear=True) == KEEP_FOREVER
    assert idle_days_by_tenant(tmp_path / "tenants.json") == {}
    assert idle_days_by_tenant(tmp_path / "absent.json") == {}


@pytest.mark.parametrize("changes, error, mentions", [
    ({"idle_days": 0}, InvalidRetention, "at least 1"),
    ({"events_days": 7}, InvalidRetention, "snapshot"),
])
def test_a_refused_policy_changes_nothing(tmp_path: Path, changes: dict[str, Any], error: type[Exception],
                                          mentions: str) -> None:
    registry = TenantRegistry(tmp_path / "tenants.json")
    registry.add("acme")
    registry.set_retention("acme", idle_days=30)
    before = (tmp_path / "tenants.json").read_bytes()
    with pytest.raises(error, match=mentions):
        registry.set_retention("acme", **changes)
    assert (tmp_path / "tenants.json").read_bytes() == before
    with pytest.raises(UnknownTenant):
        registry.set_retention("nobody", idle_days=3)


def test_mirror_tenants_retention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path)
    assert run_main(monkeypatch, capsys, "tenants", "add", "acme", "--data", data).code == 0
    ran = run_main(monkeypatch, capsys, "tenants", "retention", "acme", "--idle-days", "90", "--data", data)
    assert ran.code == 0 and "idle over 90 day(s)" in ran.out, ran
    listed = run_main(monkeypatch, capsys, "tenants", "--data", data)
    assert "acme\tretention\tforget conversations idle over 90 day(s)" in listed.out, listed
    refused = run_main(monkeypatch, capsys, "tenants", "retention", "acme", "--events-days", "30", "--data", data)
    assert refused.code == 2 and "events_days" in refused.err and "docs/operations.md" in refused.err, refused
    assert "idle over 90 day(s)" in run_main(monkeypatch, capsys, "tenants", "--data", data).out
