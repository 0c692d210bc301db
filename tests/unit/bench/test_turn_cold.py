"""`python -m bench.turn_cold` times the product's own turn: each one answered and written to its
conversation, the runtime events to the agent's file."""

import subprocess
import sys
from pathlib import Path

import pytest
import uvloop

from agentproc.conversation import read_messages
from agentproc.runtime_events import EVENTS_FILE
from bench.turn_cold import TURNS_PER_CONVERSATION, cpu_per_turn


@pytest.mark.parametrize("stride", [64, 4096], ids=["every cache line", "every page"])
def test_each_timed_turn_is_a_whole_turn_of_the_product(tmp_path: Path, stride: int) -> None:
    turns = TURNS_PER_CONVERSATION + 5
    spent = uvloop.run(cpu_per_turn(tmp_path, turns, evict_mib=1, stride=stride))
    assert len(spent) == turns - turns // 5  # the first fifth is not counted
    assert all(us > 0 for us in spent)
    first = read_messages(tmp_path / "k0" / "cold")
    assert [m.content for m in first] == ["ping", "pong"] * TURNS_PER_CONVERSATION
    assert len(read_messages(tmp_path / "k1" / "cold")) == 2 * 5  # a new one every tenth
    lines = (tmp_path / EVENTS_FILE).read_text().splitlines()
    assert sum('"turn.completed"' in line for line in lines) == turns


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--turns", "0"], "--turns"),
        (["--stride", "0"], "--stride"),
        (["--evict", "-1"], "--evict"),
    ],
)
def test_bad_arguments_are_refused_with_what_is_wrong(args: list[str], named: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.turn_cold", *args], capture_output=True, text=True
    )
    assert proc.returncode == 2 and named in proc.stderr and "Traceback" not in proc.stderr
