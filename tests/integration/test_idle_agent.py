"""An idle agent sleeps: once its instances are synced and unloaded it wakes only for its
heartbeat, in a daemon running in this process (real agent processes, the real
`control.sock`)."""

import asyncio
import os
import time
from pathlib import Path

import msgspec
import uvloop

from goondan.paths import StatePaths
from goondan.settings import DEFAULTS
from tests.integration.in_process_daemon import send, serving_daemon
from tests.proc_table import children, title

QUIET_S = 0.2  # an instance with no turn for this long is synced and unloaded
WATCHED_S = 3.0  # under the heartbeat's interval (5 s)
BUSY_INTERVAL_S = 0.2  # the heartbeat's, for the busy agent


def _agent_pid(name: str) -> int | None:
    """The pid of agent `name`, among this process's descendants (the template's children)."""
    wanted = f"goondan: agent {name} "
    below = children(os.getpid())
    while below:
        pid = below.pop()
        if title(pid).startswith(wanted):
            return pid
        below.extend(children(pid))
    return None


def _wake_ups(pid: int) -> int:
    """How many times `pid`'s threads went to sleep and were woken (voluntary switches)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def test_an_idle_agent_wakes_only_for_its_heartbeat(directory: Path, process_state: None) -> None:
    agent = msgspec.structs.replace(DEFAULTS.agent, quiet_s=QUIET_S)
    settings = msgspec.structs.replace(DEFAULTS, agent=agent)
    assert settings.heartbeat_interval_s() > WATCHED_S
    paths = StatePaths.at(directory / "state")

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        async with serving_daemon(paths, settings):
            await loop.run_in_executor(None, send, paths, "What is 1 plus 2?")
            pid = _agent_pid("assistant")
            assert pid is not None
            # Its instance goes quiet, is synced and unloaded (the events file is fsync'd), and
            # the turn's runtime events are written (their batch is due within ~1.1 s).
            await asyncio.sleep(1.5)
            before = _wake_ups(pid)
            await asyncio.sleep(WATCHED_S)
            return _wake_ups(pid) - before

    started = time.monotonic()
    woken = uvloop.run(scenario())
    assert time.monotonic() - started < 30
    # Nothing to settle: no timer wakes it but the heartbeat's, which may come once in the
    # watch (every QUIET_S / 2 before, ~30 times).
    assert woken <= 2


def test_a_busy_agent_wakes_only_for_its_requests(directory: Path, process_state: None) -> None:
    """Answering at least every half interval puts the heartbeat's timer off, and quiet
    instances are looked for at the turns' ends: a wake-up of a cold process costs ~200 µs at
    1,000 agents. The assistant answers "hello" by itself (no tool, no delegation)."""
    agent = msgspec.structs.replace(DEFAULTS.agent, heartbeat_interval_s=BUSY_INTERVAL_S)
    settings = msgspec.structs.replace(DEFAULTS, agent=agent)
    assert settings.heartbeat_interval_s() == BUSY_INTERVAL_S
    paths = StatePaths.at(directory / "state")

    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        async with serving_daemon(paths, settings):
            await loop.run_in_executor(None, send, paths, "hello")
            pid = _agent_pid("assistant")
            assert pid is not None
            await asyncio.sleep(0.5)  # the first conversation's spares made again
            before = _wake_ups(pid)
            requests = 0
            started = time.monotonic()
            while time.monotonic() - started < WATCHED_S:
                await loop.run_in_executor(None, send, paths, "hello")
                requests += 1
                await asyncio.sleep(BUSY_INTERVAL_S / 5)
            return _wake_ups(pid) - before, requests

    woken, requests = uvloop.run(scenario())
    # One wake-up per request; before, the heartbeat's timer added one every interval (~15
    # in the watch) and the look for instances to settle one every 2.5 s.
    assert requests >= 10
    assert woken <= requests + 3
