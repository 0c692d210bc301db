import asyncio
import time

import pytest

from agentproc.deadlines import COMPACT_AT, Deadlines


async def _sleeper() -> None:
    await asyncio.sleep(30)


async def test_a_task_past_its_deadline_is_cancelled_and_told_so():
    deadlines = Deadlines()
    task = asyncio.ensure_future(_sleeper())
    watched = deadlines.watch(task, time.monotonic() + 0.05)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert watched.expired
    assert len(deadlines) == 0


async def test_an_ended_turn_is_not_cancelled_when_its_deadline_passes():
    deadlines = Deadlines()
    task = asyncio.ensure_future(_sleeper())
    watched = deadlines.watch(task, time.monotonic() + 0.05)
    deadlines.end(watched)
    await asyncio.sleep(0.15)
    assert not task.done() and not watched.expired
    task.cancel()


async def test_a_shorter_deadline_after_a_longer_one_still_fires_first():
    deadlines = Deadlines()
    slow, quick = asyncio.ensure_future(_sleeper()), asyncio.ensure_future(_sleeper())
    late = deadlines.watch(slow, time.monotonic() + 60)
    early = deadlines.watch(quick, time.monotonic() + 0.05)
    with pytest.raises(asyncio.CancelledError):
        await quick
    assert early.expired and not late.expired and not slow.done()
    deadlines.end(late)
    slow.cancel()


async def test_turns_ended_behind_a_long_one_do_not_pile_up():
    deadlines = Deadlines()
    long_turn = asyncio.ensure_future(_sleeper())
    held = deadlines.watch(long_turn, time.monotonic() + 0.3)
    short = asyncio.ensure_future(_sleeper())
    for _ in range(COMPACT_AT * 3):
        deadlines.end(deadlines.watch(short, time.monotonic() + 60))
    assert len(deadlines) == 1
    assert len(deadlines._entries) <= 2 * COMPACT_AT + 1  # rebuilt without the ended ones
    with pytest.raises(asyncio.CancelledError):
        await long_turn  # still watched after the rebuild
    assert held.expired and not short.done()
    short.cancel()
