"""When an agent says it is alive: a tick at most every interval, and none while its answers
say it.

The orchestrator takes any frame from an agent as a sign of life, so a tick sends a heartbeat
only when the agent sent nothing for an interval (each one wakes the orchestrator: at 200 busy
agents, 200 times a second for nothing). The tick itself is a timer, and a timer wakes its
process: at 1,000 agents each wake-up of a process whose caches others have emptied costs
~200 µs of CPU. So each answer puts the timer off (at most once per half interval), and an
agent with a turn at least every half interval is never woken for it (docs/performance.md,
"Heartbeats"). With `--metrics` the counts ride on every tick: then nothing puts it off.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


class Heartbeat:
    def __init__(
        self, interval_s: float, tick: Callable[[float], None], *, put_off: bool = True
    ) -> None:
        """`tick(now)` sends what is due (a heartbeat when `last_sent` is an interval old);
        `put_off`: whether answers put the next tick off."""
        self.interval_s = interval_s
        self.last_sent = 0.0  # time.monotonic() of the agent's last frame, set as it sends
        self._tick = tick
        self._put_off = put_off
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = 0.0
        self._stopped = False

    def start(self) -> None:
        self._arm(time.monotonic(), self.interval_s)

    def answered(self, now: float) -> None:
        """The agent answered at `now`: the next tick comes an interval later (the timer is
        moved at most once per half interval: a move costs a timer's cancel and a new one)."""
        if self._put_off and not self._stopped and now - self._armed_at >= self.interval_s / 2:
            self._arm(now, self.interval_s)

    def stop(self) -> None:
        """No tick from now on (the agent is stopping)."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _arm(self, now: float, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = now
        self._timer = asyncio.get_running_loop().call_later(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = time.monotonic()
        try:
            self._tick(now)
        finally:  # next when the interval since the last frame is up (a timer may fire early)
            if not self._stopped:
                delay = max(self.last_sent + self.interval_s - now, self.interval_s / 100)
                self._arm(now, delay)
