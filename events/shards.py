"""The shard map: which tenants' events each shard's ingester stores, and so where readers look.

A shard is one ingester with its own DuckDB file, serving reads on ``_MIRROR.log.<shard>.*``.
The map names the shards that hold listed tenants; every tenant not listed lives on the
``default`` shard. With no entries there is one shard, ``default``, taking ``mirror.*.*.*``:
the single-log layout.

Invariant: every event is stored by exactly one shard. A listed shard's consumer filters on its
tenants' subjects (``mirror.<tenant>.*.*``, one filter per tenant; JetStream 2.10 consumers
take several non-overlapping filters). The default shard must also take every tenant nobody
listed, and a subject filter cannot say "all but these" (NATS wildcards match whole tokens, and
there is no negative filter), so it consumes ``mirror.*.*.*`` and *skips* the messages of
tenants listed elsewhere: it acknowledges them with its batch and moves its offset past them,
never storing them. The cost is that the default shard reads the other shards' messages too
(measured by ``mirror bench ingest --shards N``). Listing a tenant on the default shard is
allowed and changes nothing.

Written on the command line and in ``mirror.toml`` as ``SHARD=TENANT,TENANT`` entries
(``--shard-map 1=acme,globex``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from mirror.events.errors import InvalidIdentifier, ShardMapError
from mirror.events.ids import validate_identifier
from mirror.events.nats.jetstream import STREAM_SUBJECTS, SUBJECT_ROOT

DEFAULT_SHARD = "0"

Assignments = tuple[tuple[str, tuple[str, ...]], ...]
"""``((shard, (tenant, ...)), ...)``: the map as plain frozen values (it crosses Ray in settings)."""


@dataclass(frozen=True, slots=True)
class ShardMap:
    """Listed shards and their tenants; everyone else on ``default`` (see the module docstring)."""

    assignments: Assignments = ()
    default: str = DEFAULT_SHARD

    def __post_init__(self) -> None:
        try:
            validate_identifier("shard", self.default)
            owner: dict[str, str] = {}
            seen: set[str] = set()
            for shard, tenants in self.assignments:
                validate_identifier("shard", shard)
                if shard in seen:
                    raise ShardMapError(f"shard {shard!r} is listed twice", shard=shard)
                seen.add(shard)
                if isinstance(tenants, str):
                    raise ShardMapError(f"the tenants of shard {shard!r} must be a list, not the string {tenants!r}",
                                        shard=shard)
                if not tenants:  # a consumer with no filter would take every tenant's events
                    raise ShardMapError(f"shard {shard!r} lists no tenants", shard=shard)
                for tenant in tenants:
                    validate_identifier("tenant", tenant)
                    if tenant in owner:
                        raise ShardMapError(f"tenant {tenant!r} is on two shards, {owner[tenant]!r} and {shard!r}",
                                            shard=shard, tenant=tenant)
                    owner[tenant] = shard
        except InvalidIdentifier as exc:
            raise ShardMapError(str(exc)) from None

    @classmethod
    def of(cls, shards: Mapping[str, Iterable[str]], default: str = DEFAULT_SHARD) -> ShardMap:
        return cls(tuple((shard, tuple(tenants)) for shard, tenants in shards.items()), default)

    @classmethod
    def parse(cls, entries: Iterable[str], default: str = DEFAULT_SHARD) -> ShardMap:
        """From ``SHARD=TENANT,TENANT`` entries (the ``--shard-map`` option, repeatable)."""
        assignments = []
        for entry in entries:
            shard, equals, tenants = entry.partition("=")
            listed = tuple(tenant.strip() for tenant in tenants.split(",") if tenant.strip())
            if not equals or not listed:
                raise ShardMapError(f"entry {entry!r} is not SHARD=TENANT,TENANT")
            assignments.append((shard.strip(), listed))
        return cls(tuple(assignments), default)

    def entries(self) -> list[str]:
        """The map as ``SHARD=TENANT,TENANT`` entries: what :meth:`parse` reads back."""
        return [f"{shard}={','.join(tenants)}" for shard, tenants in self.assignments]

    @property
    def shards(self) -> tuple[str, ...]:
        """Every shard: the default first, then the listed ones in the order given."""
        return (self.default, *(shard for shard, _ in self.assignments if shard != self.default))

    def shard_of(self, tenant: str) -> str:
        for shard, tenants in self.assignments:
            if tenant in tenants:
                return shard
        return self.default

    def _check(self, shard: str) -> None:
        if shard not in self.shards:
            raise ShardMapError(f"no shard {shard!r}; the shards are {', '.join(self.shards)}", shard=shard)

    def filter_subjects(self, shard: str) -> tuple[str, ...]:
        """What the shard's consumer filters on: its tenants', or everything for the default shard."""
        self._check(shard)
        if shard == self.default:
            return (STREAM_SUBJECTS,)
        (tenants,) = (tenants for listed, tenants in self.assignments if listed == shard)
        return tuple(f"{SUBJECT_ROOT}.{tenant}.*.*" for tenant in tenants)

    def skipped_tenants(self, shard: str) -> tuple[str, ...]:
        """Tenants whose messages the shard's filter delivers but another shard stores."""
        self._check(shard)
        if shard != self.default:
            return ()
        return tuple(tenant for listed, tenants in self.assignments if listed != shard for tenant in tenants)


__all__ = ["DEFAULT_SHARD", "Assignments", "ShardMap"]
