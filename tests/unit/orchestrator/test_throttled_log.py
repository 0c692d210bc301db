"""Warnings a peer can provoke: one line per reason per interval, the rest counted."""

import time
from typing import Any

from orchestrator.throttled_log import ThrottledLog


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


def test_one_line_per_reason_per_interval_then_the_count_held_back() -> None:
    lines = Lines()
    log = ThrottledLog(lines, interval_s=0.05)
    for _ in range(5):
        log.warning("peer refused", "wrong credential", peer="x")
    log.warning("peer refused", "no credential", peer="y")  # another reason: its own line
    assert [(e, f["peer"], f["suppressed"]) for e, f in lines.lines] == [
        ("peer refused", "x", 0),
        ("peer refused", "y", 0),
    ]
    time.sleep(0.06)  # past the interval
    log.warning("peer refused", "wrong credential", peer="x")
    assert lines.lines[-1] == ("peer refused", {"peer": "x", "suppressed": 4})
