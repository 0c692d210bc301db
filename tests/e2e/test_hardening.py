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
