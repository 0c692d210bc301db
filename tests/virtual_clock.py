"""An event loop on a clock of its own, for tests of timers and deadlines: whenever nothing is
ready to run, the loop jumps its clock to its next timer instead of waiting for it. Sleeps take
no real time, a loaded machine cannot make a timer late, and `loop.time()` says exactly how
much loop time passed. Only for code that waits on the loop alone: work on other threads or in
other processes would see the timers run early."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: VirtualClockLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer to jump to: wait for I/O as any loop would
            return super().select(None)
        ready = super().select(0)
        if not ready:
            self._loop.now += timeout  # the loop waits exactly until its next timer is due
        return ready


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` to completion on a fresh `VirtualClockLoop` whose clock starts at 0."""
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(main)
