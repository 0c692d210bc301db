"""When an agent's quiet instances are synced and unloaded: at the end of a turn once one is
due, and by a timer only when no turn comes.

An instance that changed and then had no turn for `quiet_s` is fsync'd and unloaded (the
agent's `_settle_quiet`). Looking for such instances on a timer of their own woke every busy
agent every `quiet_s / 2`: at 1,000 agents, each wake-up of a process whose caches others have
emptied costs ~200 µs of CPU (docs/performance.md, "Settles at a turn's end"). A busy agent is
awake at the end of each of its turns anyway, so it looks then, once the earliest instance may
be quiet; the timer waits `quiet_s / 4` longer than that, so it fires only for an agent with
no turn meanwhile. Looks come at least `quiet_s / 4` apart, so that instances going quiet one
after another are settled together, not each at a turn of its own with a look through every
loaded instance. An instance is so settled between `quiet_s` and `1.5 * quiet_s` after its
last turn.

Agents started together (a daemon's start, a burst to many idle agents) would all look in the
same moment, and their fsyncs at once queue on the disk's flushes and on the inode table blocks
their files share: 200 agents forked together and then busy all settled 5 s later, in one wave
of requests, which took 106-176 ms against its neighbours' 35 (docs/performance.md, "Settles
spread over the agents"). So each agent's looks come up to `quiet_s / 4` after the due time, by
a phase of its own, from its name.
"""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable


class SettleSchedule:
    def __init__(
        self, quiet_s: float, settle_quiet: Callable[[float], float | None], phase: float = 0.0
    ) -> None:
        """`settle_quiet(now)` queues the settles of the instances quiet at `now` and returns
        when the next may be due (None: no instance has anything to settle). `phase`, in
        [0, 1) (`phase_of`): how much of `quiet_s / 4` this agent's looks come after the due
        time."""
        self._quiet_s = quiet_s
        self._offset = quiet_s / 4 * phase
        self._settle_quiet = settle_quiet
        self._due: float | None = None  # when the earliest loaded instance may be quiet
        self._timer: asyncio.TimerHandle | None = None
        self._closed = False

    def touched(self, now: float) -> None:
        """An instance was loaded or ended a turn (`now`, on `time.monotonic()`'s clock)."""
        if self._closed:  # the agent is stopping: it syncs every instance as it closes them
            return
        if self._due is None:
            self._set(now, now + self._quiet_s)
        elif now >= self._due:
            self._set(now, self._settle_quiet(now))

    def close(self) -> None:
        self._closed = True
        self._cancel()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _set(self, now: float, due: float | None) -> None:
        self._cancel()
        if due is not None:
            due = max(due + self._offset, now + self._quiet_s / 4)
            delay = due - now + self._quiet_s / 4
            self._timer = asyncio.get_running_loop().call_later(delay, self._fire)
        self._due = due

    def _fire(self) -> None:
        self._timer = None
        now = time.monotonic()
        self._set(now, self._settle_quiet(now))


def phase_of(name: str) -> float:
    """A phase in [0, 1) for the agent `name`: spread over agents, the same after a restart."""
    return zlib.crc32(name.encode()) / 2**32
