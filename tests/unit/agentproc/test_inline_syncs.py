"""A quiet instance's fsync runs on the agent's loop while the disk is fast, and in a thread for
a while after one fsync was slow."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from agentproc.conversation import read_messages
from agentproc.inline_syncs import InlineSyncs
from goondan.paths import StatePaths
from goondan.settings import Settings
from tests.unit.agentproc.agent_kit import running_agent


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_slow_fsync_sends_the_next_ones_to_a_thread_for_a_while() -> None:
    clock = Clock()
    syncs = InlineSyncs(slow_s=0.02, thread_for_s=60.0, clock=clock)
    ran: list[str] = []

    def fast() -> None:
        clock.now += 0.001
        ran.append("fast")

    def slow() -> None:
        clock.now += 0.5
        ran.append("slow")

    syncs.run(fast)
    assert syncs.inline()
    syncs.run(slow)
    assert ran == ["fast", "slow"]
    assert not syncs.inline()
    clock.now += 59.0
    assert not syncs.inline()
    clock.now += 1.0
    assert syncs.inline()  # the loop tries again


def test_a_failed_fsync_is_raised_and_still_timed() -> None:
    clock = Clock()
    syncs = InlineSyncs(slow_s=0.02, clock=clock)

    def failing() -> None:
        clock.now += 1.0
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError):
        syncs.run(failing)
    assert not syncs.inline()


@pytest.mark.parametrize("slow_s", [10.0, -1.0], ids=["on the loop", "in a thread"])
async def test_a_quiet_conversation_is_fsynced_and_reloads_for_its_next_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, slow_s: float
) -> None:
    """With `slow_s` -1 every fsync counts as slow: the first (k0's) runs on the loop, and the
    next (k1's) in a thread."""
    synced: dict[str, str] = {}  # file -> the thread of its first fsync
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.setdefault(os.readlink(f"/proc/self/fd/{fd}"), threading.current_thread().name)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    settings = Settings.from_mapping({"agent": {"quiet_s": 0.2}})
    paths = StatePaths.at(tmp_path / "state")
    events = {
        key: str(paths.conversation_dir("s", key, "a").with_name("a+events.jsonl"))
        for key in ("k0", "k1")
    }
    async with running_agent(
        tmp_path, "You said: {{input}}", settings=settings, inline_syncs=InlineSyncs(slow_s=slow_s)
    ) as orchestrator:
        for key in ("k0", "k1"):
            assert (await orchestrator.ask(key, f"hello {key}")).status == "ok"
            for _ in range(250):  # quiet after 0.2 s, looked at every 0.1 s
                if events[key] in synced:
                    break
                await asyncio.sleep(0.02)
        again = await orchestrator.ask("k1", "again")
        assert again.response == "You said: again"
    loop_thread = threading.main_thread().name
    assert synced[events["k0"]] == loop_thread
    assert (synced[events["k1"]] == loop_thread) == (slow_s > 0)
    # Unloaded once synced, and loaded again for the next turn: nothing lost.
    stored = read_messages(paths.conversation_dir("s", "k1", "a"))
    assert [m.content for m in stored] == [
        "hello k1",
        "You said: hello k1",
        "again",
        "You said: again",
    ]
