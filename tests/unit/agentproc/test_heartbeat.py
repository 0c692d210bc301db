"""An agent's heartbeat: sent while it is idle, left out while its answers show it alive (the
orchestrator takes any frame as a sign of life)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentproc.heartbeat import Heartbeat
from goondan.settings import Settings
from ipc import wire
from tests.unit.agentproc.agent_kit import Orchestrator, running_agent

INTERVAL_S = 0.3


@pytest.fixture
async def peer(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    settings = Settings.from_mapping({"agent": {"heartbeat_interval_s": INTERVAL_S}})
    async with running_agent(tmp_path, settings=settings) as orchestrator:
        yield orchestrator


async def test_an_idle_agent_sends_heartbeats(peer: Orchestrator) -> None:
    await peer.listen(INTERVAL_S * 4.5)
    assert peer.received.count(wire.HEARTBEAT) >= 3


async def test_an_agent_that_answers_sends_no_heartbeat_meanwhile(peer: Orchestrator) -> None:
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < INTERVAL_S * 4.5:  # 4 heartbeats if it were idle
        await peer.ask()
        n += 1
        await asyncio.sleep(INTERVAL_S / 6)
    assert peer.received.count(wire.DELEGATE_RESULT) == n
    # A stall of the test's own loop (a loaded machine) may let one through, not more.
    assert peer.received.count(wire.HEARTBEAT) <= 1


TICK_INTERVAL_S = 0.4  # the class's own tests: long beside a loaded machine's loop stalls


class Ticks:
    """A `Heartbeat`'s ticks: when, and whether each sent a heartbeat (as the agent does, when
    nothing was sent for an interval)."""

    def __init__(self, *, put_off: bool = True) -> None:
        self.at: list[tuple[float, bool]] = []
        self.heartbeat = Heartbeat(TICK_INTERVAL_S, self.tick, put_off=put_off)

    def tick(self, now: float) -> None:
        due = now - self.heartbeat.last_sent >= TICK_INTERVAL_S
        if due:
            self.heartbeat.last_sent = now
        self.at.append((now, due))

    def frame(self) -> float:
        """The agent answered a request: a frame went out."""
        now = self.heartbeat.last_sent = time.monotonic()
        self.heartbeat.answered(now)
        return now


async def test_answers_put_the_tick_off_and_stop_ends_the_ticks() -> None:
    ticks = Ticks()
    ticks.heartbeat.start()
    await asyncio.sleep(TICK_INTERVAL_S * 2.5)
    idle = len(ticks.at)
    assert idle >= 2 and all(sent for _, sent in ticks.at)  # idle: a heartbeat each interval
    for _ in range(10):  # answering every tenth of an interval: never woken for a tick
        await asyncio.sleep(TICK_INTERVAL_S / 10)
        ticks.frame()
    assert len(ticks.at) == idle
    ticks.heartbeat.stop()
    await asyncio.sleep(TICK_INTERVAL_S * 1.5)
    assert len(ticks.at) == idle


async def test_a_tick_that_was_not_put_off_waits_out_the_last_frames_interval() -> None:
    """With `--metrics` (`put_off=False`) answers do not move the tick: one that finds a frame
    sent since sends nothing, and the next comes an interval after that frame."""
    ticks = Ticks(put_off=False)
    ticks.heartbeat.start()
    await asyncio.sleep(TICK_INTERVAL_S / 2)
    sent = ticks.frame()
    await asyncio.sleep(TICK_INTERVAL_S * 2)
    ticks.heartbeat.stop()
    (first, first_sent), (second, second_sent) = ticks.at[:2]
    assert first - sent < TICK_INTERVAL_S and not first_sent  # not put off, and nothing due
    assert second - sent >= TICK_INTERVAL_S and second_sent
