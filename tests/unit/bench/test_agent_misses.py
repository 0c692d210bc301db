"""`python -m bench.agent_misses` counts an agent's whole path per delegate: the agent it runs
under cachegrind is the product's, answering over a real socket, and its driver checks every
answer and notices an agent that died."""

import subprocess
import sys
from pathlib import Path

import pytest

from bench.agent_misses import BARE, counted_agent, drive, drive_bare


def test_the_counted_agent_answers_every_delegate_and_stops(tmp_path: Path) -> None:
    command, router = counted_agent(tmp_path, 1)
    agent = subprocess.Popen(command)
    try:
        drive(router, agent, 12)  # raises unless each answer is `pong`, to its own request
        assert agent.wait(timeout=30) == 0
    finally:
        agent.kill()
        router.close()
    # Two conversations, as figures 7 and 14 move to a new one every tenth delegate.
    instances = tmp_path / "state" / "swarms" / "bench" / "instances"
    assert sorted(p.name for p in instances.iterdir()) == ["k0", "k1"]


def test_an_agent_that_dies_is_reported_not_waited_for(tmp_path: Path) -> None:
    _, router = counted_agent(tmp_path, 0)
    dead = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    try:
        with pytest.raises(RuntimeError, match="exited 3 before its ready"):
            drive(router, dead, 1)
    finally:
        router.close()


def test_the_bare_agent_is_counted_the_same_way(tmp_path: Path) -> None:
    command, router = counted_agent(tmp_path, 1, BARE)
    agent = subprocess.Popen(command)
    try:
        drive_bare(router, agent, 12)  # raises unless each answer is its own request's
        assert agent.wait(timeout=30) == 0  # stopped by the driver, not killed
    finally:
        agent.kill()
        router.close()
