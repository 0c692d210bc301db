"""Without `--placement ray` nothing of Ray is used: not imported, and an agent that asks for
Ray in a local run is a clear start error."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from tests.e2e.conftest import goondan, write_bundle

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  placement: ray
  resources: {custom: {node_b: 1}}
  modelConfig: {modelRef: Model/m}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/worker
  agents: [{ref: Agent/worker}]
"""


def test_an_agent_placed_on_ray_needs_placement_ray(tmp_path, state_root):
    bundle = write_bundle(tmp_path / "b", BUNDLE)
    proc = goondan("run", str(bundle), "--state-root", str(state_root), "--input", "hi")
    assert proc.returncode == 1
    assert "agent 'worker' has `placement: ray`: run with --placement ray" in proc.stderr


def test_a_local_run_never_imports_ray():
    code = (
        "import sys, goondan.cli.main, goondan.cli.run_cmd, orchestrator.daemon, "
        "orchestrator.ray_placement, agentproc.ray_actor, agentproc.main\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_placement_ray_without_ray_installed_is_a_clear_start_error(tmp_path, state_root):
    """Without the `ray` extra, `--placement ray` says what to install, before anything
    starts (it used to fail in the launcher with a traceback, and again at shutdown). Ray's
    absence is simulated in the CLI's process: this environment has it."""
    bundle = write_bundle(tmp_path / "b", BUNDLE)
    code = (
        "import importlib.util as u, sys\n"
        "find = u.find_spec\n"
        "u.find_spec = lambda name, *a: None if name == 'ray' else find(name, *a)\n"
        "from goondan.cli.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "run", str(bundle), "--placement", "ray"]
        + ["--state-root", str(state_root), "--input", "hi"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "--placement ray needs ray, not installed in" in proc.stderr
    assert "pip install 'goondan[ray]'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (state_root / "run" / "orchestrator.json").exists()  # nothing was started


@pytest.mark.parametrize("form", ["127.0.0.1:{port}", "ray://127.0.0.1:{port}"])
def test_a_ray_address_nothing_listens_at_is_said_at_once(tmp_path, state_root, form):
    """Ray's own connect retries for minutes against a wrong address (a cluster's, or a Ray
    Client server's); goondan says so at the first launch, in the answer (and `status`),
    and tries again at the next one."""
    with socket.socket() as s:  # a port nothing listens at
        s.bind(("127.0.0.1", 0))
        address = form.format(port=s.getsockname()[1])
    bundle = write_bundle(tmp_path / "b", BUNDLE)
    proc = goondan(
        "run", str(bundle), "--placement", "ray", "--ray-address", address,
        "--state-root", str(state_root), "--input", "hi",
    )  # fmt: skip
    assert proc.returncode == 1
    assert f"the Ray cluster at {address} cannot be reached" in proc.stderr
    assert "Traceback" not in proc.stderr
