"""Request timeouts: one loop timer for every request in flight.

A loop timer per request, armed when it is routed and cancelled when it is answered, costs more
than routing the request itself, and nearly every request is answered long before its timeout.
Here a request's deadline is an entry in a heap and one timer waits for the earliest. An
answered request leaves its entry behind: the entry is skipped when its time comes (the caller
says which requests are still open), and the heap is rebuilt when such entries far outnumber the
open ones. Most requests share the default timeout, so a new deadline is rarely the earliest
and routing a request touches no timer at all. An entry holds what the caller watches: a small
key, not the request, so that an answered request is freed at once rather than when its entry
leaves the heap.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

COMPACT_AT = 1024  # entries of answered requests tolerated before the heap is rebuilt


class Timeouts(Generic[T]):
    """Calls `on_expired(item)` once `item`'s deadline passes, if `is_open(item)` still."""

    def __init__(self, is_open: Callable[[T], bool], on_expired: Callable[[T], None]) -> None:
        self._is_open = is_open
        self._on_expired = on_expired
        self._heap: list[tuple[float, int, T]] = []
        self._order = itertools.count()  # ties: the earlier request first; items never compared
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def __len__(self) -> int:
        """Entries held, answered or not."""
        return len(self._heap)

    def add(self, item: T, seconds: float, open_count: int) -> None:
        """Watch `item` for `seconds`; `open_count` is how many requests are open now."""
        when = time.monotonic() + seconds
        heap = self._heap
        if len(heap) > COMPACT_AT and len(heap) > 2 * open_count:
            heap[:] = [entry for entry in heap if self._is_open(entry[2])]
            heapq.heapify(heap)
        heapq.heappush(heap, (when, next(self._order), item))
        if self._timer is None or when < self._timer_at:
            self._arm(when)

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(0.0, when - time.monotonic()), self._fire)

    def _fire(self) -> None:
        self._timer = None
        heap = self._heap
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            item = heapq.heappop(heap)[2]
            if self._is_open(item):
                self._on_expired(item)
        if heap:
            self._arm(heap[0][0])
