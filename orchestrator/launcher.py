"""How agent processes are started. The supervisor only sees `Launcher.launch` and the
`ChildProcess` it returns; `make_launcher` is the one place that picks a variant.

- `ZygoteLauncher` (default): a template process (`python -m agentproc.zygote`) has imported
  the agent runtime once and forks each agent from it: ready in milliseconds, and idle agents
  share the runtime's memory pages.
- `SubprocessLauncher`: a fresh interpreter per agent (`python -m agentproc`). Slower (each
  agent imports the runtime itself) but the simplest thing to debug.

Every launch carries the slot's credential (`ipc.credential`), never in argv or the
environment: in the template's JSON launch line (the forked child has it in memory), or on a
pipe the fresh interpreter inherits (`--credential-fd N`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import msgspec
import structlog

from goondan.settings import LauncherKind, Settings
from ipc.tasks import TaskSet


class LaunchSpec(msgspec.Struct, frozen=True):
    """What every agent process of this daemon needs to know."""

    bundle: Path
    swarm: str
    endpoint: str
    state_root: Path
    settings: Settings  # the agent's nice increment, and what differs from the defaults
    # The children's stdout and stderr (a detached daemon's log pipe); None: the daemon's stderr.
    output_fd: int | None = None

    @property
    def output(self) -> int:
        return sys.stderr.fileno() if self.output_fd is None else self.output_fd

    def argv(self, agent: str, parent_pid: int) -> list[str]:
        return [
            "--agent", agent,
            "--bundle", str(self.bundle),
            "--swarm", self.swarm,
            "--endpoint", self.endpoint,
            "--state-root", str(self.state_root),
            "--parent-pid", str(parent_pid),
            "--nice", str(self.settings.daemon.agent_nice),
            *self.settings.to_argv(),
        ]  # fmt: skip


class ChildProcess(Protocol):
    pid: int

    async def wait(self) -> int:
        """The exit code; negative for a signal (as `Popen.returncode`)."""
        ...

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class Launcher(Protocol):
    async def start(self) -> None:
        """Get ready to launch (called at daemon start-up, off the critical path)."""
        ...

    async def launch(self, agent: str, credential: bytes) -> ChildProcess:
        """Start `agent`'s process; it presents `credential` when it connects."""
        ...

    async def aclose(self) -> None: ...


def make_launcher(kind: LauncherKind, spec: LaunchSpec) -> Launcher:
    if kind == "subprocess":
        return SubprocessLauncher(spec)
    return ZygoteLauncher(spec)


class SubprocessLauncher:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec

    async def start(self) -> None:
        return None

    async def launch(self, agent: str, credential: bytes) -> ChildProcess:
        with _credential_pipe(credential) as fd:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "agentproc",
                *self.spec.argv(agent, os.getpid()),
                "--credential-fd",
                str(fd),
                stdin=subprocess.DEVNULL,
                stdout=self.spec.output,  # stdout of the daemon is for answers only
                stderr=self.spec.output_fd,
                pass_fds=(fd,),
            )
        return process  # asyncio's Process already has pid / wait / terminate / kill

    async def aclose(self) -> None:
        return None


class ConnectorLauncher:
    """Connector processes run user protocol code (servers, pollers): a fresh interpreter each,
    `python -m orchestrator.connector_child`, and they load their Connection themselves (so
    secrets never travel on a command line)."""

    def __init__(self, spec: LaunchSpec, terminal_owner: str | None = None) -> None:
        self.spec = spec
        # The one connection (a `cli` connector) that gets the daemon's own stdin and stdout,
        # so `goondan run` in a terminal is interactive; the others get /dev/null.
        self.terminal_owner = terminal_owner

    async def start(self) -> None:
        return None

    async def launch(self, name: str, credential: bytes) -> ChildProcess:
        owns_terminal = name == self.terminal_owner
        with _credential_pipe(credential) as fd:
            argv = [
                "--connection", name.removeprefix("connection:"),
                "--bundle", str(self.spec.bundle),
                "--endpoint", self.spec.endpoint,
                "--state-root", str(self.spec.state_root),
                "--parent-pid", str(os.getpid()),
                "--credential-fd", str(fd),
                *self.spec.settings.to_argv(),
            ]  # fmt: skip
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "orchestrator.connector_child",
                *argv,
                stdin=None if owns_terminal else subprocess.DEVNULL,
                stdout=None if owns_terminal else self.spec.output,
                stderr=self.spec.output_fd,
                pass_fds=(fd,),
            )
        return process

    async def aclose(self) -> None:
        return None


@contextlib.contextmanager
def _credential_pipe(credential: bytes) -> Iterator[int]:
    """The read end of a pipe that holds `credential`, for a child to inherit; closed here
    once the child has it. (It fits the pipe's buffer, so writing first never blocks.)"""
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, credential)
    finally:
        os.close(write_fd)
    try:
        yield read_fd
    finally:
        os.close(read_fd)


def _environ_changes(before: dict[str, str]) -> dict[str, str | None]:
    """Name -> new value (None: unset) for what differs in `os.environ` from `before`."""
    now = dict(os.environ)
    changes: dict[str, str | None] = {k: v for k, v in now.items() if before.get(k) != v}
    changes.update((k, None) for k in before if k not in now)
    return changes


class ZygoteChild:
    """An agent forked by the template; its exit code arrives through the template."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def wait(self) -> int:
        return await asyncio.shield(self.exit)

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, sig: int) -> None:
        if not self.exit.done():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass


class ZygoteLauncher:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self._process: asyncio.subprocess.Process | None = None
        self._starting: asyncio.Task[None] | None = None
        # The environment the template started with: its agents inherit that one, so what
        # changed since (a reload re-read the env files) travels with each launch.
        self._environ: dict[str, str] = {}
        self._tasks = TaskSet("zygote launcher")  # the template's start, and its reader
        self._ids = itertools.count(1)
        self._launches: dict[int, asyncio.Future[ZygoteChild]] = {}
        self._children: dict[int, ZygoteChild] = {}
        self._closing = False
        self._log = structlog.get_logger().bind(component="zygote")

    async def start(self) -> None:
        """Start the template (idempotent; concurrent callers share one start)."""
        if self._process is not None and self._process.returncode is None:
            return
        if self._starting is None:
            self._starting = self._tasks.spawn(self._start(), name="start agent template")
        try:
            await asyncio.shield(self._starting)
        finally:
            self._starting = None

    async def _start(self) -> None:
        self._environ = dict(os.environ)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentproc.zygote",
            str(os.getpid()),
            str(self.spec.bundle),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.spec.output_fd,
        )
        assert process.stdout is not None
        try:
            first = await process.stdout.readline()
        except BaseException:  # cancelled at shutdown: no template left behind
            process.kill()
            raise
        if not first:
            raise OSError("the agent template process exited during start-up")
        self._process = process
        self._tasks.spawn(self._read(process), name="read agent template")
        self._log.debug("template process ready", pid=process.pid)

    async def launch(self, agent: str, credential: bytes) -> ChildProcess:
        await self.start()
        process = self._process
        assert process is not None and process.stdin is not None
        request_id = next(self._ids)
        future: asyncio.Future[ZygoteChild] = asyncio.get_running_loop().create_future()
        self._launches[request_id] = future
        line: dict[str, Any] = {
            "id": request_id,
            "argv": self.spec.argv(agent, process.pid),
            "credential": credential.decode(),
        }
        if os.environ != self._environ:
            line["env"] = _environ_changes(self._environ)
        process.stdin.write((json.dumps(line) + "\n").encode())
        try:
            return await future
        finally:
            self._launches.pop(request_id, None)

    async def aclose(self) -> None:
        self._closing = True
        process = self._process
        if process is not None and process.stdin is not None:
            process.stdin.close()  # EOF: the template exits
            try:
                await asyncio.wait_for(process.wait(), 5)
            except TimeoutError:
                process.kill()
                await process.wait()
        await self._tasks.close(grace_s=1.0)  # the reader ends at the template's EOF

    async def _read(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        try:
            while line := await process.stdout.readline():
                self._on_message(json.loads(line))
        except Exception:
            # Its launches can no longer be told apart: stop it (its agents die with it) and
            # let the next launch start a new one, rather than leave launches waiting forever.
            self._log.exception("unreadable line from the template process; stopping it")
            process.kill()
        # The template is gone; its children die with it (parent-death signal).
        await process.wait()
        if self._process is process:
            self._process = None
        if self._closing:
            self._log.debug("template process exited", code=process.returncode)
        else:  # its agents died with it; the next launch starts a new template
            self._log.warning("template process exited", code=process.returncode)
        for child in self._children.values():
            if not child.exit.done():
                child.exit.set_result(-signal.SIGKILL)
        self._children.clear()
        for future in self._launches.values():
            if not future.done():
                future.set_exception(OSError("the agent template process exited"))

    def _on_message(self, message: dict[str, Any]) -> None:
        if "exit" in message:
            child = self._children.pop(message["exit"], None)
            if child is not None and not child.exit.done():
                child.exit.set_result(int(message["code"]))
            return
        future = self._launches.get(message.get("id", -1))
        if future is None or future.done():
            return
        if "pid" in message:
            # Registered here, before anyone awaits it, so an early exit is never missed.
            child = self._children[message["pid"]] = ZygoteChild(message["pid"])
            future.set_result(child)
        else:
            future.set_exception(OSError(message.get("error", "fork failed")))
