"""Agent-to-agent requests through the orchestrator: answers, errors as data, no hangs."""

import json
import os
import signal
import subprocess

import pytest

from tests.e2e.conftest import GOONDAN, wait_for, write_bundle

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: caller-script}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "ask (\\\\w+) with (\\\\d+)ms"
        steps:
          - call: agents__request
            args: {target: "{{match.1}}", input: "work please", timeoutMs: "{{match.2 | int}}"}
          - reply: "{{result}}"
      - when: "loop"
        steps:
          - call: agents__request
            args: {target: looper, input: "loop back"}
          - reply: "{{result.response}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: looper-script}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "loop"
        steps:
          - call: agents__request
            args: {target: caller, input: "loop again"}
          - reply: "{{result.code}}: {{result.message}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: sleeper-script}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "work"
        steps:
          - call: slow__run
            args: {}
          - reply: "attempt {{result.attempt}}{{result.code}}"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: slow}
spec:
  entry: ./slow.py
  exports:
    - name: run
      description: Takes a while; counts its attempts in the workdir.
      parameters: {type: object, properties: {}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: caller}
spec:
  modelConfig: {modelRef: Model/caller-script}
  tools:
    - ref: {kind: Tool, name: agents, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: looper}
spec:
  modelConfig: {modelRef: Model/looper-script}
  tools:
    - ref: {kind: Tool, name: agents, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: sleeper}
spec:
  modelConfig: {modelRef: Model/sleeper-script}
  tools:
    - ref: Tool/slow
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/caller
  agents:
    - ref: Agent/caller
    - ref: Agent/looper
    - ref: Agent/sleeper
  policy:
    shutdown: {gracePeriodSeconds: 5}
"""

SLOW_TOOL = """\
import time

def run(ctx, args):
    marker = ctx.workdir / "attempts"
    attempt = int(marker.read_text()) + 1 if marker.exists() else 1
    marker.write_text(str(attempt))
    delay = ctx.workdir / "delay"
    time.sleep(float(delay.read_text()) if delay.exists() else 1.0)
    return {"attempt": attempt}

handlers = {"run": run}
"""


@pytest.fixture
def bundle(tmp_path):
    return write_bundle(tmp_path / "b", BUNDLE, {"slow.py": SLOW_TOOL})


def test_request_timeout_comes_back_as_a_tool_error(start_daemon, bundle):
    daemon = start_daemon(bundle)
    proc = daemon.send("ask sleeper with 300ms")
    assert proc.returncode == 0, proc.stderr
    error = json.loads(proc.stdout)
    assert error["code"] == "AGENT_REQUEST_TIMEOUT"
    assert error["message"] == "Agent request to 'sleeper' timed out after 300ms"
    assert error["name"] == "RequestTimeout"


def test_successful_request_across_processes(start_daemon, bundle):
    daemon = start_daemon(bundle)
    proc = daemon.send("ask sleeper with 20000ms")
    output = json.loads(proc.stdout)
    assert output["target"] == "sleeper" and output["response"] == "attempt 1"
    assert output["instanceKey"] == "cli" and output["correlationId"]


def test_unknown_target_comes_back_as_a_tool_error(start_daemon, bundle):
    daemon = start_daemon(bundle)
    proc = daemon.send("ask ghost with 1000ms")
    error = json.loads(proc.stdout)
    assert error["code"] == "AGENT_NOT_FOUND"
    assert error["message"].startswith("Agent 'ghost' is not in this swarm")


def test_circular_call_is_refused_with_the_chain(start_daemon, bundle):
    daemon = start_daemon(bundle)
    proc = daemon.send("loop")
    # caller -> looper -> caller: the looper's request fails, and it reports that to the caller
    assert "Circular call detected: caller -> looper -> caller" in proc.stdout


def test_busy_agent_killed_mid_request_is_redelivered_once(start_daemon, bundle, state_root):
    daemon = start_daemon(bundle)
    workdir = state_root / "swarms/default/workspaces/cli"
    workdir.mkdir(parents=True)
    (workdir / "delay").write_text("1.5")

    pending = subprocess.Popen(
        [*GOONDAN, "send", "ask sleeper with 30000ms", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: (workdir / "attempts").exists(), timeout=15)
    os.kill(daemon.process("sleeper")["pid"], signal.SIGKILL)
    out, err = pending.communicate(timeout=30)
    assert pending.returncode == 0, err + daemon.logs()
    # The orchestrator respawned the sleeper and delivered the same request again; the
    # sleeper recognised it and resumed the turn: the interrupted call got an error result
    # (the tool did not run twice) and the model went on from there.
    assert json.loads(out)["response"] == "attempt E_TOOL_INTERRUPTED"
    assert (workdir / "attempts").read_text() == "1"
    assert daemon.process("sleeper")["restarts"] == 1
