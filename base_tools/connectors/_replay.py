"""Replay protection for signed webhooks: a signed timestamp must be recent, and a signature
is taken once within the window in which its timestamp is accepted."""

from __future__ import annotations

import time
from collections import OrderedDict

TOLERANCE_S = 300  # how far a request's timestamp may be from now (Slack and Stripe: 5 min)
MAX_REMEMBERED = 100_000  # signatures held at most; past this the oldest is forgotten early


class ReplayGuard:
    def __init__(self, tolerance_s: int = TOLERANCE_S, max_remembered: int = MAX_REMEMBERED):
        self.tolerance_s = tolerance_s
        self.max_remembered = max_remembered
        self._seen: OrderedDict[str, float] = OrderedDict()  # signature -> forget after

    def timestamp_problem(self, timestamp: str | None) -> str | None:
        """Why `timestamp` (Unix seconds) is refused, or None when it is recent enough."""
        if not timestamp:
            return "no timestamp header"
        try:
            sent = int(timestamp.strip())
        except ValueError:
            return f"the timestamp {timestamp!r} is not Unix seconds"
        skew = abs(time.time() - sent)
        if skew > self.tolerance_s:
            return f"the timestamp is {skew:.0f} s from now (at most {self.tolerance_s} s)"
        return None

    def take(self, signature: str) -> bool:
        """True the first time `signature` is seen within the window, False for a replay. A
        request that then fails before its event is accepted calls `release` so its sender
        may retry it."""
        now = time.monotonic()
        seen = self._seen
        while seen and next(iter(seen.values())) <= now:
            seen.popitem(last=False)
        if signature in seen:
            return False
        # Twice the tolerance: a timestamp may lie that far ahead of the clock and be taken.
        seen[signature] = now + 2 * self.tolerance_s
        if len(seen) > self.max_remembered:
            seen.popitem(last=False)
        return True

    def release(self, signature: str) -> None:
        self._seen.pop(signature, None)
