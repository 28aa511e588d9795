"""An immutable mapping for state that must never change in place.

Python has no built-in frozen dict, and a ``MappingProxyType`` still exposes whatever dict it
wraps. :class:`FrozenMap` owns a private dict that nothing can reach: every change returns a
new map and leaves the old one as it was, so an old state (a time-travel view, a snapshot being
written) is never disturbed by a later ``apply``.

Cost: a change copies the dict, O(items). States keep maps only for things that grow with
distinct items (beliefs, edges, review items) or with a fixed set of keys (event types), where
that is hundreds of entries; a persistent hash trie would be the next step if it were millions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V], Generic[K, V]):
    """A hashable, immutable mapping; ``set`` and ``set_many`` return new maps."""

    __slots__ = ("_data", "_hash")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._data: dict[K, V] = dict(items)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def get(self, key: K, default: Any = None) -> Any:
        return self._data.get(key, default)

    def set(self, key: K, value: V) -> FrozenMap[K, V]:
        """A new map with ``key`` bound to ``value``."""
        return self.set_many(((key, value),))

    def set_many(self, pairs: Iterable[tuple[K, V]]) -> FrozenMap[K, V]:
        """A new map with every pair bound, later pairs winning; ``self`` is unchanged."""
        data = dict(self._data)
        data.update(pairs)
        return FrozenMap(data)

    def remove_many(self, keys: Iterable[K]) -> FrozenMap[K, V]:
        """A new map without ``keys`` (absent ones ignored); ``self`` is unchanged."""
        data = dict(self._data)
        for key in keys:
            data.pop(key, None)
        return FrozenMap(data)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Ray and multiprocessing pickle states; rebuild from the items, never share the dict.
        return (FrozenMap, (list(self._data.items()),))


__all__ = ["FrozenMap"]
