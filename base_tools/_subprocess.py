"""Run one command for bash: its own process group, a scrubbed environment, a deadline, and
stdout/stderr capped to a head and a tail.

On timeout (or when the call is cancelled) the whole process group gets SIGTERM, then SIGKILL
after a short grace, so a command's children die with it. When the command itself exits, the
pipes are read for a moment more and then closed: a background job it left running (`server &`)
keeps running but cannot hold the call open. In the sandbox, the command is the init of its own
PID namespace, so what it leaves running ends when it exits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from base_tools import _sandbox
from base_tools._policy import (
    BASH_SAFE_ENV,
    BASH_SAFE_ENV_PREFIXES,
    DEFAULT_PATH,
    bash_env_allow,
    bash_output_limit,
)
from goondan import ErrorCode, ToolError

KILL_GRACE_SECONDS = 0.1  # SIGTERM -> SIGKILL, as upstream
PIPE_DRAIN_SECONDS = 0.2  # how long pipes are read after the command exits


@dataclass(frozen=True)
class Completed:
    stdout: str
    stderr: str
    exit_code: int
    signal: str | None
    timed_out: bool
    duration_ms: int


class CappedBuffer:
    """Keeps the first and last `limit // 2` bytes of a stream and counts the rest."""

    def __init__(self, limit: int) -> None:
        self._head_limit = limit - limit // 2
        self._tail_limit = limit // 2
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_limit:
            self._tail += data
            del self._tail[: max(0, len(self._tail) - self._tail_limit)]

    def text(self) -> str:
        omitted = self.total - len(self._head) - len(self._tail)
        head = self._head.decode("utf-8", "replace")
        if omitted <= 0:
            return head + self._tail.decode("utf-8", "replace")
        tail = self._tail.decode("utf-8", "replace")
        return f"{head}\n... [{omitted} bytes omitted of {self.total}] ...\n{tail}"


def scrubbed_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The safe variables of this process, the operator's allow-list, then the call's `env`."""
    allowed = bash_env_allow()
    env = {
        name: value
        for name, value in os.environ.items()
        if name in BASH_SAFE_ENV or name.startswith(BASH_SAFE_ENV_PREFIXES) or name in allowed
    }
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(extra)
    return env


class _Collector(asyncio.SubprocessProtocol):
    def __init__(self, out: CappedBuffer, err: CappedBuffer) -> None:
        loop = asyncio.get_running_loop()
        self._buffers = {1: out, 2: err}
        self._open_pipes = {1, 2}
        self.exited: asyncio.Future[None] = loop.create_future()
        self.drained: asyncio.Future[None] = loop.create_future()

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        self._buffers[fd].feed(data)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._open_pipes.discard(fd)
        if not self._open_pipes and not self.drained.done():
            self.drained.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)


async def run(
    argv: Sequence[str], *, workdir: Path, cwd: Path, env: Mapping[str, str], timeout_ms: int
) -> Completed:
    """Run `argv` in the tool sandbox (`_sandbox.py`) confined to `workdir`, starting in `cwd`."""
    if os.path.isabs(argv[0]) and not os.access(argv[0], os.X_OK):
        raise ToolError(
            f"cannot start {argv[0]}: not an executable file", code=ErrorCode.E_EXEC_FAILED
        )
    command = _sandbox.wrap(argv, workdir=workdir, cwd=cwd)
    # A namespace's init ignores SIGTERM and its wrapper does too: only SIGKILL ends the jail.
    signals = _KILL_ONLY if command is not argv else _TERM_THEN_KILL
    limit = bash_output_limit()
    out, err = CappedBuffer(limit), CappedBuffer(limit)
    started = time.monotonic()
    loop = asyncio.get_running_loop()
    try:
        transport, collector = await loop.subprocess_exec(
            lambda: _Collector(out, err),
            *command,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, so a timeout kills its children
        )
    except OSError as exc:
        raise ToolError(
            f"cannot start {argv[0]}: {exc.strerror or exc}", code=ErrorCode.E_EXEC_FAILED
        ) from None
    pgid = transport.get_pid()
    timed_out = False
    try:
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await asyncio.shield(collector.exited)
        except TimeoutError:
            timed_out = True
            await _kill_group(pgid, collector.exited, signals)
        await asyncio.wait([collector.drained], timeout=PIPE_DRAIN_SECONDS)
    finally:
        if transport.get_returncode() is None:  # cancelled from outside: leave nothing running
            await _kill_group(pgid, collector.exited, signals)
        transport.close()
    code = transport.get_returncode()
    assert code is not None
    return Completed(
        stdout=out.text(),
        stderr=err.text(),
        exit_code=code if code >= 0 else -1,
        signal=signal.Signals(-code).name if code < 0 else None,
        timed_out=timed_out,
        duration_ms=int((time.monotonic() - started) * 1000),
    )


_TERM_THEN_KILL = ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, None))
_KILL_ONLY = ((signal.SIGKILL, None),)


async def _kill_group(
    pgid: int,
    exited: asyncio.Future[None],
    signals: Sequence[tuple[signal.Signals, float | None]],
) -> None:
    """SIGTERM the group, give it a moment, then SIGKILL whatever is left of it."""
    for sig, grace in signals:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        if grace is not None:
            await asyncio.wait([exited], timeout=grace)
    await asyncio.shield(exited)
