"""Cancelling a running turn (`goondan cancel`, Ctrl-C on `send`): the model call and the tool
calls stop, delegations down the chain are cancelled too, the conversation records it with no
dangling tool call, and the requester hears E_TURN_CANCELLED."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from agentproc.conversation import read_messages
from agentproc.messages import Message
from goondan.paths import conversation_stored
from tests.e2e.conftest import GOONDAN, Daemon, pid_alive, wait_for, write_bundle

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: front-script}}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "^async"
        steps: [{{call: slowa__run}}, {{reply: "async done"}}]
      - when: "^sync"
        steps: [{{call: slows__run}}, {{reply: "sync done"}}]
      - when: "^bash"
        steps:
          - call: bash__exec
            args: {{command: "touch {marker}; sleep {sleep}; echo not killed"}}
          - reply: "bash done"
      - when: "^delegate"
        steps:
          - call: agents__request
            args: {{target: back, input: "async please"}}
          - reply: "{{{{result.response}}}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: back-script}}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "^async"
        steps: [{{call: slowa__run}}, {{reply: "back done"}}]
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: slowa}}
spec:
  entry: ./slowa.py
  exports: [{{name: run, description: async and slow, parameters: {{type: object}}}}]
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: slows}}
spec:
  entry: ./slows.py
  exports: [{{name: run, description: sync and slow, parameters: {{type: object}}}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: front}}
spec:
  modelConfig: {{modelRef: Model/front-script}}
  tools:
    - ref: Tool/slowa
    - ref: Tool/slows
    - ref: {{kind: Tool, name: bash, package: "@goondan/base"}}
    - ref: {{kind: Tool, name: agents, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: back}}
spec:
  modelConfig: {{modelRef: Model/back-script}}
  tools:
    - ref: Tool/slowa
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: Agent/front
  agents: [{{ref: Agent/front}}, {{ref: Agent/back}}]
  policy:
    shutdown: {{gracePeriodSeconds: 2}}
"""

SLOW_ASYNC = """\
import asyncio

async def run(ctx, args):
    await asyncio.sleep(100)
    return {}

handlers = {"run": run}
"""

SLOW_SYNC = """\
import time
from pathlib import Path

def run(ctx, args):
    started = time.monotonic()
    while not ctx.cancelled and time.monotonic() - started < 100:
        time.sleep(0.05)
    Path(%r).write_text("noticed" if ctx.cancelled else "not told")
    return {}

handlers = {"run": run}
"""


SLEEP = f"{100 + random.random():.6f}"  # a command line no other process has


def sleepers() -> list[int]:
    """The pids of our `sleep SLEEP` (the sandbox hides host pids from the command itself)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes() == (
                f"sleep\0{SLEEP}\0".encode()
            ):
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.fixture
def swarm(start_daemon, tmp_path: Path) -> tuple[Daemon, Path]:
    marks = tmp_path / "marks"
    marks.mkdir()
    bundle = write_bundle(
        tmp_path / "b",
        BUNDLE.format(marker=marks / "bash.started", sleep=SLEEP),
        {"slowa.py": SLOW_ASYNC, "slows.py": SLOW_SYNC % str(marks / "sync")},
    )
    return start_daemon(bundle), marks


def events(state_root: Path, agent: str) -> list[dict[str, Any]]:
    path = state_root / f"swarms/default/agents/{agent}/runtime-events.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def wait_event(state_root: Path, agent: str, type_: str, count: int = 1) -> None:
    wait_for(
        lambda: sum(e["type"] == type_ for e in events(state_root, agent)) >= count, timeout=30
    )


def start_send(state_root: Path, text: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*GOONDAN, "send", text, "--state-root", str(state_root), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def conversation(state_root: Path, agent: str, key: str = "cli") -> list[Message]:
    return read_messages(state_root / f"swarms/default/instances/{key}/{agent}")


def assert_cancelled_cleanly(messages: list[Message]) -> None:
    """Every tool call has its result, the cancelled ones say so, and the turn ends with the
    cancel notice."""
    calls = {c.id for m in messages if m.role == "assistant" for c in m.tool_calls}
    results = {m.tool_call_id: m for m in messages if m.role == "tool"}
    assert calls == set(results), messages
    assert any("E_TOOL_CANCELLED" in (m.content or "") for m in results.values()), messages
    last = messages[-1]
    assert last.role == "assistant" and last.metadata.get("__goondanCancelled"), messages


def cancel(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    return daemon.cli("cancel", *args)


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_cancel_a_turn_in_a_slow_tool(swarm, state_root, kind):
    daemon, marks = swarm
    proc = start_send(state_root, kind)
    wait_event(state_root, "front", "tool.called")
    done = cancel(daemon, "--instance", "cli")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("cancelled front/cli trace "), done.stdout
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 1 and "E_TURN_CANCELLED" in err, (out, err)
    assert_cancelled_cleanly(conversation(state_root, "front"))
    finished = [e for e in events(state_root, "front") if e["type"] == "turn.failed"]
    assert finished[-1]["data"]["errorCode"] == "E_TURN_CANCELLED"
    if kind == "sync":  # the thread was told, and returned
        wait_for(lambda: (marks / "sync").exists(), timeout=10)
        assert (marks / "sync").read_text() == "noticed"
    # Nothing runs any more: a second cancel finds nothing, and the instance goes on.
    assert cancel(daemon, "--instance", "cli").returncode == 1
    again = daemon.send("hello there", timeout=30)
    assert again.returncode == 0, again.stderr


def test_cancel_kills_the_process_group_of_bash(swarm, state_root):
    daemon, marks = swarm
    proc = start_send(state_root, "bash")
    wait_for(lambda: (marks / "bash.started").exists() and sleepers(), timeout=30)
    assert cancel(daemon, "--agent", "front").returncode == 0
    _, err = proc.communicate(timeout=20)
    assert "E_TURN_CANCELLED" in err
    wait_for(lambda: not [pid for pid in sleepers() if pid_alive(pid)], timeout=10)
    assert_cancelled_cleanly(conversation(state_root, "front"))


def test_cancel_goes_down_a_delegation_chain(swarm, state_root):
    daemon, _ = swarm
    proc = start_send(state_root, "delegate")
    wait_event(state_root, "back", "tool.called")
    done = cancel(daemon, "--agent", "front", "--json")
    assert done.returncode == 0, done.stderr
    turns = json.loads(done.stdout)
    assert {t["agent"] for t in turns} == {"front", "back"}, turns
    assert len({t["traceId"] for t in turns}) == 1
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1 and "E_TURN_CANCELLED" in err, err

    # Both turns ended as cancelled, and both conversations say so.
    def ended_cancelled(agent: str) -> bool:
        return any(
            e["type"] == "turn.failed" and e["data"].get("errorCode") == "E_TURN_CANCELLED"
            for e in events(state_root, agent)
        )

    wait_for(lambda: ended_cancelled("front") and ended_cancelled("back"), timeout=20)
    assert_cancelled_cleanly(conversation(state_root, "front"))
    back_keys = list((state_root / "swarms/default/instances").iterdir())
    back = [read_messages(k / "back") for k in back_keys if conversation_stored(k / "back")]
    assert len(back) == 1
    assert_cancelled_cleanly(back[0])


def test_cancel_by_trace_id(swarm, state_root):
    daemon, _ = swarm
    proc = start_send(state_root, "async", "--instance", "one")
    wait_event(state_root, "front", "tool.called")
    trace = next(e["traceId"] for e in events(state_root, "front") if e["type"] == "tool.called")
    assert cancel(daemon, "--trace", "0" * 32).returncode == 1  # matches nothing
    done = cancel(daemon, "--trace", trace)
    assert done.returncode == 0 and trace in done.stdout, done
    _, err = proc.communicate(timeout=20)
    assert "E_TURN_CANCELLED" in err


def test_cancel_needs_a_filter(swarm, state_root):
    daemon, _ = swarm
    done = cancel(daemon)
    assert done.returncode == 2 and "--all" in done.stderr
    assert cancel(daemon, "--all").returncode == 1  # nothing runs
    assert cancel(daemon, "--agent", "nobody").returncode == 2


def test_cancel_without_a_daemon(state_root):
    done = subprocess.run(
        [*GOONDAN, "cancel", "--all", "--state-root", str(state_root)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr


def test_ctrl_c_on_send_cancels_its_turn(swarm, state_root):
    daemon, _ = swarm
    proc = start_send(state_root, "async")
    wait_event(state_root, "front", "tool.called")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "cancelled 1 turn" in err, err
    wait_event(state_root, "front", "turn.failed")
    assert_cancelled_cleanly(conversation(state_root, "front"))
    logs = daemon.cli("logs", "--json", "--instance", "cli")
    lines = [json.loads(line) for line in logs.stdout.splitlines()]
    ended = [e for e in lines if e["type"] == "turn.failed"]
    assert ended and ended[-1]["data"]["errorCode"] == "E_TURN_CANCELLED"
    time.sleep(0.2)
    assert daemon.send("hello again", timeout=30).returncode == 0


def test_a_cancelled_request_is_not_delivered_again_after_a_crash(
    swarm, state_root, start_daemon, tmp_path
):
    daemon, _ = swarm
    proc = start_send(state_root, "async", "--instance", "j")
    wait_event(state_root, "front", "tool.called")
    trace = next(e["traceId"] for e in events(state_root, "front") if e["type"] == "tool.called")
    assert cancel(daemon, "--instance", "j").returncode == 0
    _, err = proc.communicate(timeout=20)
    assert "E_TURN_CANCELLED" in err
    daemon.proc.kill()  # SIGKILL: only what the journal holds survives
    daemon.proc.wait()
    (state_root / "run/orchestrator.json").unlink()  # so the next one is awaited
    again = start_daemon(tmp_path / "b")
    assert again.send("hello", "--instance", "other", timeout=30).returncode == 0
    time.sleep(1)  # a redelivery would have started by now, before or with that turn
    started = [
        e
        for e in events(state_root, "front")
        if e["type"] == "turn.started" and e["traceId"] == trace
    ]
    assert len(started) == 1, started
    assert "delivering unanswered inputs" not in again.logs()


def test_a_queued_request_is_cancelled_before_its_turn(swarm, state_root):
    daemon, _ = swarm
    running = start_send(state_root, "async", "--instance", "q")
    wait_event(state_root, "front", "tool.called")
    queued = start_send(state_root, "hello, are you there", "--instance", "q")
    time.sleep(1)  # it waits behind the running turn of the same instance
    done = cancel(daemon, "--instance", "q", "--json")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)) == 2, done.stdout
    for proc in (running, queued):
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 1 and "E_TURN_CANCELLED" in err, err
    messages = conversation(state_root, "front", "q")
    assert not any("are you there" in (m.content or "") for m in messages)  # never ran
    assert_cancelled_cleanly(messages)


# -- requests no process holds yet, and the webhook ------------------------------------------

GATED_IMPORT = """\
import time
from pathlib import Path

# The agent is not ready until the test opens the gate: requests wait in its inbox.
while not Path(%r).exists():
    time.sleep(0.05)

def run(ctx, args):
    return {}

handlers = {"run": run}
"""

GATED_AGENT = """\
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: gated}}
spec:
  entry: ./gated.py
  exports: [{{name: run, description: loads slowly, parameters: {{type: object}}}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: late}}
spec:
  modelConfig: {{modelRef: Model/back-script}}
  tools: [{{ref: Tool/gated}}]
"""


def test_a_request_waiting_for_its_agent_to_start_is_cancelled(start_daemon, tmp_path, state_root):
    gate = tmp_path / "gate"
    text = BUNDLE.format(marker=tmp_path / "unused", sleep=SLEEP) + GATED_AGENT.format()
    text = text.replace(
        "agents: [{ref: Agent/front}, {ref: Agent/back}]",
        "agents: [{ref: Agent/front}, {ref: Agent/back}, {ref: Agent/late}]",
    )
    bundle = write_bundle(
        tmp_path / "b",
        text,
        {"slowa.py": SLOW_ASYNC, "slows.py": SLOW_SYNC % "x", "gated.py": GATED_IMPORT % str(gate)},
    )
    daemon = start_daemon(bundle)
    proc = start_send(state_root, "async", "--agent", "late", "--instance", "w")
    wait_for(lambda: daemon.process("late")["status"] == "spawning", timeout=30)
    time.sleep(0.3)  # its request is in the inbox
    done = cancel(daemon, "--agent", "late", "--json")
    assert done.returncode == 0, done.stderr
    [turn] = json.loads(done.stdout)
    assert (turn["agent"], turn["instanceKey"]) == ("late", "w"), turn
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1 and "E_TURN_CANCELLED" in err, err
    gate.touch()  # the agent starts now: the cancelled request must not run
    wait_for(lambda: daemon.process("late")["status"] == "idle", timeout=30)
    assert daemon.send("async", "--agent", "late", "--instance", "w2", timeout=30).returncode == 0
    started = [e for e in events(state_root, "late") if e["type"] == "turn.started"]
    assert [e["instanceKey"] for e in started] == ["w2"], started


WEBHOOK_SECRET = "cancel-test-secret"
WEBHOOK_CONNECTION = """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {{name: http-in}}
spec:
  connectorRef: {{kind: Connector, name: webhook, package: "@goondan/base"}}
  config:
    PORT: {{value: "{port}"}}
  secrets:
    SIGNING_SECRET: {{valueFrom: {{env: WEBHOOK_SECRET}}}}
  ingress:
    rules:
      - route: {{}}
"""


def post(port: int, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    data = json.dumps(body).encode()
    timestamp = str(int(time.time()))
    digest = hmac.new(
        WEBHOOK_SECRET.encode(), f"{timestamp}.".encode() + data, hashlib.sha256
    ).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Webhook-Timestamp": timestamp,
        "X-Signature-256": f"sha256={digest}",
    }
    url = f"http://127.0.0.1:{port}{path}"
    request = urllib.request.Request(url, data, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=40) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def webhook_swarm(start_daemon, tmp_path: Path) -> tuple[Daemon, int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    text = BUNDLE.format(marker=tmp_path / "unused", sleep=SLEEP) + WEBHOOK_CONNECTION.format(
        port=port
    )
    files = {"slowa.py": SLOW_ASYNC, "slows.py": SLOW_SYNC % str(tmp_path / "sync")}
    daemon = start_daemon(
        write_bundle(tmp_path / "b", text, files), env={"WEBHOOK_SECRET": WEBHOOK_SECRET}
    )
    wait_for(lambda: daemon.process("http-in")["status"] == "idle", timeout=30)
    return daemon, port


def test_the_webhook_cancels_a_trace_it_started(webhook_swarm, state_root):
    daemon, port = webhook_swarm
    status, accepted = post(port, "/", {"text": "delegate", "instanceKey": "hook"})
    assert status == 202, accepted
    trace = accepted["traceId"]
    wait_event(state_root, "back", "tool.called")
    status, body = post(port, "/cancel", {"traceId": trace})
    assert (status, body) == (200, {"cancelled": 2, "traceId": trace})

    def ended_cancelled(agent: str) -> bool:
        return any(
            e["type"] == "turn.failed"
            and e["traceId"] == trace
            and e["data"].get("errorCode") == "E_TURN_CANCELLED"
            for e in events(state_root, agent)
        )

    wait_for(lambda: ended_cancelled("front") and ended_cancelled("back"), timeout=20)
    assert_cancelled_cleanly(conversation(state_root, "front", "hook"))
    # Done: nothing more to cancel under that trace. (A second later: the same signed body
    # within the same second is a replay, refused with 409.)
    time.sleep(1.1)
    assert post(port, "/cancel", {"traceId": trace}) == (200, {"cancelled": 0, "traceId": trace})


def test_the_webhook_cannot_cancel_a_turn_it_did_not_start(webhook_swarm, state_root):
    daemon, port = webhook_swarm
    proc = start_send(state_root, "async", "--instance", "cli-only")
    wait_event(state_root, "front", "tool.called")
    trace = next(e["traceId"] for e in events(state_root, "front") if e["type"] == "tool.called")
    assert post(port, "/cancel", {"traceId": trace}) == (200, {"cancelled": 0, "traceId": trace})
    assert post(port, "/cancel", {"trace": trace})[0] == 400
    time.sleep(0.5)
    assert proc.poll() is None  # the CLI's turn runs on
    assert cancel(daemon, "--trace", trace).returncode == 0
    _, err = proc.communicate(timeout=20)
    assert "E_TURN_CANCELLED" in err


def test_a_caller_waiting_on_the_webhook_hears_its_cancel(webhook_swarm, state_root):
    daemon, port = webhook_swarm
    answers: list[tuple[int, dict[str, Any]]] = []
    waiter = threading.Thread(
        target=lambda: answers.append(
            post(port, "/", {"text": "async", "instanceKey": "waiting", "wait": True})
        )
    )
    waiter.start()
    wait_event(state_root, "front", "tool.called")
    trace = next(e["traceId"] for e in events(state_root, "front") if e["type"] == "tool.called")
    assert post(port, "/cancel", {"traceId": trace}) == (200, {"cancelled": 1, "traceId": trace})
    waiter.join(timeout=30)
    [(status, body)] = answers
    assert status == 502 and body["error"]["code"] == "E_TURN_CANCELLED", body
