"""A streamed turn's generator (``actors/token_stream``) in plain asyncio: pieces in order, then the
result; no wake-up lost however the pieces and the end interleave; a reader that leaves does not
stop the turn."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from mirror.actors.results import TurnResult
from mirror.actors.token_stream import PACE_S, streamed_turn
from mirror.cognition.llm import TokenSink

RESULT = TurnResult(reply="abc", turn=0, seq=1, narrative_seq=None, llm_ms=0, talk_ms=0, append_ms=0, turn_ms=0)


def _turn(pattern: tuple[str, ...]):
    """A turn that, per step of ``pattern``, sinks a piece ('p'), yields to the loop ('y') or both ('b')."""
    async def run(sink: TokenSink) -> TurnResult:
        for step in pattern:
            if step in "pb":
                sink("x")
            if step in "yb":
                await asyncio.sleep(0)
        return RESULT
    return run


@pytest.mark.parametrize("slow_reader", [False, True])
@pytest.mark.parametrize("pattern", [p for n in range(4) for p in itertools.product("pyb", repeat=n)])
async def test_every_interleaving_ends_with_the_result_and_every_piece(pattern: tuple[str, ...], slow_reader: bool) -> None:
    async def read() -> list[object]:
        items: list[object] = []
        async for item in streamed_turn(_turn(pattern)):
            items.append(item)
            if slow_reader:  # a reader that takes its time with each item (Ray's, sending it on)
                for _ in range(3):
                    await asyncio.sleep(0)
        return items
    items = await asyncio.wait_for(read(), 2)
    assert items[-1] is RESULT and "".join(items[:-1]) == "x" * sum(step in "pb" for step in pattern)  # type: ignore[arg-type]


async def test_the_turns_error_is_raised_and_a_reader_that_leaves_does_not_stop_it() -> None:
    async def failing(sink: TokenSink) -> TurnResult:
        sink("a")
        await asyncio.sleep(0)
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        [item async for item in streamed_turn(failing)]

    done = asyncio.Event()
    async def slow(sink: TokenSink) -> TurnResult:
        sink("a")
        await asyncio.sleep(0.01)
        done.set()
        return RESULT
    stream = streamed_turn(slow)
    assert await anext(stream) == "a"
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.wait_for(done.wait(), 5)  # the turn went on without its reader


async def test_a_fast_writer_is_sent_in_paced_items_and_the_first_piece_at_once() -> None:
    async def fast(sink: TokenSink) -> TurnResult:
        for _ in range(40):  # a token a millisecond or so
            sink("x")
            await asyncio.sleep(0.001)
        return RESULT
    loop = asyncio.get_running_loop()
    started = loop.time()
    items = [item async for item in streamed_turn(fast)]
    elapsed = loop.time() - started
    pieces = items[:-1]
    assert items[-1] is RESULT and "".join(pieces) == "x" * 40  # type: ignore[arg-type]
    assert pieces[0] == "x"  # the first piece is not held back
    # at most one item a PACE_S after the first, and the last pieces at the end: however slow the loop ran
    assert len(pieces) <= 2 + elapsed / PACE_S, (len(pieces), elapsed)
