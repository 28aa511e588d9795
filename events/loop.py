"""``run_loop``: ``asyncio.run`` on uvloop where it is installed (a dependency on POSIX).

Processes that spend their time on sockets (the ingester, recompute tasks, load generators)
run their loop through this: uvloop's event loop and transports take roughly half the CPU of
the standard library's per request, which is what bounds them on a small machine.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:  # Windows, or installed without it: the standard loop
        return None
    return uvloop.new_event_loop


def run_loop(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` to completion on a new event loop (uvloop's if available), then close it."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


__all__ = ["loop_factory", "run_loop"]
