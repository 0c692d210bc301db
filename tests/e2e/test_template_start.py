"""The template `goondan run` forks from itself before its daemon is set up: its agents still
get the daemon's umask, open-files limit and environment."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.e2e.conftest import QUICKSTART, wait_for


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


def _template_of(daemon_pid: int) -> int:
    for entry in Path("/proc").iterdir():
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0]
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if title == b"goondan: template" and parent == daemon_pid:
            return int(entry.name)
    raise AssertionError("no template process")


def _has_pydantic(pid: int) -> bool:
    """Whether the process has the openai SDK's pydantic (a shared object) mapped."""
    return "pydantic_core" in Path(f"/proc/{pid}/maps").read_text()


OPENAI_MODEL = """
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: gpt
spec:
  provider: openai
  model: gpt-4o-mini
"""


def test_a_reload_that_adds_a_provider_reaches_the_running_template(start_daemon, tmp_path) -> None:
    bundle = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, bundle)
    daemon = start_daemon(bundle)
    assert daemon.send("What is 19 plus 23?").returncode == 0
    template = _template_of(daemon.proc.pid)
    agent = daemon.process("assistant")["pid"]
    # Neither the daemon nor a template for scripted Models has a provider SDK imported.
    assert not _has_pydantic(daemon.proc.pid) and not _has_pydantic(template)
    main = bundle / "goondan.yaml"
    main.write_text(main.read_text() + OPENAI_MODEL)
    restart = daemon.cli("restart")
    assert restart.returncode == 0, restart.stderr
    wait_for(lambda: _has_pydantic(template), timeout=30)  # the same template imported it
    assert daemon.process("assistant")["pid"] == agent  # its agents were not disturbed
    assert not _has_pydantic(daemon.proc.pid)
    assert daemon.send("What is 2 plus 3?").returncode == 0
