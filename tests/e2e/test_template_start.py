"""The template `goondan run` forks from itself before its daemon is set up: its agents still
get the daemon's umask, open-files limit and environment."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.conftest import QUICKSTART


def _field(pid: int, name: str, prefix: str) -> str:
    for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no {prefix!r} in /proc/{pid}/{name}")


def test_agents_of_the_early_template_have_the_daemons_setup(start_daemon) -> None:
    daemon = start_daemon(QUICKSTART, "--log-level", "debug")
    done = daemon.send("What is 19 plus 23?")
    assert done.returncode == 0, done.stderr
    agent = daemon.process("assistant")["pid"]
    assert _field(agent, "status", "Umask:") == "Umask:\t0077"
    # The daemon raises its soft limit after the template was forked; the agent has it too.
    limit = _field(daemon.proc.pid, "limits", "Max open files")
    assert _field(agent, "limits", "Max open files") == limit
    # --log-level reached the agents: their debug lines are in the daemon's stderr.
    lines = [json.loads(line) for line in daemon.logs().splitlines() if line.startswith("{")]
    assert any(r.get("agent") == "assistant" and r["level"] == "debug" for r in lines)
