"""Process hardening of the daemon, agents and connectors against their own tools and neighbours.

`forbid_inspection` clears the dumpable flag, so a same-uid process that is not root (a tool
that escaped its sandbox, another user's session under the same account) cannot read our
/proc/PID/environ or /proc/PID/mem, nor ptrace us. `harden_agent` adds what an agent needs:
the state root exported for the tool sandbox, and stdout captured as log lines, so a tool's
print() or a C library writing to fd 1 cannot break the daemon's JSON log.
"""

from __future__ import annotations

import ctypes
import io
import os
import sys
import threading

import structlog

_PR_SET_DUMPABLE = 4


def forbid_inspection() -> None:
    """prctl(PR_SET_DUMPABLE, 0): /proc/self/{environ,mem} become root-only; no ptrace."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: nothing of the kind to set
        return


def harden_agent(state_root: str) -> None:
    forbid_inspection()
    # The tool sandbox hides this directory from every tool subprocess (base_tools/_sandbox.py).
    os.environ["GOONDAN_STATE_ROOT"] = os.path.abspath(os.path.expanduser(state_root))
    capture_stdout()


def capture_stdout() -> None:
    """sys.stdout becomes one structured log line (event "stdout") per line written; fd 1 goes
    to /dev/null, so output written below Python (C code, os.write(1, ...)) is dropped rather
    than landing unframed in the log."""
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    sys.stdout = StdoutLog()


class StdoutLog(io.TextIOBase):
    """A text stream that logs each complete line; a partial line waits for its end or flush."""

    def __init__(self) -> None:
        self._pending = ""
        self._lock = threading.Lock()  # sync tool handlers print from worker threads
        self._log = structlog.get_logger()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            self._log.info("stdout", text=line)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            line, self._pending = self._pending, ""
        if line:
            self._log.info("stdout", text=line)
