"""The template process: imports the agent runtime once, then forks agent processes on request.

A fresh interpreter must import asyncio, zmq, msgspec, structlog and yaml before it can answer;
a fork of a process that already has them is ready at once (figure 3), and idle agents share
those pages with the template (`reference/ipc-limits.md` §4). Like multiprocessing's forkserver, the
template has no event loop, no threads and no ZeroMQ context when it forks.

Protocol (JSON lines): the orchestrator writes `{"id": N, "argv": [...], "credential": "..."}`
to our stdin (the credential reaches the child in memory, never in its argv); we answer
`{"id": N, "pid": P}` (or `{"id": N, "error": "..."}`) on stdout, and `{"exit": P, "code": C}`
when a child ends (C is negative for a signal, like `Popen.returncode`). EOF on stdin ends us;
the children then die through their parent-death signal.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
from typing import Any

# The runtime every agent needs, imported here once so children inherit it.
import uvloop  # noqa: F401

import agentproc.main  # (and, through it, the whole agent runtime)
import agentproc.providers.scripted  # noqa: F401
from agentproc.fresh_pools import fill_partial_pools
from agentproc.rehearsal import rehearse
from goondan.logs import configure_logging
from goondan.orphans import die_with_parent

try:  # the SDK-based providers are heavy to import; preload them when installed
    import agentproc.providers.openai  # noqa: F401
except ImportError:  # pragma: no cover
    pass


def _write(out: int, message: dict[str, Any]) -> None:
    os.write(out, (json.dumps(message) + "\n").encode())


def _reap(out: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _write(out, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _child(argv: list[str], credential: str | None, fds: tuple[int, ...]) -> None:
    """In the forked child: drop the template's plumbing, then become an agent process."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # stdin becomes /dev/null and stdout goes to stderr (stdout of the daemon is for answers);
    # dup2 over the template's pipes, so fds 0-2 always stay taken (libuv insists on it).
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    for fd in {devnull, *fds} - {0, 1, 2}:
        os.close(fd)
    # Objects inherited from the template stay frozen: collecting them would write to (and
    # so un-share) every page they live on. gc still collects what this agent allocates.
    code = 1
    try:
        code = agentproc.main.main(argv, credential.encode() if credential else None)
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


def warm_up(bundle: str | None) -> None:
    """Load the daemon's bundle once, so every child inherits parsed modules and compiled
    argument validators instead of building them itself."""
    if bundle is None:
        return
    try:
        from goondan.bundle.cache import load_bundle_cached

        load_bundle_cached(bundle)
    except Exception:  # a broken bundle is reported by the agents themselves
        pass


def serve() -> int:
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so the wakeup fd sees it
    gc.collect()
    _filler = fill_partial_pools()  # alive as long as this frame: in the children too
    gc.freeze()  # keep the shared pages clean: gc passes would otherwise dirty them
    _write(stdout, {"ready": os.getpid()})
    buffer = b""
    while True:
        try:
            readable, _, _ = select.select([stdin, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(stdout)
        if stdin not in readable:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            return 0
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as exc:
                _write(stdout, {"id": request["id"], "error": str(exc)})
                continue
            if pid == 0:
                _update_environ(request.get("env"))
                _child(request["argv"], request.get("credential"), (stdin, stdout, wake_r, wake_w))
            _write(stdout, {"id": request["id"], "pid": pid})


if __name__ == "__main__":
    die_with_parent(int(sys.argv[1]) if len(sys.argv) > 1 else os.getppid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the orchestrator's business
    configure_logging()  # to stderr: stdout carries the protocol
    warm_up(sys.argv[2] if len(sys.argv) > 2 else None)
    rehearse()
    raise SystemExit(serve())
