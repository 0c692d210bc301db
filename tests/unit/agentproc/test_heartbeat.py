"""An agent's heartbeat: sent while it is idle, left out while its answers show it alive (the
orchestrator takes any frame as a sign of life)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
