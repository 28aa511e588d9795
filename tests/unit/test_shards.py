"""The shard map: every tenant's events are stored by exactly one shard, and a bad map says what is wrong."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mirror.actors.settings import RuntimeSettings
from mirror.cognition.openai_client import LLMSettings
from mirror.events.errors import ShardMapError
from mirror.events.ids import StreamKey
from mirror.events.nats.infrastructure import NatsInfrastructure
from mirror.events.nats.jetstream import subject_for
from mirror.events.shards import ShardMap

names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_", min_size=1, max_size=8)


@st.composite
def shard_maps(draw: st.DrawFn) -> ShardMap:
    tenants = draw(st.lists(names, unique=True, max_size=12))
    shards = draw(st.lists(names, unique=True, min_size=1, max_size=4))
    default = draw(st.sampled_from([*shards, "0"]))
    placed: dict[str, list[str]] = {}
    for tenant in tenants:
        placed.setdefault(draw(st.sampled_from(shards)), []).append(tenant)
    return ShardMap.of(placed, default=default)


def _matches(subject: str, pattern: str) -> bool:
    """NATS token wildcards: ``*`` is one whole token."""
    tokens, wanted = subject.split("."), pattern.split(".")
    return len(tokens) == len(wanted) and all(w in ("*", t) for t, w in zip(tokens, wanted, strict=True))


def _stores(shards: ShardMap, shard: str, tenant: str) -> bool:
    """Whether the shard's ingester stores an event of ``tenant``: its filter delivers it and it does not skip it."""
    subject = subject_for(StreamKey(tenant, "conversation"))
    delivered = any(_matches(subject, pattern) for pattern in shards.filter_subjects(shard))
    return delivered and tenant not in shards.skipped_tenants(shard)


@settings(deadline=None)  # pure, but the CI machine is shared: wall time says nothing here
@given(shard_maps(), st.lists(names, max_size=5))
def test_every_tenant_is_stored_by_exactly_the_shard_it_maps_to(shards: ShardMap, strangers: list[str]) -> None:
    listed = [tenant for _, tenants in shards.assignments for tenant in tenants]
    for tenant in [*listed, *strangers]:
        storing = [shard for shard in shards.shards if _stores(shards, shard, tenant)]
        assert storing == [shards.shard_of(tenant)]


@settings(deadline=None)
@given(shard_maps())
def test_listed_shards_filters_never_overlap_and_the_map_reads_back(shards: ShardMap) -> None:
    seen: dict[str, str] = {}
    for shard in shards.shards:
        if shard == shards.default:
            continue
        for pattern in shards.filter_subjects(shard):
            assert pattern not in seen, f"{pattern} on {seen.get(pattern)} and {shard}"
            seen[pattern] = shard
    assert ShardMap.parse(shards.entries(), default=shards.default) == shards
    assert len(set(shards.shards)) == len(shards.shards) and shards.shards[0] == shards.default


def test_no_map_is_one_shard_taking_everything() -> None:
    shards = ShardMap()
    assert shards.shards == ("0",)
    assert shards.filter_subjects("0") == ("mirror.*.*.*",) and shards.skipped_tenants("0") == ()
    assert shards.shard_of("anyone") == "0"


def test_the_default_shard_skips_exactly_the_tenants_placed_elsewhere() -> None:
    shards = ShardMap.parse(["1=acme,globex", "2=initech", "0=hooli"])
    assert shards.shards == ("0", "1", "2")
    assert shards.filter_subjects("1") == ("mirror.acme.*.*", "mirror.globex.*.*")
    assert shards.skipped_tenants("0") == ("acme", "globex", "initech")
    assert shards.shard_of("hooli") == "0" and shards.shard_of("initech") == "2"


@pytest.mark.parametrize(("entries", "message"), [
    (["1=acme", "2=acme,globex"], "tenant 'acme' is on two shards, '1' and '2'"),
    (["1=acme", "1=globex"], "shard '1' is listed twice"),
    (["1"], "entry '1' is not SHARD=TENANT,TENANT"),
    (["1="], "entry '1=' is not SHARD=TENANT,TENANT"),
    (["1=ac.me"], "invalid tenant 'ac.me'"),
    (["o*=acme"], "invalid shard 'o\\*'"),
])
def test_a_bad_map_is_a_typed_error_naming_the_problem(entries: list[str], message: str) -> None:
    with pytest.raises(ShardMapError, match=message):
        ShardMap.parse(entries)


def test_an_unknown_shard_or_an_empty_one_is_refused() -> None:
    shards = ShardMap.parse(["1=acme"])
    with pytest.raises(ShardMapError, match="no shard '3'; the shards are 0, 1"):
        shards.filter_subjects("3")
    with pytest.raises(ShardMapError, match="shard '2' lists no tenants"):
        ShardMap.of({"2": []})


def test_runtime_settings_route_by_tenant_and_refuse_a_bad_map_when_built() -> None:
    llm = LLMSettings(base_url="http://127.0.0.1:1/v1", model="m")
    settings = RuntimeSettings(NatsInfrastructure("nats://x", shard="conv", shard_map=(("1", ("acme",)),)), llm=llm)
    assert settings.shard_of("acme") == "1" and settings.shard_of("other") == "conv"
    with pytest.raises(ShardMapError, match="on two shards"):
        NatsInfrastructure("nats://x", shard_map=(("1", ("acme",)), ("2", ("acme",))))
