"""The webhook's replay guard: recent timestamps only, each signature once, bounded memory."""

import time

from base_tools.connectors._replay import ReplayGuard


def test_a_signature_is_taken_once_until_released() -> None:
    guard = ReplayGuard()
    assert guard.take("sig")
    assert not guard.take("sig")
    guard.release("sig")  # its request was not accepted: the sender may retry
    assert guard.take("sig")


def test_memory_is_bounded_by_forgetting_the_oldest() -> None:
    guard = ReplayGuard(max_remembered=2)
    assert [guard.take(s) for s in ("a", "b", "c")] == [True, True, True]
    assert not guard.take("c") and not guard.take("b")
    assert guard.take("a")  # forgotten early, past the bound


def test_timestamps_outside_the_tolerance_are_refused() -> None:
    guard = ReplayGuard(tolerance_s=300)
    now = int(time.time())
    assert guard.timestamp_problem(str(now)) is None
    assert guard.timestamp_problem(str(now - 200)) is None
    assert "from now (at most 300 s)" in (guard.timestamp_problem(str(now - 900)) or "")
    assert "from now" in (guard.timestamp_problem(str(now + 900)) or "")
    assert guard.timestamp_problem(None) == "no timestamp header"
    assert "not Unix seconds" in (guard.timestamp_problem("yesterday") or "")
