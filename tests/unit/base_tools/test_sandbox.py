"""The tool sandbox, with the real bash handler: no other process's environ, no state root
beyond the instance's workdir, no sockets; the tool tree dies with its agent; no namespaces
means a clear E_TOOL_SANDBOX, never an unconfined run."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from base_tools.bash import handlers
from goondan import ToolContext
from tests.unit.base_tools.conftest import make_ctx
from tests.unit.base_tools.test_bash import pids_running, wait_dead

exec_command = handlers["exec"]
SECRET = "sk-sandbox-secret-4242"
OTHER_NOTE = "other instance's private note"


@pytest.fixture
def state_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "state"
    (root / "run").mkdir(parents=True)
    other = root / "swarms" / "s" / "instances" / "other" / "workdir"
    other.mkdir(parents=True)
    (other / "note.txt").write_text(OTHER_NOTE)
    monkeypatch.setenv("GOONDAN_STATE_ROOT", str(root))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return root


@pytest.fixture
def own_ctx(state_root: Path) -> ToolContext:
    workdir = state_root / "swarms" / "s" / "instances" / "mine" / "workdir"
    workdir.mkdir(parents=True)
    return make_ctx(workdir)


async def run(ctx: ToolContext, command: str) -> str:
    out = await exec_command(ctx, {"command": command})
    return str(out["stdout"]) + str(out["stderr"])


def test_no_other_process_environ_is_readable(own_ctx: ToolContext) -> None:
    # A real agent stand-in with the key in its initial environment (what /proc shows).
    command = "; ".join(
        f"cat /proc/{target}/environ | tr '\\0' '\\n'"
        for target in ("$PPID", "1", str(os.getpid()), str(os.getppid()), "*")
    )
    agent = subprocess.run(
        [sys.executable, "-c", CHILD, str(own_ctx.workdir), f"{command}; env; ps -ef; ls /proc"],
        env={**os.environ, "OPENAI_API_KEY": SECRET},
        capture_output=True,
        text=True,
        check=True,
    )
    assert "/environ" in agent.stdout  # the reads were attempted and failed
    assert SECRET not in agent.stdout


async def test_other_instances_and_sockets_are_hidden(
    own_ctx: ToolContext, state_root: Path
) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(state_root / "run" / "agents.sock"))
    listener.listen()
    try:
        other = state_root / "swarms" / "s" / "instances" / "other" / "workdir" / "note.txt"
        text = await run(own_ctx, f"cat {other}")
        assert OTHER_NOTE not in text and "No such file" in text
        listing = await run(own_ctx, f"ls -R {state_root}")
        assert "mine" in listing and "other" not in listing.replace(str(state_root), "")
        assert "agents.sock" not in listing
        probe = (
            f'{sys.executable} -c "import socket; s = socket.socket(socket.AF_UNIX); '
            f"s.connect('{state_root}/run/agents.sock'); print('CONN' + 'ECTED')\""
        )
        # (Split, so that the line a traceback quotes from the source does not say it.)
        assert "CONNECTED" not in await run(own_ctx, probe)
        # The cover cannot be lifted: the command has no capabilities left.
        text = await run(own_ctx, f"umount {state_root}; umount /proc; cat {other}")
        assert OTHER_NOTE not in text
    finally:
        listener.close()


async def test_own_workdir_works(own_ctx: ToolContext) -> None:
    out = await exec_command(own_ctx, {"command": "echo hello > made.txt; cat made.txt; pwd"})
    assert out["stdout"] == f"hello\n{own_ctx.workdir.resolve()}\n"
    assert (own_ctx.workdir / "made.txt").read_text() == "hello\n"


async def test_the_allow_list_still_passes_variables(
    own_ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOONDAN_BASH_ENV_ALLOW", "OPENAI_API_KEY")
    assert await run(own_ctx, "echo $OPENAI_API_KEY") == f"{SECRET}\n"


CHILD = """
import asyncio, sys
from pathlib import Path
from base_tools.bash import handlers
from goondan import ToolError
from tests.unit.base_tools.conftest import make_ctx
try:
    out = asyncio.run(handlers["exec"](make_ctx(Path(sys.argv[1])), {"command": sys.argv[2]}))
    print(out["stdout"] + out["stderr"])
except ToolError as error:
    sys.exit(f"{error.code}: {error}; {error.suggestion}")
"""


async def test_the_tool_tree_dies_with_its_agent(own_ctx: ToolContext) -> None:
    agent = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(own_ctx.workdir), "sleep 300.3 & sleep 300.4"]
    )
    try:
        deadline = time.monotonic() + 20
        while len(pids_running("sleep 300.3") + pids_running("sleep 300.4")) < 2:
            assert time.monotonic() < deadline, "the tool's sleeps never started"
            await asyncio.sleep(0.02)
        pids = pids_running("sleep 300.3") + pids_running("sleep 300.4")
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        assert await wait_dead(pids, seconds=10)
    finally:
        agent.kill()
        agent.wait()


def test_without_namespaces_the_call_fails_closed(tmp_path: Path) -> None:
    # No unshare/setpriv to be found stands for a host that cannot make namespaces.
    workdir = tmp_path / "work"
    workdir.mkdir()
    env = {**os.environ, "PATH": str(tmp_path)}
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(workdir), "touch ran"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert child.returncode != 0
    assert "E_TOOL_SANDBOX" in child.stderr and "GOONDAN_TOOL_SANDBOX=off" in child.stderr
    assert not (workdir / "ran").exists()
