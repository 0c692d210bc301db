"""A disk whose fsyncs wait until the test lets them go, as a busy disk's do (a spy on
`os.fsync` that still syncs once released)."""

from __future__ import annotations

import os
import threading

import pytest


class HeldDisk:
    """fsync held until `release()`, as on a busy disk; `running` is set while one waits,
    `threads` are the threads that called it (the spy still syncs). `off_the_loop`: only
    fsyncs from other threads than this one are held."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, off_the_loop: bool = False) -> None:
        loop_thread = threading.get_ident()
        self.running = threading.Event()
        self._released = threading.Event()
        self.threads: list[int] = []
        fsync = os.fsync

        def held_fsync(fd: int) -> None:
            self.threads.append(threading.get_ident())
            if off_the_loop and threading.get_ident() == loop_thread:
                fsync(fd)
                return
            self.running.set()
            # On the event loop's thread this would wait for a release that cannot come.
            assert self._released.wait(10), "fsync held on the event loop"
            fsync(fd)

        monkeypatch.setattr(os, "fsync", held_fsync)

    def release(self) -> None:
        self._released.set()
