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
import importlib
import itertools
import json
import os
import resource
import signal
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Protocol

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
    # The model providers the bundle's Models (and their fallbacks) use: the template imports
    # these SDKs once for every child, and no other (`openai` alone takes most of a second).
    providers: tuple[str, ...] = ()
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


class AgentLauncher(Launcher, Protocol):
    def set_providers(self, providers: tuple[str, ...]) -> None:
        """The bundle's Models changed (a reload): these are the providers they use now."""
        ...


def make_launcher(kind: LauncherKind, spec: LaunchSpec) -> AgentLauncher:
    if kind == "subprocess":
        return SubprocessLauncher(spec)
    return ZygoteLauncher(spec)


class SubprocessLauncher:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec

    async def start(self) -> None:
        return None

    def set_providers(self, providers: tuple[str, ...]) -> None:
        return None  # each agent imports its own provider

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


class TemplateProcess(Protocol):
    """What the launcher needs of the template's process: a `subprocess.Popen`, or a
    `ForkedTemplate`."""

    pid: int
    stdin: IO[bytes] | None
    stdout: IO[bytes] | None

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def kill(self) -> None: ...


class ForkedTemplate:
    """A template forked from this process (`start_template_early`), with Popen's interface."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not our child (a process that forked after us)
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


# A template started by `goondan run` before it builds the daemon (`start_template_early`), for
# the daemon's ZygoteLauncher to take over.
_head_start: TemplateProcess | None = None


def start_template_early(bundle: str) -> None:
    """Start the agent template now, so that it imports the agent runtime while this process
    imports the orchestrator and loads the bundle, instead of after: the two take about as long,
    and on a cold `goondan run --input` the first agent waits for the later of them.

    It is forked from this process, not started as a new interpreter: `goondan run` has
    imported the `goondan` package (asyncio, msgspec, structlog) and nothing else yet (no
    thread, no event loop, no socket), so the template skips the interpreter's start and those
    imports. The first `ZygoteLauncher.start` in this process takes it over."""
    global _head_start
    if _head_start is None:
        _head_start = _fork_template(bundle)


def _fork_template(bundle: str) -> ForkedTemplate:
    to_child, to_us = os.pipe(), os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the template; never returns into the CLI
        code = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's business
            os.umask(0o077)  # the daemon's (its agents' files are the owner's alone)
            os.dup2(to_child[0], 0)
            os.dup2(to_us[1], 1)
            for fd in (*to_child, *to_us):
                os.close(fd)
            code = importlib.import_module("agentproc.zygote").run_template(parent, bundle)
        except BaseException:  # noqa: BLE001 - report, and never run the CLI's code
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(to_child[0])
    os.close(to_us[1])
    return ForkedTemplate(pid, os.fdopen(to_child[1], "wb", 0), os.fdopen(to_us[0], "rb", 0))


def _spawn_template(bundle: str, output_fd: int | None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentproc.zygote", str(os.getpid()), bundle],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=output_fd,
    )


def _take_head_start() -> TemplateProcess | None:
    global _head_start
    popen, _head_start = _head_start, None
    if popen is not None and popen.poll() is not None:
        return None  # it died early: start another
    return popen


class Template:
    """The template process, driven from the event loop: its stdin for launch lines, its
    stdout for answers. Built on a `TemplateProcess` rather than asyncio's subprocess, so the
    one `goondan run` forked before its loop existed fits too."""

    def __init__(
        self,
        popen: TemplateProcess,
        stdin: asyncio.WriteTransport,
        stdout: asyncio.StreamReader,
        stdout_pipe: asyncio.ReadTransport,
    ) -> None:
        self.popen = popen
        self.pid = popen.pid
        self.stdout = stdout
        self._stdin = stdin
        self._stdout_pipe = stdout_pipe

    @classmethod
    async def adopt(cls, popen: TemplateProcess) -> Template:
        assert popen.stdin is not None and popen.stdout is not None
        loop = asyncio.get_running_loop()
        stdout = asyncio.StreamReader(limit=1 << 20)
        pipe, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stdout), popen.stdout
        )
        stdin, _ = await loop.connect_write_pipe(asyncio.Protocol, popen.stdin)
        return cls(popen, stdin, stdout, pipe)

    def close(self) -> None:
        """Close both pipes (once it has exited, or is being given up on)."""
        self._stdin.close()
        self._stdout_pipe.close()

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def send(self, message: dict[str, Any]) -> None:
        if not self._stdin.is_closing():
            self._stdin.write((json.dumps(message) + "\n").encode())

    def close_stdin(self) -> None:
        self._stdin.close()  # EOF: the template exits

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()

    async def wait(self) -> int:
        """Its exit code, once it has exited (a pidfd tells the loop; no thread, no polling)."""
        if (code := self.popen.poll()) is not None:
            return code
        loop = asyncio.get_running_loop()
        exited: asyncio.Future[None] = loop.create_future()
        fd = os.pidfd_open(self.pid)

        def readable() -> None:
            if not exited.done():
                exited.set_result(None)

        loop.add_reader(fd, readable)
        try:
            await exited
        finally:
            loop.remove_reader(fd)
            os.close(fd)
        return self.popen.wait()


class ZygoteLauncher:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self._process: Template | None = None
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
        popen = _take_head_start() or _spawn_template(str(self.spec.bundle), self.spec.output_fd)
        process = await Template.adopt(popen)
        # The template loads the bundle and imports the providers its Models use before it says
        # ready; this line (before any launch line) covers a bundle it could not load.
        process.send(self._configuration(self.spec.providers, process.pid))
        try:
            first = await process.stdout.readline()
        except BaseException:  # cancelled at shutdown: no template left behind
            process.kill()
            process.close()
            raise
        if not first:
            process.close()
            raise OSError("the agent template process exited during start-up")
        if self._closing:  # the daemon stopped while the template started: it has no use
            process.kill()
            process.close()
            return
        self._process = process
        self._tasks.spawn(self._read(process), name="read agent template")
        self._log.debug("template process ready", pid=process.pid)

    def _configuration(self, providers: tuple[str, ...], template_pid: int) -> dict[str, Any]:
        # The environment and open-files limit the daemon has now, for its agents to inherit:
        # a template started early was forked before `goondan run` had set them up. Later
        # changes (a reload re-read the env files) travel with each launch line.
        self._environ = dict(os.environ)
        return {
            "bundle": str(self.spec.bundle),
            "providers": list(providers),
            "environ": dict(os.environ),
            "openFiles": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
            "spares": self.spec.settings.daemon.spare_agents,
            "immortal": self.spec.settings.daemon.immortal_template,
            # What a spare prepares an agent with before it knows which (`--agent` empty).
            "agentArgv": self.spec.argv("", template_pid),
        }

    def set_providers(self, providers: tuple[str, ...]) -> None:
        """A reload changed the bundle's Models: the running template imports the providers it
        lacks (and reloads the bundle) between two launches. It is not replaced: its agents are
        its children and die with it, and their exits reach us only through its stdout."""
        self.spec = msgspec.structs.replace(self.spec, providers=providers)
        if self._process is not None:
            self._process.send(self._configuration(providers, self._process.pid))

    async def launch(self, agent: str, credential: bytes) -> ChildProcess:
        await self.start()
        process = self._process
        assert process is not None
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
        process.send(line)
        try:
            return await future
        finally:
            self._launches.pop(request_id, None)

    async def aclose(self) -> None:
        self._closing = True
        process = self._process
        if process is not None:
            process.close_stdin()
            try:
                async with asyncio.timeout(5):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        await self._tasks.close(grace_s=1.0)  # the reader ends at the template's EOF

    async def _read(self, process: Template) -> None:
        try:
            while line := await process.stdout.readline():
                self._on_message(json.loads(line))
        except Exception:
            # Its launches can no longer be told apart: stop it (its agents die with it) and
            # let the next launch start a new one, rather than leave launches waiting forever.
            self._log.exception("unreadable line from the template process; stopping it")
            process.kill()
        # The template is gone; its children die with it (parent-death signal).
        code = await process.wait()
        process.close()
        if self._process is process:
            self._process = None
        if self._closing:
            self._log.debug("template process exited", code=code)
        else:  # its agents died with it; the next launch starts a new template
            self._log.warning("template process exited", code=code)
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
        if "warm" in message:
            self._log.info("agent template warm", pid=message["warm"])
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
