"""bash: exec and script, the scrubbed environment, timeouts that kill the process group,
capped output, and the workdir sandbox for cwd and script paths."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from base_tools.bash import handlers
from goondan import ToolContext, ToolError

exec_command, script = handlers["exec"], handlers["script"]


def alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def pids_running(cmdline: str) -> list[int]:
    """Pids (as this process sees them) whose command line is `cmdline`: a tool's own pids are
    those of its PID namespace, so tests find its processes from outside."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            text = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except (OSError, ValueError):
            continue
        if entry.name.isdigit() and text == cmdline and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


async def wait_dead(pids: list[int], seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        await asyncio.sleep(0.02)
    return False


async def test_exec_reports_output_and_exit_code(ctx: ToolContext, workdir: Path) -> None:
    out = await exec_command(ctx, {"command": "echo hi; echo oops >&2; pwd; exit 3"})
    assert out["command"] == "echo hi; echo oops >&2; pwd; exit 3"
    assert out["cwd"] == str(workdir.resolve())
    assert out["stdout"] == f"hi\n{workdir.resolve()}\n"
    assert out["stderr"] == "oops\n"
    assert (out["exitCode"], out["signal"], out["timedOut"]) == (3, None, False)
    assert isinstance(out["durationMs"], int)
    assert set(out) == {
        "command",
        "cwd",
        "durationMs",
        "stdout",
        "stderr",
        "exitCode",
        "signal",
        "timedOut",
    }


async def test_exec_in_a_subdirectory(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "sub").mkdir(parents=True)
    out = await exec_command(ctx, {"command": "pwd", "cwd": "sub"})
    assert out["stdout"].strip() == str(workdir.resolve() / "sub") == out["cwd"]


async def test_environment_is_scrubbed(ctx: ToolContext, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:secret")
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    out = await exec_command(ctx, {"command": "env", "env": {"N": 7, "FLAG": True, "S": "x y"}})
    env = dict(line.split("=", 1) for line in out["stdout"].splitlines() if "=" in line)
    assert "sk-secret" not in out["stdout"] and "123:secret" not in out["stdout"]
    assert env["PATH"] and env["LC_ALL"] == "C.UTF-8"
    assert (env["N"], env["FLAG"], env["S"]) == ("7", "true", "x y")


async def test_allow_listed_variables_are_passed(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("OTHER_SECRET", "hidden")
    monkeypatch.setenv("GOONDAN_BASH_ENV_ALLOW", "OPENAI_API_KEY, NOT_SET")
    out = await exec_command(ctx, {"command": "echo $OPENAI_API_KEY/$OTHER_SECRET/$NOT_SET"})
    assert out["stdout"] == "sk-secret//\n"


async def test_timeout_kills_the_whole_process_group(ctx: ToolContext, workdir: Path) -> None:
    started = time.monotonic()
    out = await exec_command(
        ctx,
        {
            "command": "sleep 30.1 & echo $! > child.pid; sleep 30; echo never",
            "timeoutMs": 300,
        },
    )
    assert time.monotonic() - started < 3
    assert out["timedOut"] is True and out["exitCode"] == -1
    assert out["signal"] in {"SIGTERM", "SIGKILL"}
    assert "never" not in out["stdout"]
    assert (workdir / "child.pid").exists()
    assert pids_running("sleep 30.1") == []


async def test_cancelled_call_leaves_nothing_running(ctx: ToolContext, workdir: Path) -> None:
    task = asyncio.ensure_future(
        exec_command(ctx, {"command": "sleep 30.2 & echo $$ > shell.pid; wait"})
    )
    deadline = time.monotonic() + 5
    while not pids_running("sleep 30.2") and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    pids = pids_running("sleep 30.2")
    assert pids
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_dead(pids)


async def test_a_background_job_does_not_hold_the_call(ctx: ToolContext) -> None:
    out = await exec_command(ctx, {"command": "sleep 2 & echo started"})
    assert out["stdout"] == "started\n" and out["exitCode"] == 0
    assert out["durationMs"] < 1500


async def test_output_is_capped_head_and_tail(
    ctx: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOONDAN_BASH_OUTPUT_LIMIT_BYTES", "100")
    out = await exec_command(
        ctx,
        {
            "command": "echo START; head -c 5000 /dev/zero | tr '\\0' a; echo; echo END; "
            "head -c 3000 /dev/zero >&2"
        },
    )
    stdout = out["stdout"]
    assert stdout.startswith("START\naaaa") and stdout.endswith("aaaa\nEND\n")
    assert f"[{5011 - 100} bytes omitted of 5011]" in stdout
    assert len(stdout) < 200
    assert "bytes omitted of 3000" in out["stderr"]


async def test_script_runs_with_args_and_shell(ctx: ToolContext, workdir: Path) -> None:
    (workdir / "bin").mkdir(parents=True)
    (workdir / "bin" / "greet.sh").write_text('echo "$1-$2 from $0"\nexit 4\n')
    out = await script(ctx, {"path": "bin/greet.sh", "args": ["a", "b"]})
    path = str(workdir.resolve() / "bin" / "greet.sh")
    assert out["stdout"] == f"a-b from {path}\n"
    assert (out["path"], out["shell"], out["args"], out["exitCode"]) == (
        path,
        "/bin/bash",
        ["a", "b"],
        4,
    )
    assert set(out) == {
        "path",
        "shell",
        "args",
        "durationMs",
        "stdout",
        "stderr",
        "exitCode",
        "signal",
        "timedOut",
    }
    sh = await script(ctx, {"path": "bin/greet.sh", "shell": "/bin/sh", "timeoutMs": 5000})
    assert sh["shell"] == "/bin/sh" and sh["stdout"].startswith("- from")


async def test_script_timeout(ctx: ToolContext, workdir: Path) -> None:
    workdir.mkdir(parents=True)
    (workdir / "slow.sh").write_text("sleep 30\n")
    out = await script(ctx, {"path": "slow.sh", "timeoutMs": 200})
    assert out["timedOut"] is True and out["exitCode"] == -1


@pytest.mark.parametrize(
    "call, args, code",
    [
        ("exec", {"command": "  "}, "E_TOOL_INVALID_ARGS"),
        ("exec", {"command": "true", "cwd": "missing"}, "E_NOT_FOUND"),
        ("exec", {"command": "true", "env": {"A=B": "x"}}, "E_TOOL_INVALID_ARGS"),
        ("script", {"path": "missing.sh"}, "E_NOT_FOUND"),
        ("script", {"path": "ok.sh", "shell": "/no/such/shell"}, "E_EXEC_FAILED"),
    ],
)
async def test_errors(
    ctx: ToolContext, workdir: Path, call: str, args: dict[str, Any], code: str
) -> None:
    workdir.mkdir(parents=True)
    (workdir / "ok.sh").write_text("true\n")
    with pytest.raises(ToolError) as info:
        await handlers[call](ctx, args)
    assert info.value.code == code


# --- the sandbox ---------------------------------------------------------------------------------


def _layout(workdir: Path, outside: Path) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (outside / "evil.sh").write_text("echo ran-outside\n")
    (workdir / "to-outside").symlink_to(outside, target_is_directory=True)
    (workdir / "to-etc").symlink_to("/etc", target_is_directory=True)
    (workdir / "evil-link.sh").symlink_to(outside / "evil.sh")


CWD_ESCAPES = ["..", "../outside", "/etc", "to-etc", "to-outside"]
SCRIPT_ESCAPES = ["../outside/evil.sh", "{outside}/evil.sh", "evil-link.sh", "to-outside/evil.sh"]


@pytest.mark.parametrize("cwd", CWD_ESCAPES)
async def test_cwd_escapes_are_refused_by_default(
    ctx: ToolContext, workdir: Path, outside: Path, cwd: str
) -> None:
    _layout(workdir, outside)
    with pytest.raises(ToolError) as info:
        await exec_command(ctx, {"command": "touch pwned", "cwd": cwd})
    assert info.value.code == "E_PATH_OUTSIDE_WORKDIR"
    assert not (outside / "pwned").exists()


@pytest.mark.parametrize("cwd", CWD_ESCAPES)
async def test_cwd_escapes_are_allowed_when_configured(
    ctx: ToolContext, workdir: Path, outside: Path, cwd: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _layout(workdir, outside)
    monkeypatch.setenv("GOONDAN_FS_ALLOW_OUTSIDE_WORKDIR", "1")
    out = await exec_command(ctx, {"command": "pwd", "cwd": cwd})
    assert out["stdout"].strip() == os.path.realpath(workdir / cwd) == out["cwd"]


@pytest.mark.parametrize("path", SCRIPT_ESCAPES)
async def test_script_escapes_are_refused_by_default(
    ctx: ToolContext, workdir: Path, outside: Path, path: str
) -> None:
    _layout(workdir, outside)
    with pytest.raises(ToolError) as info:
        await script(ctx, {"path": path.format(outside=outside)})
    assert info.value.code == "E_PATH_OUTSIDE_WORKDIR"


@pytest.mark.parametrize("path", SCRIPT_ESCAPES)
async def test_script_escapes_are_allowed_when_configured(
    ctx: ToolContext, workdir: Path, outside: Path, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _layout(workdir, outside)
    monkeypatch.setenv("GOONDAN_FS_ALLOW_PATHS", f"/nonexistent,{outside}")
    out = await script(ctx, {"path": path.format(outside=outside)})
    assert out["stdout"] == "ran-outside\n"
    assert out["path"] == str(outside.resolve() / "evil.sh")
