"""One orchestrator per state root: an exclusive `flock` held for the daemon's life.

The kernel drops the lock when the process dies, however it dies, so a dead daemon never
blocks the next one.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType


class AlreadyRunning(Exception):
    pass


class StateLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> StateLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise AlreadyRunning(
                f"an orchestrator (pid {holder}) is already running on state root "
                f"{self.path.parent.parent}; stop it with `goondan stop` "
                "or use another --state-root"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
