"""Which host runs a conversation: rendezvous (highest random weight) hashing over the host slots.

Every gateway computes the same answer from the conversation's name and the number of hosts
alone: no directory round trip on the turn path (a hash is ~1 µs; asking a directory actor
was ~1 ms here). Hosts are slots ``0 … hosts-1``, each a named Ray actor that Ray restarts
(on another node if need be), so a slot outlives its process and the mapping never changes
while the host count stays the same; were it changed from n to n+1, only ~1/(n+1) of the
conversations would move (to the new slot), and the fenced writer keeps a conversation that
briefly lives in two hosts from ever forking.
"""

from __future__ import annotations

import hashlib

__all__ = ["host_for"]


def _weight(slot: int, name: str) -> int:
    return int.from_bytes(hashlib.blake2b(f"{slot}\x00{name}".encode(), digest_size=8).digest(), "big")


def host_for(name: str, hosts: int) -> int:
    """The slot in ``range(hosts)`` whose weight for ``name`` is highest (ties: the lowest slot)."""
    if hosts < 1:
        raise ValueError(f"hosts is {hosts}; there must be at least one")
    return max(range(hosts), key=lambda slot: (_weight(slot, name), -slot))
