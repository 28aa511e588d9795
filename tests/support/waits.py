"""Waiting on a condition instead of the clock: poll a predicate until it holds, under a deadline
generous enough for a loaded machine (the deadline only bounds a failure; a pass never waits it out).

A test that must show something did *not* happen anchors that on a later event it did observe,
not on a pause.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

DEADLINE_S = 60.0


def until(predicate: Callable[[], T], what: str, *, timeout: float = DEADLINE_S, poll_s: float = 0.02) -> T:
    """``predicate()``'s first truthy value; an AssertionError naming ``what`` past ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(poll_s)
    return value


@overload
async def until_async(predicate: Callable[[], Awaitable[T]], what: str, *, timeout: float = DEADLINE_S,
                      poll_s: float = 0.02) -> T: ...


@overload
async def until_async(predicate: Callable[[], T], what: str, *, timeout: float = DEADLINE_S,
                      poll_s: float = 0.02) -> T: ...


async def until_async(predicate: Callable[[], Any], what: str, *, timeout: float = DEADLINE_S,
                      poll_s: float = 0.02) -> Any:
    """:func:`until` from inside an event loop, for a plain or a coroutine predicate; the loop runs
    between polls, so what the predicate waits for can happen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        assert loop.time() < deadline, f"{what}: not within {timeout:g} s"
        await asyncio.sleep(poll_s)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` still exists (a zombie not yet reaped by its parent counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def until_gone(pid: int, what: str = "the killed process", *, timeout: float = DEADLINE_S) -> None:
    """Until ``pid`` has exited and been reaped: whatever is asked afterwards reaches its successor."""
    until(lambda: not process_alive(pid), f"{what} (pid {pid}) is gone", timeout=timeout)


__all__ = ["DEADLINE_S", "process_alive", "until", "until_async", "until_gone"]
