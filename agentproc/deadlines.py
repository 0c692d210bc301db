"""Deadlines of turns and tool calls: one loop timer for all of an agent's running ones.

A timer per turn or call (what `asyncio.timeout` does) costs a loop timer armed and torn down
each time, although nearly every turn and call ends long before its deadline. Here a deadline is
an entry in a list ordered by deadline, and one timer waits for the earliest: since every turn
of an agent has the same time budget (and most calls the same tool's limit), a new deadline is
usually the latest, and starting or ending one touches no timer at all. When the timer fires it
cancels the tasks that are past their deadline (marking them `expired`, so the task can tell
its own deadline from someone else's cancel) and waits for the next. The agent keeps one
`Deadlines` for its turns and its `ToolExecutor` one for tool calls.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections import deque
from typing import Any

COMPACT_AT = 1024  # ended entries held behind a long turn before the list is rebuilt


class Deadline:
    __slots__ = ("when", "task", "expired", "ended")

    def __init__(self, when: float, task: asyncio.Task[Any]) -> None:
        self.when = when  # time.monotonic()
        self.task = task
        self.expired = False  # the watchdog cancelled the task for this deadline
        self.ended = False


class Deadlines:
    """Cancels each watched task when its deadline passes, unless it has ended."""

    def __init__(self) -> None:
        self._entries: deque[Deadline] = deque()  # by `when`
        self._ended = 0  # ended entries still in `_entries`
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None

    def __len__(self) -> int:
        return len(self._entries) - self._ended

    def watch(self, task: asyncio.Task[Any], when: float) -> Deadline:
        """Watch `task` until `end(deadline)`; past `when` it is cancelled."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # first use, or reused in another loop (tests)
            self._entries.clear()
            self._ended = 0
            self._timer = None
            self._loop = loop
        deadline = Deadline(when, task)
        entries = self._entries
        if not entries or entries[-1].when <= when:
            entries.append(deadline)
        else:  # a shorter budget than an earlier turn's
            entries.insert(bisect.bisect_right([e.when for e in entries], when), deadline)
        if self._timer is None or when < self._timer_at:
            self._arm(when)
        return deadline

    def end(self, deadline: Deadline) -> None:
        """The turn is over: its deadline no longer applies."""
        if deadline.ended:
            return
        deadline.ended = True
        self._ended += 1
        entries = self._entries
        while entries and entries[0].ended:
            entries.popleft()
            self._ended -= 1
        if self._ended > COMPACT_AT and self._ended * 2 > len(entries):
            # A long turn at the front holds back the entries of every turn since it began.
            self._entries = deque(e for e in entries if not e.ended)
            self._ended = 0

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        assert self._loop is not None
        self._timer_at = when
        self._timer = self._loop.call_later(max(0.0, when - time.monotonic()), self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = time.monotonic()
        entries = self._entries
        while entries and (entries[0].ended or entries[0].when <= now):
            deadline = entries.popleft()
            if deadline.ended:
                self._ended -= 1
                continue
            deadline.expired = True
            deadline.ended = True
            deadline.task.cancel()
        if entries:
            self._arm(entries[0].when)
