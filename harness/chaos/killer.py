"""The schedule: every S seconds, ``kill -9`` of one process of the next kind, round robin.

The first kill comes S seconds after the start. A kind with no live process at its moment (Ray
still restarting the last one, say) is recorded as skipped and the round robin moves on; when
there are several (hosts, gateways), one is chosen with the run's seeded random generator.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from dataclasses import dataclass, field

from mirror.harness.chaos.processes import find_targets

__all__ = ["Kill", "Killer"]


@dataclass(frozen=True)
class Kill:
    kind: str
    pid: int | None
    """None: nothing of this kind was alive to kill (skipped)."""
    title: str
    at_s: float


@dataclass
class Killer:
    root: int
    """The stack's pid: targets are found among its descendants only."""
    kinds: tuple[str, ...]
    every_s: float
    started: float
    seed: int = 0
    kills: list[Kill] = field(default_factory=list)

    async def run(self, stop: asyncio.Event) -> None:
        choose = random.Random(self.seed)
        index = 0
        while self.kinds:
            try:
                await asyncio.wait_for(stop.wait(), self.every_s)
                return
            except TimeoutError:
                pass
            kind = self.kinds[index % len(self.kinds)]
            index += 1
            self.kills.append(await asyncio.to_thread(self._kill_one, kind, choose))

    def _kill_one(self, kind: str, choose: random.Random) -> Kill:
        targets = find_targets(self.root, kind)
        while targets:
            target = choose.choice(targets)
            try:
                os.kill(target.pid, signal.SIGKILL)
            except ProcessLookupError:  # gone since it was listed: try another
                targets.remove(target)
                continue
            return Kill(kind, target.pid, target.title, time.monotonic() - self.started)
        return Kill(kind, None, "", time.monotonic() - self.started)
