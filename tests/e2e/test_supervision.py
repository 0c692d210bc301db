"""Supervision: hung agents, crash loops, redelivery — with real processes."""

import os
import signal
import time

from tests.e2e.conftest import QUICKSTART, pid_alive, wait_for, write_bundle

BLOCKING_BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "block"
        steps:
          - call: stuck__run
            args: {}
          - call: stuck__run
            args: {}
          - reply: "unreachable"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: stuck}
spec:
  entry: ./stuck.py
  exports:
    - name: run
      description: Blocks the event loop (a bug in an async tool).
      parameters: {type: object, properties: {}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: solo}
spec:
  modelConfig: {modelRef: Model/m}
  tools: [{ref: Tool/stuck}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/solo
  agents: [{ref: Agent/solo}]
  policy: {shutdown: {gracePeriodSeconds: 2}}
"""

STUCK = """\
import time

async def run(ctx, args):
    time.sleep(30)  # blocks the agent's event loop: no heartbeats
    return {}

handlers = {"run": run}
"""


def test_a_stopped_agent_is_detected_by_heartbeat_and_replaced(start_daemon):
    daemon = start_daemon(QUICKSTART, "--hang-timeout", "1")
    assert daemon.send("What is 1 plus 1?").returncode == 0
    old = daemon.process("researcher")["pid"]
    os.kill(old, signal.SIGSTOP)
    started = time.monotonic()
    wait_for(lambda: daemon.process("researcher")["restarts"] == 1, timeout=10)
    assert time.monotonic() - started < 4  # timeout + one check interval, with slack
    assert not pid_alive(old)
    assert "agent hung (no heartbeat)" in daemon.logs()
    assert daemon.send("What is 2 plus 2?").returncode == 0


def test_a_request_that_hangs_its_agent_twice_fails_instead_of_hanging(start_daemon, tmp_path):
    bundle = write_bundle(tmp_path / "b", BLOCKING_BUNDLE, {"stuck.py": STUCK})
    daemon = start_daemon(bundle, "--hang-timeout", "1")
    started = time.monotonic()
    proc = daemon.send("block")
    assert proc.returncode == 1
    assert "E_AGENT_CRASHED" in proc.stderr
    assert time.monotonic() - started < 10
    # delivered, killed; redelivered once (the turn resumed at its second tool call), killed
    # again: then the caller got its answer
    assert daemon.logs().count("agent hung (no heartbeat)") == 2


def test_input_accepted_before_an_orchestrator_kill_is_answered_after_restart(
    start_daemon, tmp_path, state_root
):
    import json
    import subprocess

    from tests.e2e.conftest import GOONDAN
    from tests.e2e.test_delegation import BUNDLE, SLOW_TOOL

    bundle = write_bundle(tmp_path / "b", BUNDLE, {"slow.py": SLOW_TOOL})
    daemon = start_daemon(bundle)
    workdir = state_root / "swarms/default/workspaces/cli"
    workdir.mkdir(parents=True)
    (workdir / "delay").write_text("30")
    sender = subprocess.Popen(
        [*GOONDAN, "send", "work please", "--agent", "sleeper", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: (workdir / "attempts").exists(), timeout=15)
    agent_pids = [p["pid"] for p in daemon.status()["processes"] if p["pid"]]
    daemon.proc.kill()  # SIGKILL: no clean shutdown, nothing flushed on purpose
    daemon.proc.wait()
    _, err = sender.communicate(timeout=10)
    assert sender.returncode == 2 and "stopped before answering" in err
    wait_for(lambda: not any(pid_alive(pid) for pid in agent_pids), timeout=2)

    # A new orchestrator on the same state root takes over and answers the journaled input.
    (workdir / "delay").write_text("0")
    restarted = start_daemon(bundle)
    convo = state_root / "swarms/default/instances/cli/sleeper/base.jsonl"

    def answered() -> bool:
        lines = convo.read_text().splitlines() if convo.exists() else []
        return bool(lines) and json.loads(lines[-1]).get("content") == "attempt E_TOOL_INTERRUPTED"

    wait_for(answered, timeout=15)
    assert "delivering unanswered inputs from the journal" in restarted.logs()
    # answered once: the journal is empty again
    wait_for(lambda: b'"done"' in (state_root / "run/journal.jsonl").read_bytes(), timeout=5)
    assert (workdir / "attempts").read_text() == "1"
