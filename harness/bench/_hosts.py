"""What `mirror bench actors` asks the conversation hosts, and its progress line on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ray
from rich.console import Console
from rich.progress import Progress

from mirror.actors.placement import placement_of
from mirror.actors.settings import RuntimeSettings


def host_stats(runtime: RuntimeSettings) -> list[dict[str, Any]]:
    """Every host's ``stats()`` (live, activations, passivations, evictions, rss_mb, …), by slot."""
    return list(ray.get([host.stats.remote() for host in placement_of(runtime).all_hosts()], timeout=120))


def hosts_figures(stats: list[dict[str, Any]]) -> dict[str, Any]:
    """The hosts' memory and counters: summed, and per host where they differ."""
    return {
        "hosts": len(stats),
        "rss_mb_total": round(sum(host["rss_mb"] for host in stats), 1),
        "rss_mb_per_host": [host["rss_mb"] for host in stats],
        "max_rss_mb_per_host": [host["max_rss_mb"] for host in stats],
        "live_per_host": [host["live"] for host in stats],
        "activations": sum(host["activations"] for host in stats),
        "evictions": sum(host["evictions"] for host in stats),
        "passivations": sum(host["passivations"] for host in stats),
        "failed_activations": sum(host["failed_activations"] for host in stats),
        "activation_ms_mean_per_host": [host["activation_ms_mean"] for host in stats],
        "activation_phases_ms_mean_per_host": [host.get("activation_phases_ms_mean") for host in stats],
        # The hosts' fair shares: Talker calls refused (the rest of a bench's refusals were the
        # gateway's view of them, :mod:`mirror.gateway.slots`) and thinking steps shed.
        "refused_by_hosts": sum(_share_counts(host, "refused") for host in stats),
        "thinking_shed": sum(_share_counts(host, "shed") for host in stats),
    }


def _share_counts(host: dict[str, Any], count: str) -> int:
    """A host's fair-share ``count`` (refused, shed) summed over its tenants (0 before its first conversation)."""
    share = host.get("model_slots") or {}
    return sum(int(tenant[count]) for tenant in share.get("tenants", {}).values())


@contextmanager
def progress_line(description: str, total: int, enabled: bool = True) -> Iterator[Any]:
    """Progress on stderr (stdout stays the one JSON object); yields ``advance()``.

    A bar on a terminal; otherwise (a log file) a line at every twentieth of the way.
    """
    console = Console(stderr=True)
    if enabled and not console.is_terminal:
        done = 0
        every = max(1, total // 20)
        started = time.monotonic()

        def advance(steps: int = 1) -> None:
            nonlocal done
            done += steps
            if done % every == 0 or done == total:
                print(f"{description}: {done}/{total} after {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)

        yield advance
        return
    with Progress(console=console, transient=True, disable=not enabled) as progress:
        task = progress.add_task(description, total=total)
        yield lambda steps=1: progress.advance(task, steps)


__all__ = ["host_stats", "hosts_figures", "progress_line"]
