"""MCP Tools as a user meets them: `goondan init --template mcp`, `goondan tools list`,
`goondan doctor`, and swarm turns through the daemon that call MCP servers written with the
SDK, with their servers dying with the agent and with the daemon under SIGKILL."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.conftest import REPO, goondan, pid_alive, wait_for

SERVER = str(REPO / "tests" / "fakes" / "mcp_server.py")
QUESTION = "How many words are in 'the quick brown fox jumps'?"


def mcp_bundle(directory: Path, steps: list[dict[str, Any]], **mcp: Any) -> Path:
    """One agent (`solo`) on the scripted model, with Tool/fake: the tests' MCP server."""
    docs: list[dict[str, Any]] = [
        {
            "kind": "Model",
            "metadata": {"name": "m"},
            "spec": {
                "provider": "scripted",
                "model": "s",
                "options": {"rules": [{"when": ".", "steps": steps}]},
            },
        },
        {
            "kind": "Tool",
            "metadata": {"name": "fake"},
            "spec": {
                # A long start-up limit: importing the SDK is slow on a busy machine.
                "mcp": {"command": ["python", SERVER], "startupTimeoutMs": 60000, **mcp},
                "timeoutMs": 20000,
            },
        },
        {
            "kind": "Agent",
            "metadata": {"name": "solo"},
            "spec": {"modelConfig": {"modelRef": "Model/m"}, "tools": [{"ref": "Tool/fake"}]},
        },
        {
            "kind": "Swarm",
            "metadata": {"name": "default"},
            "spec": {
                "entryAgent": "Agent/solo",
                "agents": [{"ref": "Agent/solo"}],
                "policy": {"maxStepsPerTurn": 8, "shutdown": {"gracePeriodSeconds": 5}},
            },
        },
    ]
    for doc in docs:
        doc["apiVersion"] = "goondan.ai/v1"
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "goondan.yaml").write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return directory


def test_the_mcp_template_validates_lists_and_runs_offline(tmp_path, state_root):
    bundle = tmp_path / "bot"
    assert goondan("init", str(bundle), "--template", "mcp").returncode == 0
    assert (bundle / "servers" / "text.py").is_file()
    proc = goondan("validate", str(bundle), "--format", "json", check=True)
    assert json.loads(proc.stdout)["valid"] is True

    proc = goondan("tools", "list", "--agent", "assistant", str(bundle), check=True)
    lines = proc.stdout.splitlines()
    assert [line.split()[:2] for line in lines] == [
        ["text__count_words", "mcp:text"],
        ["text__shout", "mcp:text"],
    ]

    proc = goondan("run", str(bundle), "--state-root", str(state_root), "--input", QUESTION)
    assert proc.returncode == 0, proc.stderr
    assert "has 5 words and 25 characters" in proc.stdout

    proc = goondan("doctor", str(bundle), "--state-root", str(state_root), "--json")
    checks = [c for c in json.loads(proc.stdout)["checks"] if c["area"] == "mcp"]
    assert checks and checks[0]["status"] == "ok", checks
    assert "text__count_words" in checks[0]["what"]


def test_tools_list_and_doctor_report_a_server_that_cannot_start(tmp_path, state_root):
    bundle = mcp_bundle(tmp_path / "b", [{"reply": "x"}])
    (bundle / "broken.py").write_text("import sys\nsys.exit('broken: missing settings')\n")
    text = (bundle / "goondan.yaml").read_text().replace(SERVER, "broken.py")
    (bundle / "goondan.yaml").write_text(text)
    proc = goondan("tools", "list", "--agent", "solo", str(bundle))
    assert proc.returncode == 1
    assert "MCP server 'fake'" in proc.stderr and "broken: missing settings" in proc.stderr
    proc = goondan("doctor", str(bundle), "--state-root", str(state_root), "--json")
    assert proc.returncode == 1
    [check] = [c for c in json.loads(proc.stdout)["checks"] if c["area"] == "mcp"]
    assert check["status"] == "fail" and "broken: missing settings" in check["what"]


def test_a_swarm_turn_calls_mcp_tools_through_the_daemon(tmp_path, start_daemon):
    steps: list[dict[str, Any]] = [
        {"call": "fake__add", "args": {"a": 19, "b": 23}},
        {"call": "fake__grow"},  # the server adds `late` and says its list changed
        {"call": "fake__late"},  # offered at the next step
        {"call": "fake__refuse", "args": {"why": "policy"}},
        {
            "reply": "sum={{results.0.sum}} late={{results.2}} "
            "error={{results.3.code}}: {{results.3.message}}"
        },
    ]
    daemon = start_daemon(mcp_bundle(tmp_path / "b", steps))
    proc = daemon.send("go")
    assert proc.returncode == 0, proc.stderr + daemon.logs()
    assert proc.stdout.strip() == (
        "sum=42 late=late tool error=E_TOOL_MCP: Error executing tool refuse: refused: policy"
    )


def test_servers_die_with_the_agent_and_with_the_daemon_under_sigkill(tmp_path, start_daemon):
    # The server ignores its stdin's end for a minute: only the parent-death signal stops it.
    steps = [{"call": "fake__pid"}, {"reply": "{{result.pid}}"}]
    bundle = mcp_bundle(tmp_path / "b", steps, env={"FAKE_MCP_LINGER": {"value": "120"}})
    daemon = start_daemon(bundle)
    first = int(daemon.send("pid?", "--instance", "one").stdout)
    agent = daemon.process("solo")["pid"]
    assert pid_alive(first)

    signal_pid(agent, signal.SIGKILL)
    wait_for(lambda: not pid_alive(first), 10)
    # The agent comes back on the next input, and starts its server again.
    second = int(daemon.send("pid?", "--instance", "two").stdout)
    assert second != first and pid_alive(second)

    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait()
    wait_for(lambda: not pid_alive(second), 15)


def signal_pid(pid: int, sig: int) -> None:
    import os

    os.kill(pid, sig)
