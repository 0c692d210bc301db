"""An agent's stray stdout (a tool's print(), a C library writing to fd 1) never breaks the
daemon's JSON log: printed lines become log lines with event "stdout"."""

from __future__ import annotations

import json

from tests.e2e.conftest import solo_bundle

LOUD = """\
import os

async def run(ctx, args):
    print("hello from the tool\\nsecond line", flush=True)
    print("partial", end="")
    os.write(1, b"raw bytes on fd 1\\n")  # as a C library would
    return {"done": True}

handlers = {"run": run}
"""


def test_a_tool_that_prints_leaves_the_log_json(start_daemon, tmp_path) -> None:
    loud = {"when": "loud", "steps": [{"call": "loud__run"}, {"reply": "printed"}]}
    daemon = start_daemon(solo_bundle(tmp_path / "b", rules=[loud], tool="loud", code=LOUD))
    proc = daemon.send("loud")
    assert proc.returncode == 0, proc.stderr
    assert daemon.stop() == 0
    records = []
    log = daemon.stderr_path.read_text()
    for line in log.splitlines():
        records.append(json.loads(line))  # every line of the daemon's stderr is one JSON object
    printed = [(r["agent"], r["text"]) for r in records if r["event"] == "stdout"]
    assert ("solo", "hello from the tool") in printed
    assert ("solo", "second line") in printed
    assert ("solo", "partial") in printed  # flushed at exit
    assert "raw bytes on fd 1" not in log


def test_a_real_agents_bash_cannot_reach_the_daemon(start_daemon, tmp_path, state_root) -> None:
    # The agent exports its state root, so its tools see neither the sockets nor the journal;
    # the daemon's and the agent's environ (with the key) are outside the tool's /proc.
    command = (
        f"ls {state_root}/run; cat /proc/$PPID/environ /proc/1/environ | tr '\\0' '\\n'; "
        "echo MARK > mine.txt; cat mine.txt"
    )
    peek = {
        "when": "peek",
        "steps": [{"call": "bash__exec", "args": {"command": command}}, {"reply": "{{result}}"}],
    }
    bundle = solo_bundle(tmp_path / "b", rules=[peek], base_tools=("bash",))
    daemon = start_daemon(bundle, env={"OPENAI_API_KEY": "sk-e2e-secret-77"})
    proc = daemon.send("peek")
    assert proc.returncode == 0, proc.stderr
    assert "No such file" in proc.stdout  # the peeks ran
    assert "MARK" in proc.stdout  # its own workdir works
    assert "agents.sock" not in proc.stdout and "control.sock" not in proc.stdout
    assert "sk-e2e-secret-77" not in proc.stdout
