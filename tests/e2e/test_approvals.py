"""Approvals: a tool call in `toolPolicy.requireApproval` waits for `goondan approve` / `deny`,
with real processes: the daemon, the agent, the CLI."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import GOONDAN, Daemon, wait_for, write_bundle

ACT = """\
import os
from pathlib import Path

async def run(ctx, args):
    Path(os.environ["ACT_MARKER"]).write_text(args.get("what", ""))
    return {"did": args.get("what")}

handlers = {"run": run}
"""


def approval_bundle(
    directory: Path,
    *,
    timeout_s: float | None = None,
    turn_s: float | None = None,
    agent_requires: str = '["act__*"]',
) -> Path:
    policy = f"        requireApproval: {agent_requires}\n"
    if timeout_s is not None:
        policy += f"        approvalTimeoutSeconds: {timeout_s}\n"
    yaml_text = (
        """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "do (\\\\w+)"
        steps:
          - call: act__run
            args: {what: "{{match.1}}"}
          - reply: "done: {{result}}"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: act}
spec:
  entry: ./act.py
  exports:
    - name: run
      description: does something a human must allow
      parameters: {type: object, properties: {what: {type: string}}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: solo}
spec:
  modelConfig: {modelRef: Model/m}
  tools: [{ref: Tool/act}]
  toolPolicy:
"""
        + policy
        + """\
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/solo
  agents: [{ref: Agent/solo}]
"""
    )
    if turn_s is not None:
        yaml_text += f"  policy: {{budget: {{maxTurnSeconds: {turn_s}}}}}\n"
    return write_bundle(directory, "", files={"goondan.yaml": yaml_text, "act.py": ACT})


def send_in_background(daemon: Daemon, text: str, instance: str) -> subprocess.Popen[str]:
    args = [*GOONDAN, "send", text, "--instance", instance, "--state-root", str(daemon.state_root)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def waiting(daemon: Daemon, count: int = 1) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []

    def listed() -> bool:
        proc = daemon.cli("approvals", "--json")
        assert proc.returncode == 0, proc.stderr
        rows[:] = json.loads(proc.stdout)
        return len(rows) >= count

    wait_for(listed, timeout=30)
    return rows


def conversation(daemon: Daemon, key: str) -> list[dict[str, Any]]:
    proc = daemon.cli("instance", "show", key, "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    messages: list[dict[str, Any]] = []
    for entry in data if isinstance(data, list) else [data]:
        messages.extend(entry.get("messages", []) if isinstance(entry, dict) else [])
    return messages


def approval_events(daemon: Daemon) -> list[dict[str, Any]]:
    proc = daemon.cli("logs", "--json", "-n", "0")
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return [e for e in events if e["type"] == "tool.approval"]


class Follower:
    """A running `goondan logs -f`, read line by line as it prints (unbuffered, from the fd)."""

    def __init__(self, daemon: Daemon) -> None:
        self.proc = subprocess.Popen(
            [*GOONDAN, "logs", "-f", "--state-root", str(daemon.state_root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self._pending = b""
        self.seen: list[str] = []

    def until(self, needle: str, timeout: float = 20) -> dict[str, Any]:
        """The next event whose line holds `needle`."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\n" in self._pending:
                line, self._pending = self._pending.split(b"\n", 1)
                text = line.decode()
                self.seen.append(text)
                if needle in text:
                    event: dict[str, Any] = json.loads(text)
                    return event
            if select.select([fd], [], [], 0.2)[0]:
                self._pending += os.read(fd, 65536)
        raise AssertionError(f"no {needle!r} in {self.seen}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def follow_logs() -> Iterator[Callable[[Daemon], Follower]]:
    followers: list[Follower] = []

    def start(daemon: Daemon) -> Follower:
        followers.append(Follower(daemon))
        return followers[-1]

    yield start
    for follower in followers:
        follower.close()


def test_approve_runs_the_call_and_other_instances_go_on(start_daemon, follow_logs, tmp_path):
    marker = tmp_path / "marker"
    daemon = start_daemon(approval_bundle(tmp_path / "b"), env={"ACT_MARKER": str(marker)})
    follow = follow_logs(daemon)
    sender = send_in_background(daemon, "do alpha", "a")
    [row] = waiting(daemon)
    # A chat notifier following the logs sees the request as it happens (a pipe: JSON lines).
    requested = follow.until('"tool.approval"')
    assert requested["data"]["status"] == "requested"
    assert row["agent"] == "solo" and row["instanceKey"] == "a"
    assert row["tool"] == "act__run" and row["args"] == {"what": "alpha"}
    assert isinstance(row["createdAt"], float) and row["id"].startswith("ap-")
    assert not marker.exists()  # it waits: nothing ran
    # The same agent answers another instance while this one waits.
    other = daemon.send("hello there", "--instance", "b", timeout=30)
    assert other.returncode == 0 and "hello there" in other.stdout
    assert sender.poll() is None
    decided = daemon.cli("approve", row["id"])
    assert decided.returncode == 0, decided.stderr
    assert f"{row['id']} approved by " in decided.stdout
    approved = follow.until('"approved"')
    assert approved["type"] == "tool.approval" and approved["data"]["approvalId"] == row["id"]
    out, err = sender.communicate(timeout=30)
    assert sender.returncode == 0, err
    assert "done:" in out and "alpha" in out
    assert marker.read_text() == "alpha"
    assert json.loads(daemon.cli("approvals", "--json").stdout) == []
    again = daemon.cli("approve", row["id"])
    assert again.returncode == 1 and "E_APPROVAL_NOT_FOUND" in again.stderr
    wait_for(lambda: len(approval_events(daemon)) >= 2, timeout=10)
    requested, approved = approval_events(daemon)[:2]
    assert requested["data"]["status"] == "requested"
    assert requested["data"]["approvalId"] == row["id"]
    assert approved["data"]["status"] == "approved"
    assert "uid" in approved["data"]["decidedBy"] and approved["data"]["decidedAt"] > 0


def test_deny_gives_the_model_the_reason(start_daemon, tmp_path):
    marker = tmp_path / "marker"
    daemon = start_daemon(approval_bundle(tmp_path / "b"), env={"ACT_MARKER": str(marker)})
    sender = send_in_background(daemon, "do beta", "d")
    [row] = waiting(daemon)
    decided = daemon.cli("deny", row["id"], "--reason", "not on a Friday")
    assert decided.returncode == 0, decided.stderr
    out, err = sender.communicate(timeout=30)
    assert sender.returncode == 0, err
    # The scripted model's next step read the call's result: the denial and its reason.
    assert "E_TOOL_DENIED" in out and "not on a Friday" in out
    assert not marker.exists()
    tool_results = [m for m in conversation(daemon, "d") if m.get("role") == "tool"]
    assert "E_TOOL_DENIED" in tool_results[-1]["content"]
    wait_for(lambda: len(approval_events(daemon)) >= 2, timeout=10)
    assert approval_events(daemon)[-1]["data"]["status"] == "denied"
    assert approval_events(daemon)[-1]["data"]["reason"] == "not on a Friday"


def test_an_undecided_call_expires(start_daemon, tmp_path):
    marker = tmp_path / "marker"
    bundle = approval_bundle(tmp_path / "b", timeout_s=1)
    daemon = start_daemon(bundle, env={"ACT_MARKER": str(marker)})
    proc = daemon.send("do gamma", "--instance", "e", timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "E_TOOL_APPROVAL_TIMEOUT" in proc.stdout
    assert not marker.exists()
    assert json.loads(daemon.cli("approvals", "--json").stdout) == []
    wait_for(lambda: len(approval_events(daemon)) >= 2, timeout=10)
    assert approval_events(daemon)[-1]["data"]["status"] == "expired"


def test_an_approval_crosses_a_daemon_restart(start_daemon, tmp_path):
    marker = tmp_path / "marker"
    bundle = approval_bundle(tmp_path / "b")
    env = {"ACT_MARKER": str(marker)}
    daemon = start_daemon(bundle, env=env)
    sender = send_in_background(daemon, "do delta", "r")
    [row] = waiting(daemon)
    # The waiting turn does not hold the stop (the grace period is minutes).
    assert daemon.stop(timeout=20) == 0
    sender.communicate(timeout=30)  # the requester is gone with the daemon
    assert not marker.exists()
    daemon = start_daemon(bundle, env=env)
    [again] = waiting(daemon)
    assert again["id"] == row["id"] and again["createdAt"] == row["createdAt"]
    assert daemon.cli("approve", row["id"]).returncode == 0

    def answered() -> bool:
        messages = conversation(daemon, "r")
        return (
            bool(messages)
            and messages[-1]["role"] == "assistant"
            and not messages[-1].get("toolCalls")
        )

    wait_for(answered, timeout=30)
    messages = conversation(daemon, "r")
    assert "done:" in messages[-1]["content"] and "delta" in messages[-1]["content"]
    assert marker.read_text() == "delta"
    results = [m for m in messages if m["role"] == "tool"]
    assert len(results) == 1 and '"did":"delta"' in results[0]["content"].replace(" ", "")


def test_the_wait_does_not_count_toward_the_turn_budget(start_daemon, tmp_path):
    """A human takes as long as the approval's own limit allows: the turn's time budget
    (here 2 s) stops while its call waits, and runs on once the call is decided."""
    marker = tmp_path / "marker"
    bundle = approval_bundle(tmp_path / "b", turn_s=2)
    daemon = start_daemon(bundle, env={"ACT_MARKER": str(marker)})
    sender = send_in_background(daemon, "do epsilon", "w")
    [row] = waiting(daemon)
    time.sleep(3)  # longer than the turn's whole budget
    assert sender.poll() is None  # still waiting for the human, not stopped for time
    decided = daemon.cli("approve", row["id"])
    assert decided.returncode == 0, decided.stderr
    out, err = sender.communicate(timeout=30)
    assert sender.returncode == 0, (out, err)
    assert "E_TURN_BUDGET" not in out + err
    assert marker.read_text() == "epsilon"


def test_a_cancelled_turn_withdraws_its_approval(start_daemon, tmp_path):
    """A turn that stops waiting leaves nobody to approve a call that will never run."""
    marker = tmp_path / "marker"
    daemon = start_daemon(approval_bundle(tmp_path / "b"), env={"ACT_MARKER": str(marker)})
    sender = send_in_background(daemon, "do zeta", "z")
    [row] = waiting(daemon)
    cancelled = daemon.cli("cancel", "--agent", "solo", "--instance", "z")
    assert cancelled.returncode == 0, cancelled.stderr
    out, err = sender.communicate(timeout=30)
    assert "E_TURN_CANCELLED" in out + err, (out, err)
    wait_for(lambda: json.loads(daemon.cli("approvals", "--json").stdout) == [], timeout=10)
    refused = daemon.cli("approve", row["id"])
    assert refused.returncode == 1 and "E_APPROVAL_NOT_FOUND" in refused.stderr
    assert not marker.exists()


CONNECTION = """\
---
apiVersion: goondan.ai/v1
kind: Connection
metadata: {name: http-in}
spec:
  connectorRef: {kind: Connector, name: webhook, package: "@goondan/base"}
  config: {PORT: {value: "%d"}}
  toolPolicy: {requireApproval: ["act__*"]}
  ingress: {rules: [{route: {}}]}
"""


def test_a_connection_requires_approval_for_its_turns_only(start_daemon, tmp_path):
    """The Connection's `requireApproval` narrows the agent's policy for the turns its events
    start; the same agent reached from the CLI runs the call at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    bundle = approval_bundle(tmp_path / "b", agent_requires="[]")
    main = bundle / "goondan.yaml"
    main.write_text(main.read_text() + CONNECTION % port)
    marker = tmp_path / "marker"
    daemon = start_daemon(bundle, env={"ACT_MARKER": str(marker)})
    wait_for(lambda: daemon.process("http-in")["status"] == "idle", timeout=30)
    direct = daemon.send("do fromcli", "--instance", "c", timeout=30)
    assert direct.returncode == 0 and "fromcli" in direct.stdout, direct.stderr
    assert marker.read_text() == "fromcli"
    body = json.dumps({"text": "do fromhook", "instanceKey": "h"}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/", body, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 202
    [row] = waiting(daemon)
    assert (row["instanceKey"], row["args"]) == ("h", {"what": "fromhook"}), row
    assert marker.read_text() == "fromcli"  # the webhook's call waits
    assert daemon.cli("approve", row["id"]).returncode == 0
    wait_for(lambda: marker.read_text() == "fromhook", timeout=30)
