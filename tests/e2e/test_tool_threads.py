"""A sync tool handler that never returns (`while True: pass`) with a short timeoutMs, in a real
daemon: the call times out, its thread runs on (Python cannot stop a thread), and the tool is
refused at once until that call returns, so one stuck tool holds one thread, not one per call."""

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.conftest import solo_bundle

SPIN = """\
def run(ctx, args):
    while True:
        pass

handlers = {"run": run}
"""


def spinning_bundle(directory: Path) -> Path:
    calls = {
        "when": "spin",
        "steps": [{"call": "spin__run"}] * 2 + [{"reply": "{{results | json}}"}],
    }
    bundle = solo_bundle(directory, rules=[calls], tool="spin", code=SPIN, grace_s=1)
    main = bundle / "goondan.yaml"
    docs = list(yaml.safe_load_all(main.read_text()))
    for doc in docs:
        if doc["kind"] == "Tool":
            doc["spec"]["timeoutMs"] = 300
    main.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return bundle


def codes(reply: str) -> list[str]:
    return [result["code"] for result in json.loads(reply)]


@pytest.mark.parametrize("spawn", ["zygote", "subprocess"])
def test_a_stuck_sync_tool_is_refused_until_its_call_returns(start_daemon, tmp_path, spawn):
    daemon = start_daemon(spinning_bundle(tmp_path / "b"), "--spawn", spawn)
    first = daemon.send("spin")
    assert first.returncode == 0, first.stderr
    # The first call times out; the second is refused instead of taking another thread.
    assert codes(first.stdout) == ["E_TOOL_TIMEOUT", "E_TOOL_STILL_RUNNING"], first.stdout

    again = daemon.send("spin")  # the thread still spins: both calls are refused at once
    assert codes(again.stdout) == ["E_TOOL_STILL_RUNNING"] * 2, again.stdout
    assert daemon.send("hello").returncode == 0  # the agent serves on

    warnings = [
        json.loads(line)
        for line in daemon.logs().splitlines()
        if line.startswith("{") and "sync tool call timed out" in line
    ]
    assert len(warnings) == 1, daemon.logs()
    assert warnings[0]["tool"] == "spin__run"
    assert warnings[0]["level"] == "warning"

    # A restart frees the thread: the agent exits at once, not at the SIGKILL past the grace
    # period (the interpreter would wait for the thread), and the new process runs the tool.
    restarted = daemon.cli("restart", "--agent", "solo")
    assert restarted.returncode == 0, restarted.stderr
    fresh = daemon.send("spin")
    assert codes(fresh.stdout) == ["E_TOOL_TIMEOUT", "E_TOOL_STILL_RUNNING"], fresh.stdout
    assert "agent did not stop in time" not in daemon.logs()
    assert "exiting with timed-out tool calls still running" in daemon.logs()
