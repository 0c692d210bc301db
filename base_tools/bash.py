"""`bash` tool of @goondan/base: run a shell command or a script in the instance's workdir.

Safe by default: `cwd` and the script path stay inside the workdir sandbox, the child gets a
scrubbed environment (no API keys or tokens of the swarm), a timeout kills the whole process
group, and stdout/stderr are capped (see `_subprocess.py`, `_policy.py`). The command runs in
the OS-level jail of `_sandbox.py`: no other process, no state root beyond its own workdir, no
capabilities.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from base_tools import _subprocess
from base_tools._workspace import resolve_path
from goondan import ErrorCode, ToolContext, ToolError

SHELL = "/bin/sh"
DEFAULT_SCRIPT_SHELL = "/bin/bash"
DEFAULT_TIMEOUT_MS = 30_000


async def exec_command(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    command = args["command"]
    if not command.strip():
        raise ToolError("command must not be empty", code=ErrorCode.E_TOOL_INVALID_ARGS)
    cwd = _working_dir(ctx, args.get("cwd"))
    done = await _subprocess.run(
        [SHELL, "-c", command],
        workdir=ctx.workdir,
        cwd=cwd,
        env=_env(args),
        timeout_ms=_timeout(args),
    )
    return {"command": command, "cwd": str(cwd), **_outcome(done)}


async def script(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = resolve_path(ctx.workdir, args["path"])
    if not path.is_file():
        raise ToolError(
            f"script {args['path']!r} does not exist (looked at {path})",
            code=ErrorCode.E_NOT_FOUND,
            suggestion="write it first with file-system__write",
        )
    shell = args.get("shell") or DEFAULT_SCRIPT_SHELL
    script_args = [str(item) for item in args.get("args", [])]
    done = await _subprocess.run(
        [shell, str(path), *script_args],
        workdir=ctx.workdir,
        cwd=resolve_path(ctx.workdir, "."),
        env=_env(args),
        timeout_ms=_timeout(args),
    )
    return {"path": str(path), "shell": shell, "args": script_args, **_outcome(done)}


def _working_dir(ctx: ToolContext, raw: str | None) -> Path:
    if raw is None or raw == "":
        return resolve_path(ctx.workdir, ".")
    cwd = resolve_path(ctx.workdir, raw, what="cwd")
    if not cwd.is_dir():
        raise ToolError(
            f"cwd {raw!r} is not an existing directory (looked at {cwd})",
            code=ErrorCode.E_NOT_FOUND,
            suggestion="create it with file-system__mkdir",
        )
    return cwd


def _env(args: dict[str, Any]) -> dict[str, str]:
    extra = {}
    for name, value in (args.get("env") or {}).items():
        if not name or "=" in name or "\x00" in name:
            raise ToolError(
                f"env: invalid variable name {name!r}", code=ErrorCode.E_TOOL_INVALID_ARGS
            )
        extra[name] = _env_value(value)
    return _subprocess.scrubbed_env(extra)


def _env_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _timeout(args: dict[str, Any]) -> int:
    return int(args.get("timeoutMs", DEFAULT_TIMEOUT_MS))


def _outcome(done: _subprocess.Completed) -> dict[str, Any]:
    return {
        "durationMs": done.duration_ms,
        "stdout": done.stdout,
        "stderr": done.stderr,
        "exitCode": done.exit_code,
        "signal": done.signal,
        "timedOut": done.timed_out,
    }


handlers = {"exec": exec_command, "script": script}
