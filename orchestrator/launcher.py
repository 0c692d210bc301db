"""How an agent process is started. The supervisor only sees `Launcher.launch`.

`SubprocessLauncher` starts a fresh interpreter (`python -m agentproc`): slower (~120 ms of
imports) but simple and easy to debug. A preloaded template process that forks agents is the
planned fast variant behind the same interface.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol

import msgspec


class LaunchSpec(msgspec.Struct, frozen=True):
    """What every agent process of this daemon needs to know."""

    bundle: Path
    swarm: str
    endpoint: str
    state_root: Path


class Launcher(Protocol):
    async def launch(self, agent: str) -> asyncio.subprocess.Process: ...


class SubprocessLauncher:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec

    async def launch(self, agent: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "agentproc",
            "--agent",
            agent,
            "--bundle",
            str(self.spec.bundle),
            "--swarm",
            self.spec.swarm,
            "--endpoint",
            self.spec.endpoint,
            "--state-root",
            str(self.spec.state_root),
            "--parent-pid",
            str(os.getpid()),
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno(),  # stdout of the daemon is for answers only
            stderr=None,
        )
