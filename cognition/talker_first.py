"""The Talker first on a process's event loop: thinking steps start only while no turn is busy.

A conversation host answers many conversations' turns and runs their thinking on one event
loop. asyncio runs whatever is ready in arrival order, and a thinking step holds the loop for
milliseconds at a time (building a prompt, parsing a model's answer, encoding and folding its
events). A turn whose recall, reply or append became ready behind such a step waits for it: at
20 paced users the Thinker does about three times the turns' own work in a host, so a turn's
critical path regularly queued behind another conversation's thinking.

:class:`TalkerFirst` counts the turns in their *busy* part: a turn is busy from the moment it
reaches its conversation until its result is returned, except while it waits for its own model
call (:meth:`TalkerFirst.waiting`: nothing of the turn can run then, and the model's
wait is what the Thinker's work should fill), or, asked to be in sync, for its conversation's
thinking (which waits for the busy turns: the two would hold each other up). Thinking awaits :meth:`TalkerFirst.quiet` before
each step, before each append and when a model call of its own has answered, so a step never
*starts* while a turn is busy; a step already running is not interrupted (the loop is
cooperative). The ordering holds whatever the clock says; the clock only bounds it: a wait
longer than ``max_wait_s`` goes ahead anyway, so a process whose turns never pause (a saturated
closed loop) still thinks, later.

The events written are the same, in the same order: only when each step starts moves.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

MAX_WAIT_S = 0.05
"""The longest a thinking step waits for the turns to pause before it goes ahead anyway."""


class _Turn:
    """One turn's mark: busy, or waiting on its model call."""

    __slots__ = ("busy",)

    def __init__(self) -> None:
        self.busy = False


_CURRENT: ContextVar[_Turn | None] = ContextVar("mirror_talker_first_turn", default=None)
"""The turn the running task is answering (its model calls step out of the busy count)."""


class TalkerFirst:
    """The busy turns of one process and a wait for none (see the module docstring)."""

    def __init__(self, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_wait_s = max_wait_s
        self.busy = 0
        """Turns in their busy part now."""
        self.waited = 0
        """Times a thinking step waited for the turns (read by tests)."""
        self._waiters: list[asyncio.Future[None]] = []

    def _enter(self, turn: _Turn) -> None:
        turn.busy = True
        self.busy += 1

    def _leave(self, turn: _Turn) -> None:
        turn.busy = False
        self.busy -= 1
        if not self.busy and self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                _wake(waiter)

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """A turn, busy while inside (its model calls excepted: :meth:`waiting`)."""
        turn = _Turn()
        token = _CURRENT.set(turn)
        self._enter(turn)
        try:
            yield
        finally:
            if turn.busy:
                self._leave(turn)
            _CURRENT.reset(token)

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """The running turn waits on work not its own (its model call; with ``sync``, its
        conversation's thinking): not busy meanwhile. Outside a turn this changes nothing."""
        turn = _CURRENT.get()
        if turn is None or not turn.busy:
            yield
            return
        self._leave(turn)
        try:
            yield
        finally:
            self._enter(turn)

    async def quiet(self) -> None:
        """Return once no turn is busy (at once when none is; after ``max_wait_s`` at most).

        A future and a timer, not ``asyncio.wait_for`` (a task per wait): a host's thinking
        steps wait here many times a second."""
        if not self.busy:
            return
        self.waited += 1
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        timer = loop.call_later(self.max_wait_s, _wake, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            if waiter in self._waiters:  # timed out (or cancelled) while the turns were still busy
                self._waiters.remove(waiter)


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def no_wait() -> None:
    """:meth:`TalkerFirst.quiet` for a writer with no turns to give way to (recompute, replay)."""


__all__ = ["MAX_WAIT_S", "TalkerFirst", "no_wait"]
