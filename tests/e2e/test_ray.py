"""Agents placed on a Ray cluster (`goondan run --placement ray`): a real two-node cluster on
127.0.0.1 (`ray.cluster_utils.Cluster`, nodes offering the custom resources `node_a` and
`node_b`), a coordinator placed locally and a worker placed on `node_b`, over the TLS link.

Serial: Ray's processes are many and heavy for the machine's two cores."""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentproc.conversation import read_messages
from ipc import zmtp
from tests.e2e.conftest import GOONDAN, pid_alive, wait_for, write_bundle

# Before Ray is imported: no usage report; loopback addresses for every node.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(RAY_ENV)

pytestmark = [pytest.mark.serial, pytest.mark.timeout(600)]

NODE: dict[str, Any] = {
    "num_cpus": 1,
    "object_store_memory": 80 * 1024 * 1024,
    "node_ip_address": "127.0.0.1",
}
# Node loss is noticed in about a second instead of Ray's default of tens of seconds.
SYSTEM_CONFIG = {
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 2,
}

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: coordinator-script}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "delegate (.+)"
        steps:
          - call: agents__request
            args: {target: worker, input: "{{match.1}}", timeoutMs: 120000}
          - reply: "coordinator got: {{result.response}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: worker-script}
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
metadata: {name: coordinator}
spec:
  placement: local
  modelConfig: {modelRef: Model/coordinator-script}
  tools:
    - ref: {kind: Tool, name: agents, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  placement: ray
  resources: {cpus: 0, custom: {node_b: 1}}
  modelConfig: {modelRef: Model/worker-script}
  tools:
    - ref: Tool/slow
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/coordinator
  agents:
    - ref: Agent/coordinator
    - ref: Agent/worker
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
    time.sleep(float(delay.read_text()) if delay.exists() else 0.0)
    return {"attempt": attempt}

handlers = {"run": run}
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            **NODE,
            "resources": {"node_a": 1},
            "include_dashboard": False,
            "_system_config": SYSTEM_CONFIG,
        },
    )
    cluster.node_b = cluster.add_node(**NODE, resources={"node_b": 1})  # type: ignore[attr-defined]
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RayDaemon:
    def __init__(
        self,
        bundle: Path,
        state_root: Path,
        address: str,
        port: int,
        env: dict[str, str] | None = None,
    ) -> None:
        self.state_root = state_root
        self.port = port
        self.stderr_path = state_root.parent / f"{state_root.name}.stderr"
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [
                *GOONDAN,
                "run",
                str(bundle),
                "--state-root",
                str(state_root),
                "--placement",
                "ray",
                "--ray-address",
                address,
                "--listen",
                f"127.0.0.1:{port}",
            ],  # fmt: skip
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            env={**os.environ, **RAY_ENV, **(env or {})},
        )
        ready = state_root / "run" / "orchestrator.json"
        wait_for(lambda: self.proc.poll() is not None or ready.exists(), timeout=120)
        assert self.proc.poll() is None, self.logs()

    def cli(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*GOONDAN, *args, "--state-root", str(self.state_root)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def process(self, name: str) -> dict[str, Any]:
        proc = self.cli("status", "--json")
        assert proc.returncode == 0, proc.stderr
        return next(p for p in json.loads(proc.stdout)["processes"] if p["name"] == name)

    def logs(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._stderr.close()


def node_b_free() -> bool:
    import ray

    return bool(ray.available_resources().get("node_b", 0) >= 1)


def test_agents_on_a_two_node_cluster(cluster, tmp_path, state_root):
    bundle = write_bundle(tmp_path / "b", BUNDLE, {"slow.py": SLOW_TOOL})
    daemon = RayDaemon(bundle, state_root, cluster.address, free_port())
    try:
        # A coordinator placed locally delegates with a tool call to the worker on node_b.
        proc = daemon.cli("send", "delegate work please")
        assert proc.returncode == 0, proc.stderr + daemon.logs()
        assert proc.stdout.strip() == "coordinator got: attempt 1", proc.stdout
        worker, coordinator = daemon.process("worker"), daemon.process("coordinator")
        assert "node" not in coordinator  # a local child
        assert worker["node"] and "127.0.0.1" in worker["node"], worker
        assert not node_b_free()  # the worker's actor holds node_b
        assert (state_root / "tls" / "ca.key").stat().st_mode & 0o777 == 0o600

        # A peer without the orchestrator's certificate gets nothing.
        refused_plain(daemon.port)
        refused_foreign_certificate(daemon.port)
        wait_for(lambda: "did not finish its TLS handshake" in daemon.logs(), timeout=30)

        # The worker's node dies mid-request; a replacement node offering node_b arrives.
        workdir = state_root / "swarms/default/workspaces/cli"
        (workdir / "delay").write_text("60")
        sender = subprocess.Popen(
            [*GOONDAN, "send", "work again", "--agent", "worker"]
            + ["--state-root", str(state_root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        wait_for(lambda: (workdir / "attempts").read_text() == "2", timeout=60)
        old_pid = daemon.process("worker")["pid"]
        (workdir / "delay").write_text("0")
        cluster.remove_node(cluster.node_b, allow_graceful=False)
        wait_for(lambda: daemon.process("worker")["status"] != "processing", timeout=60)
        wait_for(lambda: not pid_alive(old_pid), timeout=30)
        cluster.node_b = cluster.add_node(**NODE, resources={"node_b": 1})
        try:
            out, err = sender.communicate(timeout=180)
        finally:
            sender.kill()
        assert sender.returncode == 0, err + daemon.logs()
        # Answered once (the tool ran once; its interrupted call is in the history, which
        # the re-placed worker read from the shared state root).
        assert out.strip().startswith("attempt E_TOOL_INTERRUPTED"), out
        assert (workdir / "attempts").read_text() == "2"
        convo = state_root / "swarms/default/instances/cli/worker"
        texts = [m.content for m in read_messages(convo) if m.role == "user"]
        assert texts == ["work please", "work again"], texts
        worker = daemon.process("worker")
        assert worker["restarts"] >= 1 and worker["pid"] != old_pid
        assert "agent process crashed" in daemon.logs()

        # The orchestrator SIGKILLed: Ray ends its actors (node_b is free again).
        agent_pid = worker["pid"]
        daemon.proc.kill()
        daemon.proc.wait()
        wait_for(node_b_free, timeout=30)
        wait_for(lambda: not pid_alive(agent_pid), timeout=10)
        daemon.stop()

        # A new orchestrator on the state root places the worker again, which goes on with
        # its conversation; a clean stop drains it and frees its actor.
        (state_root / "run" / "orchestrator.json").unlink(missing_ok=True)
        daemon = RayDaemon(bundle, state_root, cluster.address, free_port())
        proc = daemon.cli("send", "work once more", "--agent", "worker")
        assert proc.returncode == 0 and proc.stdout.strip() == "attempt 3", proc.stderr
        texts = [m.content for m in read_messages(convo) if m.role == "user"]
        assert texts == ["work please", "work again", "work once more"], texts
        daemon.proc.terminate()
        assert daemon.proc.wait(60) == 0, daemon.logs()
        wait_for(node_b_free, timeout=30)
    finally:
        daemon.stop()


def test_a_reload_places_agents_as_the_bundle_now_says(cluster, tmp_path, state_root):
    """A reload reads each agent's placement and resources again: the worker, local at start,
    goes to node_b once the bundle says `placement: ray`, and an agent the reload adds (from
    the new bundle, which reaches the nodes) is placed on Ray, the default of a `--placement
    ray` run, with the env file's variables in its environment."""
    local = BUNDLE.replace(
        "placement: ray\n  resources: {cpus: 0, custom: {node_b: 1}}", "placement: local"
    )
    assert local != BUNDLE
    bundle = write_bundle(
        tmp_path / "b",
        local,
        {"slow.py": SLOW_TOOL, ".env": "GOONDAN_TEST_GREETING=hello from .env\n"},
    )
    wait_for(node_b_free, timeout=60)
    exported = {  # the orchestrator's environment, not the nodes'
        "GOONDAN_TEST_EXPORTED": "exported to the orchestrator",
        "GOONDAN_TEST_UNNAMED": "the bundle does not read it",
    }
    daemon = RayDaemon(bundle, state_root, cluster.address, free_port(), env=exported)
    try:
        assert daemon.cli("send", "work", "--agent", "worker").returncode == 0
        assert "node" not in daemon.process("worker")  # a local child

        text = BUNDLE.replace(
            "    - ref: Agent/worker\n", "    - ref: Agent/worker\n    - ref: Agent/helper\n"
        )
        (bundle / "goondan.yaml").write_text(text + HELPER)
        (bundle / "envget.py").write_text(ENV_TOOL)
        proc = daemon.cli("restart")
        assert proc.returncode == 0, proc.stderr + daemon.logs()
        for agent in ("worker", "helper"):
            sent = daemon.cli("send", "work", "--agent", agent, "--instance", agent)
            assert sent.returncode == 0 and sent.stdout.strip() == "attempt 1", sent.stderr
            placed = daemon.process(agent)
            assert placed["node"] and "127.0.0.1" in placed["node"], placed
        assert not node_b_free()  # the worker's actor holds node_b, as its resources say
        # The bundle's env file, and a variable the bundle reads from the orchestrator's
        # environment, reach the agent on its node (this test's nodes have the test's
        # environment, which has neither); one the bundle does not name stays behind.
        assert "GOONDAN_TEST_GREETING" not in os.environ
        for name, value in (
            ("GOONDAN_TEST_GREETING", "hello from .env"),
            ("GOONDAN_TEST_EXPORTED", "exported to the orchestrator"),
            ("GOONDAN_TEST_UNNAMED", "(not set)"),
        ):
            sent = daemon.cli("send", f"env {name}", "--agent", "helper")
            assert sent.returncode == 0 and sent.stdout.strip() == value, sent.stderr
        daemon.proc.terminate()
        assert daemon.proc.wait(60) == 0, daemon.logs()
        wait_for(node_b_free, timeout=30)
    finally:
        daemon.stop()


# An agent a reload adds, with a tool that reads its process's environment.
HELPER = r"""
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: helper-script}
spec:
  provider: scripted
  model: s
  apiKey: {valueFrom: {env: GOONDAN_TEST_EXPORTED}}  # as a real Model's key would be
  options:
    rules:
      - when: 'env (\w+)'
        steps:
          - call: envget__read
            args: {name: "{{match.1}}"}
          - reply: "{{result.value}}"
      - when: "work"
        steps:
          - call: slow__run
            args: {}
          - reply: "attempt {{result.attempt}}"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: envget}
spec:
  entry: ./envget.py
  exports:
    - name: read
      description: One variable of the agent process's environment.
      parameters: {type: object, properties: {name: {type: string}}, required: [name]}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  resources: {cpus: 0}
  modelConfig: {modelRef: Model/helper-script}
  tools:
    - ref: Tool/slow
    - ref: Tool/envget
"""

ENV_TOOL = """\
import os

def read(ctx, args):
    return {"value": os.environ.get(args["name"], "(not set)")}

handlers = {"read": read}
"""


def refused_plain(port: int) -> None:
    """A ZMTP peer over plain TCP: the TLS listener never answers with a greeting."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(zmtp.GREETING)
        data = b""
        try:
            while chunk := conn.recv(4096):
                data += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    assert zmtp.GREETING[:10] not in data


def refused_foreign_certificate(port: int) -> None:
    """A TLS client whose certificate is not from the orchestrator's CA is refused."""
    import tempfile

    from ipc.tls import Authority, client_context

    with tempfile.TemporaryDirectory() as tmp:
        foreign = Authority(Path(tmp) / "tls", "127.0.0.1")
        ctx = client_context(foreign.issue_client("worker"))
    ctx.verify_mode = ssl.CERT_NONE  # we test the server's check, not ours
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            with ctx.wrap_socket(raw) as conn:
                conn.sendall(zmtp.GREETING)
                assert conn.recv(4096) == b""  # TLS 1.3: the refusal comes on first read
                raise ConnectionResetError("closed without a word")


async def test_a_goondan_version_mismatch_is_a_clear_start_error(cluster, tmp_path, state_root):
    """The actor compares the node's goondan with the driver's before it starts anything."""
    from goondan.bundle.model import AgentResources
    from goondan.settings import DEFAULTS
    from ipc.router_socket import RouterSocket
    from orchestrator.launcher import LaunchSpec
    from orchestrator.ray_placement import RayLauncher, RayPlacement

    bundle = write_bundle(tmp_path / "b", BUNDLE, {"slow.py": SLOW_TOOL})
    router = RouterSocket(f"ipc://{state_root}/agents.sock", lambda frames: None)
    router.start()
    spec = LaunchSpec(bundle, "default", f"ipc://{state_root}/agents.sock", state_root, DEFAULTS)
    launcher = RayLauncher(
        spec,
        RayPlacement(cluster.address),
        {"worker": AgentResources(custom={"node_b": 1})},
        router,
        state_root / "tls",
        version="0.0.0-elsewhere",
    )
    try:
        with pytest.raises(OSError) as caught:
            await launcher.launch("worker", b"credential")
        message = str(caught.value)
        assert "is installed on node" in message, message
        assert "the orchestrator runs goondan 0.0.0-elsewhere" in message, message
        wait_for(node_b_free, timeout=30)  # the failed actor holds nothing
    finally:
        router.close()
