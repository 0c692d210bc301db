"""The template process: imports the agent runtime once, then forks agent processes on request.

A fresh interpreter must import asyncio, zmq, msgspec, structlog and yaml before it can answer;
a fork of a process that already has them is ready at once (figure 3), and idle agents share
those pages with the template (`reference/ipc-limits.md` §4). Like multiprocessing's forkserver, the
template has no event loop, no threads and no ZeroMQ context when it forks.

Protocol (JSON lines): we say `{"ready": PID}` once the runtime is imported, and
`{"warm": PID, ...}` once rehearsed and frozen (`Warming`). The orchestrator writes first
`{"bundle": PATH, "providers": [...], "environ": {...}, "openFiles": N, "immortal": B}`
(again after a reload: we import the providers we lack and load the bundle again), then a
line per launch, `{"id": N, "argv": [...], "credential": "..."}` (the credential reaches the
child in memory, never in its argv); we answer `{"id": N, "pid": P}` (or `{"id": N, "error":
"..."}`) on stdout, and `{"exit": P, "code": C}` when a child ends (C is negative for a
signal, like `Popen.returncode`). EOF on stdin ends us; the children then die through their
parent-death signal.

Spares (`Spares`, as Android's USAP pool or a pre-forking server): the configuration's
`"spares": N` keeps N children forked ahead, each done with what does not depend on which
agent it becomes and waiting on a pipe for its launch line. A launch hands its line to a spare
instead of forking (the fork is most of a launch's time in the template), and we fork the next
spare once no launch came for a moment. Spares are no agents: the orchestrator never hears of
one until it is given a launch, and one that ends before is not reported.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import json
import os
import resource
import select
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

# The runtime every agent needs, imported here once so children inherit it.
import uvloop  # noqa: F401

import agentproc.main  # (and, through it, the whole agent runtime)
import agentproc.providers.scripted  # noqa: F401
from agentproc.fresh_pools import fill_partial_pools
from agentproc.immortal_heap import Immortalizer
from agentproc.rehearsal import TURNS, rehearse_turns
from goondan.logs import configure_logging
from goondan.orphans import die_with_parent
from goondan.proctitle import set_title


def preload_providers(providers: list[str]) -> None:
    """Import the providers the bundle's Models use, so that children share their SDKs.

    Only those: the `openai` SDK alone takes most of a second to import, which every daemon
    start would pay for a bundle that never calls it. After a reload the orchestrator names
    them again, and the template imports those it lacks before its next fork."""
    for name in providers:
        if name in ("", "scripted"):
            continue
        try:
            importlib.import_module(f"agentproc.providers.{name}")
        except ImportError:  # its SDK is not installed: the agent reports it at its start
            pass


def _write(out: int, message: dict[str, Any]) -> None:
    # The orchestrator gone (it stopped, or failed as it started): nobody to tell. Its end of
    # our stdin is closed too, so the loop reads EOF next and the template ends as at a stop.
    with contextlib.suppress(BrokenPipeError):
        os.write(out, (json.dumps(message) + "\n").encode())


def _reap(out: int, spares: Spares) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if not spares.reaped(pid):
            _write(out, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _detach(fds: Iterable[int]) -> None:
    """In a forked child: drop the template's plumbing (`fds`: the template's pipes and the
    spares' assignment pipes, none of which a child may keep)."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # stdin becomes /dev/null and stdout goes to stderr (stdout of the daemon is for answers);
    # dup2 over the template's pipes, so fds 0-2 always stay taken (libuv insists on it).
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    for fd in {devnull, *fds} - {0, 1, 2}:
        os.close(fd)


def _child(argv: list[str], credential: str | None, fds: Iterable[int]) -> None:
    """In the forked child: drop the template's plumbing, then become an agent process."""
    _detach(fds)
    _become_agent(argv, credential)


def _become_agent(
    argv: list[str], credential: str | None, prepared: agentproc.main.Prepared | None = None
) -> None:
    # Objects inherited from the template stay frozen: collecting them would write to (and
    # so un-share) every page they live on. gc still collects what this agent allocates.
    code = 1
    try:
        code = agentproc.main.main(argv, credential.encode() if credential else None, prepared)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - report and exit; never return into the template loop
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _update_environ(changes: dict[str, str | None] | None) -> None:
    """Apply what changed in the orchestrator's environment since this template started
    (a reload that re-read the env files), so the child sees what a fresh interpreter would."""
    for name, value in (changes or {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _spare(
    assignment: int, fds: Iterable[int], template: int, agent_argv: list[str] | None
) -> None:
    """In a spare: what does not depend on the agent, then wait for the launch line, then
    become that agent. Never returns into the template's loop."""
    code = 1
    try:
        _detach(fds)
        die_with_parent(template)
        set_title("goondan: template spare")
        prepared = None
        if agent_argv is not None:
            try:
                prepared = agentproc.main.Prepared(agent_argv)
            except (Exception, SystemExit):  # noqa: BLE001 - the launch will do it all, and say why
                prepared = None
        request = _read_line(assignment)
        os.close(assignment)
        if request is None:  # discarded by the template (or it is gone)
            code = 0
        else:
            # What the agent inherits must be this launch's: its environment changes, its
            # credential, its argv (the agent's own title comes with them).
            if request.get("env"):
                _update_environ(request["env"])
                if prepared is not None:
                    prepared.stale = True  # set up under the environment before
            _become_agent(request["argv"], request.get("credential"), prepared)
    except BaseException:  # noqa: BLE001 - report and exit; never return into the template
        import traceback

        traceback.print_exc()
    finally:
        os._exit(code)


def _read_line(fd: int) -> dict[str, Any] | None:
    """The one JSON line on `fd`; None at EOF before a whole line."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = os.read(fd, 65536)
        if not chunk:
            return None
        data += chunk
    message: dict[str, Any] = json.loads(data)
    return message


class Spares:
    """Children forked ahead of their launch, each waiting on its pipe for a launch line.

    The pool is filled once the template is warm (rehearsed and frozen, which its spares then
    share) and no launch came for a moment, and emptied (each spare killed) when a new
    configuration changes what the children inherit; until the template is warm again,
    launches fork as before. A spare that ends before its launch is no agent's exit: not
    reported; after a few such ends in a row no more are forked and launches fork."""

    MAX_LOST = 3
    # A new spare is forked once no launch came for this long: not while the agents just
    # launched start up (the fork's CPU would be theirs), nor between launches that come
    # together (they fork as before, at no extra cost).
    QUIET_S = 0.02

    def __init__(self) -> None:
        self.target = 0
        # The argv of every agent, with an empty `--agent`: a spare sets up the agent process
        # with it before its launch (`agentproc.main.Prepared`).
        self.agent_argv: list[str] | None = None
        self.waiting: list[tuple[int, int]] = []  # (pid, the write end of its pipe), oldest first
        self.unassigned: set[int] = set()  # spares not given a launch, until reaped
        self.lost = 0  # spares that ended unassigned in a row

    def lacking(self) -> bool:
        return len(self.waiting) < self.target and self.lost < self.MAX_LOST

    def fds(self) -> list[int]:
        return [fd for _, fd in self.waiting]

    def fill(self, template_fds: tuple[int, ...]) -> None:
        while self.lacking():
            read_end, write_end = os.pipe()
            gc.freeze()  # as before any fork: the template's objects stay out of collections
            parent = os.getpid()
            try:
                pid = os.fork()
            except OSError:  # (counted as lost, so that we do not try again at once, forever)
                os.close(read_end)
                os.close(write_end)
                self.lost += 1
                return
            if pid == 0:
                _spare(read_end, (*template_fds, write_end, *self.fds()), parent, self.agent_argv)
            os.close(read_end)
            os.set_blocking(write_end, False)  # a stopped spare must not stop the template
            self.waiting.append((pid, write_end))
            self.unassigned.add(pid)

    def assign(self, line: bytes) -> int | None:
        """Hand a launch line (ending with a newline) to a spare; its pid, or None when none
        took it."""
        if len(line) > 65536:  # more than an empty pipe surely holds: fork instead
            return None
        while self.waiting:
            pid, fd = self.waiting.pop(0)
            try:
                written = os.write(fd, line)
            except OSError:  # it has ended (or is ending): it is reaped unreported
                written = 0
            finally:
                os.close(fd)
            if written == len(line):
                self.unassigned.discard(pid)
                self.lost = 0
                return pid
            self._kill(pid)
        return None

    def discard(self) -> None:
        """What a child inherits has changed: the spares forked before are of no use."""
        for pid, fd in self.waiting:
            os.close(fd)
            self._kill(pid)
        self.waiting.clear()

    def reaped(self, pid: int) -> bool:
        """Whether `pid` was a spare (whose end nobody is told of)."""
        if pid not in self.unassigned:
            return False
        self.unassigned.discard(pid)
        for entry in self.waiting:
            if entry[0] == pid:  # it ended on its own, before any launch
                self.waiting.remove(entry)
                os.close(entry[1])
                self.lost += 1
                break
        return True

    def close(self) -> None:
        """At the template's end: no spare outlives it, nor is left unreaped."""
        self.discard()
        for pid in list(self.unassigned):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        self.unassigned.clear()

    @staticmethod
    def _kill(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def warm_up(bundle: str | None) -> None:
    """Load the daemon's bundle once, so every child inherits parsed modules and compiled
    argument validators instead of building them itself; and import its Models' providers."""
    if bundle is None:
        return
    try:
        from goondan.bundle.cache import load_bundle_cached

        loaded = load_bundle_cached(bundle)
    except Exception:  # a broken bundle is reported by the agents themselves
        return
    preload_providers(list(loaded.model_providers()))


class Warming:
    """What makes forked agents cheap beyond the imports, done while no launch waits.

    The template answers launches once the runtime is imported and the bundle loaded: a
    daemon's first agents do not wait for the rest. The rehearsal (`agentproc/rehearsal.py`,
    stopped after a turn when a launch comes in and resumed later from that turn), making the
    template's objects immortal (`agentproc/immortal_heap.py`, in pieces as well) and freezing
    them come after, once nothing has come in for IDLE_S, so
    the first launches (the entry agent's, then those of the agents it asks) are not caught
    behind them. Agents forked after it share all of it; the few forked before quicken their
    own code on their first turns. A reload's new configuration makes it load the bundle
    again and freeze once more."""

    IDLE_S = 0.05

    def __init__(self, bundle: str | None) -> None:
        self.bundle = bundle
        self.bundle_loaded = True  # `run_template` loaded it before serving
        self.turns_done = 0
        self.rehearsal_failed = False
        self.frozen = False  # collected, pools filled and frozen since the last change
        self.immortal = True  # `daemon.immortal_template` (agentproc/immortal_heap.py)
        self.immortalizer: Immortalizer | None = Immortalizer()  # None once done
        self.fillers: list[object] = []  # alive as long as the template: in the children too

    def configure(self, message: dict[str, Any]) -> None:
        if "environ" in message:  # what the agents inherit: the daemon's, as it is now
            os.environ.clear()
            os.environ.update(message["environ"])
        if "openFiles" in message:
            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (message["openFiles"], hard))
        self.immortal = message.get("immortal", self.immortal)
        preload_providers(message.get("providers", []))
        self.bundle, self.bundle_loaded = message.get("bundle"), False  # (a cache hit if unchanged)
        self.immortalizer = Immortalizer()  # what the new configuration loaded
        self.frozen = False

    def pending(self) -> bool:
        return not self.frozen

    def step(self, interrupted: Callable[[], bool]) -> dict[str, int] | None:
        """One piece of the warming; the rehearsal stops early when `interrupted()`. Returns
        the message that says the template is warm, after the last piece."""
        if self.bundle is not None and not self.bundle_loaded:
            warm_up(self.bundle)
            self.bundle_loaded = True
        elif self.turns_done < TURNS and not self.rehearsal_failed:
            answered = rehearse_turns(self.turns_done, TURNS, interrupted)
            self.turns_done += answered
            self.rehearsal_failed = answered == 0
        elif self.immortal and self.immortalizer is not None:
            if self.immortalizer.run(interrupted):
                self.immortalizer = None
        else:
            gc.collect()
            self.fillers.append(fill_partial_pools())
            gc.freeze()  # keep the shared pages clean: gc passes would otherwise dirty them
            self.frozen = True
            return {"warm": os.getpid(), "rehearsedTurns": self.turns_done}
        return None


def _on_sigchld(signum: int, frame: object) -> None:
    """A handler, so that the wakeup fd sees SIGCHLD; the loop reaps."""


def serve(bundle: str | None = None) -> int:
    stdin, stdout = 0, 1  # the pipes, whatever sys.stdin and sys.stdout are
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, _on_sigchld)
    warming = Warming(bundle)
    spares = Spares()
    plumbing = (stdin, stdout, wake_r, wake_w)
    _write(stdout, {"ready": os.getpid()})
    buffer = b""
    quiet_since = time.monotonic()

    def launch_waiting() -> bool:
        return bool(select.select([stdin], [], [], 0)[0])

    while True:
        timeout = None
        if warming.pending():
            timeout = max(0.0, quiet_since + Warming.IDLE_S - time.monotonic())
        if spares.lacking() and not warming.pending():
            due = max(0.0, quiet_since + Spares.QUIET_S - time.monotonic())
            timeout = due if timeout is None else min(timeout, due)
        try:
            readable, _, _ = select.select([stdin, wake_r], [], [], timeout)
        except InterruptedError:
            continue
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(stdout, spares)
        if stdin not in readable:
            idle = time.monotonic() - quiet_since
            if not readable and warming.pending() and idle >= Warming.IDLE_S:
                if (warm := warming.step(launch_waiting)) is not None:
                    _write(stdout, warm)
                # The rehearsal's event loop took the wakeup fd and SIGCHLD over, and a child
                # may have ended meanwhile.
                signal.set_wakeup_fd(wake_w)
                signal.signal(signal.SIGCHLD, _on_sigchld)
                _reap(stdout, spares)
            if idle >= Spares.QUIET_S and not warming.pending():
                spares.fill(plumbing)
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            spares.close()
            return 0
        quiet_since = time.monotonic()
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            if "argv" not in request:
                warming.configure(request)
                spares.target = request.get("spares", spares.target)
                spares.agent_argv = request.get("agentArgv", spares.agent_argv)
                spares.lost = 0  # a new configuration: spares get another chance
                spares.discard()  # forked with the configuration before
                continue
            if (pid := spares.assign(line + b"\n")) is not None:
                _write(stdout, {"id": request["id"], "pid": pid})
                continue
            # Objects inherited from the template stay out of the children's collections,
            # warm or not: collecting them would write to (and so un-share) their pages.
            gc.freeze()
            try:
                pid = os.fork()
            except OSError as exc:
                _write(stdout, {"id": request["id"], "error": str(exc)})
                continue
            if pid == 0:
                _update_environ(request.get("env"))
                _child(request["argv"], request.get("credential"), (*plumbing, *spares.fds()))
            _write(stdout, {"id": request["id"], "pid": pid})


def run_template(parent_pid: int, bundle: str | None) -> int:
    """The template's life: `python -m agentproc.zygote PARENT_PID [BUNDLE]`, or a fork of
    `goondan run` (`orchestrator.launcher.start_template_early`), stdin and stdout its pipes."""
    die_with_parent(parent_pid)
    set_title("goondan: template")
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's business
    configure_logging()  # to stderr: stdout carries the protocol
    # The bundle (and so the providers' SDKs) before saying ready: a template started early by
    # `goondan run` has the time, while the daemon imports and loads it too.
    warm_up(bundle)
    return serve(bundle)


if __name__ == "__main__":
    raise SystemExit(
        run_template(
            int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid(),
            sys.argv[2] if len(sys.argv) > 2 else None,
        )
    )
