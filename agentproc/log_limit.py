"""At most one log line per kind of problem per interval, so a peer that floods bad frames
cannot flood the log (or the disk under it) as well."""

from __future__ import annotations

import time

LOG_INTERVAL_S = 10.0


class LogLimit:
    """`due(key)` is the number of lines held back since the last one when a line for `key`
    may be written now, else None (that line is counted and held back)."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def due(self, key: str) -> int | None:
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        self._last[key] = now
        return self._held.pop(key, 0)
