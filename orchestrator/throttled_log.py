"""Warnings a peer can provoke at will, logged at most once per interval per reason.

A hostile or broken peer can repeat what gets it refused as fast as it can connect; one line
each would flood the journal and cost the loop more than the refusal itself."""

from __future__ import annotations

import time
from typing import Any

INTERVAL_S = 10.0


class ThrottledLog:
    def __init__(self, log: Any, interval_s: float = INTERVAL_S) -> None:
        self._log = log
        self._interval_s = interval_s
        self._last: dict[str, float] = {}  # key -> when its last line was written
        self._held: dict[str, int] = {}  # key -> lines held back since

    def warning(self, event: str, key: str = "", **fields: Any) -> None:
        """Log `event` unless `(event, key)` was logged within the interval; the next line
        written for it says how many were held back (`suppressed`)."""
        slot = f"{event}\0{key}"
        now = time.monotonic()
        last = self._last.get(slot)
        if last is not None and now - last < self._interval_s:
            self._held[slot] = self._held.get(slot, 0) + 1
            return
        self._last[slot] = now
        suppressed = self._held.pop(slot, 0)
        if len(self._last) > 1024:  # many distinct keys: forget the old ones, stay bounded
            self._last = {slot: now}
            self._held.clear()
        self._log.warning(event, suppressed=suppressed, **fields)
