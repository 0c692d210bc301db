"""No orphans: every child of the orchestrator (agents, connectors) dies with it."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel for SIGKILL when the parent dies, even when it is SIGKILLed itself."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the heartbeat timeout still catches it
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
