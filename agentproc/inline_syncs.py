"""Where a quiet instance's fsync runs: on the agent's event loop while the disk answers fast,
in a thread for a while after it did not.

In a thread, each settle wakes a worker thread, which then needs the GIL back (perhaps in the
middle of a turn) and wakes the loop to say it is done: at scale, once conversations go quiet,
that made the waves' tails far longer than the fsync on the loop did (docs/performance.md,
"Measurements behind the code"). On a local disk such an fsync takes less than a turn, and
`--durability fsync` has every write's fsync on the loop already. A disk that takes longer (a
network volume, a neighbour flooding it) would hold the loop, and every instance's turns, as
long: after one fsync slower than `slow_s`, the next ones go to a thread for `thread_for_s`,
and then the loop tries again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Wall time: on a busy machine it includes waiting for a CPU once the disk has answered, a few
# milliseconds; a local disk's fsync of a small file takes a few tenths of one.
SLOW_S = 0.02
THREAD_FOR_S = 60.0


class InlineSyncs:
    def __init__(
        self,
        *,
        slow_s: float = SLOW_S,
        thread_for_s: float = THREAD_FOR_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._slow_s = slow_s
        self._thread_for_s = thread_for_s
        self._clock = clock
        self._thread_until = float("-inf")

    def inline(self) -> bool:
        """Whether the next fsync runs on the loop."""
        return self._clock() >= self._thread_until

    def run(self, sync: Callable[[], None]) -> None:
        """Run `sync` here and now, timed: past `slow_s`, the next ones go to a thread."""
        started = self._clock()
        try:
            sync()
        finally:
            if self._clock() - started > self._slow_s:
                self._thread_until = self._clock() + self._thread_for_s
