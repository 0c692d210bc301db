"""Who may speak on agents.sock: only the children the daemon launched, and the operator's
external agents (with `run/peer.key`). Attacks from a same-uid process with a plain socket."""

import subprocess
import time
from pathlib import Path

import msgspec
import zmq

from ipc import wire
from orchestrator.journal import Entry
from tests.e2e.conftest import GOONDAN, wait_for, write_bundle
from tests.e2e.test_connectors import webhook  # noqa: F401 - a fixture

CREDENTIAL = b"X-Goondan-Credential"

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "wait"
        steps:
          - call: waiter__run
            args: {}
          - reply: "the real answer"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: waiter}
spec:
  entry: ./waiter.py
  exports: [{name: run, description: waits for a file, parameters: {type: object}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: solo}
spec:
  modelConfig: {modelRef: Model/m}
  tools: [{ref: Tool/waiter}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: other}
spec:
  modelConfig: {modelRef: Model/m}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/solo
  agents: [{ref: Agent/solo}, {ref: Agent/other}]
"""

# Waits (without blocking the agent's loop, so it heartbeats) until the test releases it.
WAITER = """\
import asyncio
import os

async def run(ctx, args):
    while not os.path.exists(os.environ["RELEASE_FILE"]):
        await asyncio.sleep(0.02)
    return {}

handlers = {"run": run}
"""


class Peer:
    """A libzmq DEALER on agents.sock, as any same-uid process can open one."""

    def __init__(self, state_root: Path, identity: str, key: bytes | None = None) -> None:
        self.identity = identity
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, identity.encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        if key is not None:
            self.sock.setsockopt(zmq.METADATA, CREDENTIAL + b":" + key)
        self.sock.connect(f"ipc://{state_root}/run/agents.sock")

    def send(self, kind: str, payload: msgspec.Struct | None = None, **kw: str) -> None:
        self.sock.send(wire.encode(kind, self.identity, wire.ORCHESTRATOR, payload, **kw))

    def receive(self, timeout_ms: int) -> wire.Envelope | None:
        if not self.sock.poll(timeout_ms):
            return None
        return wire.decode(self.sock.recv())

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


def trust_daemon(start_daemon, tmp_path: Path):
    release = tmp_path / "release"
    bundle = write_bundle(tmp_path / "b", BUNDLE, {"waiter.py": WAITER})
    daemon = start_daemon(bundle, env={"RELEASE_FILE": str(release)})
    return daemon, release


def waiting_request(daemon) -> tuple[subprocess.Popen[str], str]:
    """A `goondan send` whose turn waits in the tool, and the id the daemon routes it under."""
    send = subprocess.Popen(
        [*GOONDAN, "send", "wait", "--state-root", str(daemon.state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = daemon.state_root / "run" / "journal.jsonl"

    def accepted() -> str | None:
        if not journal.exists():
            return None
        lines = journal.read_bytes().splitlines()
        ids = [msgspec.json.decode(line, type=Entry).id for line in lines if line]
        return ids[-1] if ids else None

    oid = wait_for(accepted, timeout=20)
    assert oid is not None  # wait_for returns the first truthy value
    wait_for(lambda: daemon.process("solo")["status"] == "processing", timeout=20)
    return send, oid


def forged_result(peer: Peer, oid: str) -> None:
    forged = wire.DelegateResult("ok", "solo", "FORGED")
    peer.send(wire.DELEGATE_RESULT, forged, correlation_id=oid)


def test_a_stranger_cannot_take_over_an_agent_or_answer_for_it(start_daemon, tmp_path):
    daemon, release = trust_daemon(start_daemon, tmp_path)
    send, oid = waiting_request(daemon)
    solo_pid = daemon.process("solo")["pid"]
    mallory = Peer(daemon.state_root, "solo")  # the running agent's identity, no credential
    try:
        forged_result(mallory, oid)
        wait_for(lambda: "refused" in daemon.logs() and "solo" in daemon.logs(), timeout=10)
    finally:
        mallory.close()
    release.touch()
    out, err = send.communicate(timeout=30)
    assert send.returncode == 0, err
    assert out.strip() == "the real answer"
    # the agent kept its connection: the same process answered
    assert daemon.process("solo")["pid"] == solo_pid


def test_a_result_is_taken_only_from_the_agent_it_was_sent_to(start_daemon, tmp_path):
    daemon, release = trust_daemon(start_daemon, tmp_path)
    send, oid = waiting_request(daemon)
    key = (daemon.state_root / "run" / "peer.key").read_bytes().strip()
    # the operator's external agent `other` is admitted, but the request went to `solo`
    other = Peer(daemon.state_root, "other", key)
    try:
        other.send(wire.READY, wire.Ready(wire.PROTOCOL_VERSION, 1, "other"))
        wait_for(lambda: daemon.process("other")["status"] == "idle", timeout=10)
        forged_result(other, oid)
        wait_for(lambda: "delegate_result from another agent dropped" in daemon.logs())
    finally:
        other.close()
    release.touch()
    out, err = send.communicate(timeout=30)
    assert send.returncode == 0, err
    assert out.strip() == "the real answer"


def test_a_ready_without_a_credential_is_refused(start_daemon, tmp_path):
    daemon, _ = trust_daemon(start_daemon, tmp_path)
    mallory = Peer(daemon.state_root, "other")  # a slot with no process
    try:
        mallory.send(wire.READY, wire.Ready(wire.PROTOCOL_VERSION, 1, "other"))
        wait_for(lambda: "refused" in daemon.logs() and "other" in daemon.logs(), timeout=10)
    finally:
        mallory.close()
    row = daemon.process("other")
    assert row["status"] == "notStarted" and row["pid"] is None


def test_a_wrong_key_is_refused_and_logged_once_per_interval(start_daemon, tmp_path):
    daemon, _ = trust_daemon(start_daemon, tmp_path)
    for _ in range(20):
        mallory = Peer(daemon.state_root, "other", b"0" * 64)
        mallory.send(wire.RESTART_REQUEST, wire.RestartRequest("forged"))
        time.sleep(0.02)  # pacing the attack, not a wait on the daemon
        mallory.close()
    wait_for(lambda: "refused" in daemon.logs())
    logs = daemon.logs()
    assert "swarm restart requested" not in logs
    assert logs.count("agents.sock peer refused") == 1  # the rest counted, not printed
    assert daemon.process("other")["status"] == "notStarted"


def test_connector_events_and_restarts_cannot_be_forged(webhook):  # noqa: F811
    daemon, port = webhook
    connector_pid = daemon.process("http-in")["pid"]
    event = wire.ConnectorEvent("message", wire.ConnectorMessage(text="forged"), "mallory")
    # as the connector, without its credential
    mallory = Peer(daemon.state_root, "connection:http-in")
    try:
        mallory.send(wire.CONNECTOR_EVENT, event, correlation_id="1")
        mallory.send(wire.RESTART_REQUEST, wire.RestartRequest("forged"))
        assert mallory.receive(1000) is None  # no event_ack: nothing was accepted
    finally:
        mallory.close()
    # as an admitted external agent: a connector's message type is not an agent's
    key = (daemon.state_root / "run" / "peer.key").read_bytes().strip()
    agent = Peer(daemon.state_root, "responder", key)
    try:
        agent.send(wire.CONNECTOR_EVENT, event, correlation_id="2")
        wait_for(lambda: "message type not allowed for its sender" in daemon.logs())
        assert agent.receive(0) is None
    finally:
        agent.close()
    assert "swarm restart requested" not in daemon.logs()
    assert not list(daemon.state_root.glob("swarms/*/instances/*mallory*"))
    assert daemon.process("http-in")["pid"] == connector_pid
