from goondan.settings import DEFAULTS
from orchestrator.supervisor import crash_backoff


def test_first_five_crashes_respawn_at_once() -> None:
    assert [crash_backoff(n, DEFAULTS.daemon) for n in range(1, 6)] == [0.0] * 5


def test_then_exponential_backoff_capped_at_five_minutes() -> None:
    assert [crash_backoff(n, DEFAULTS.daemon) for n in range(6, 10)] == [1.0, 2.0, 4.0, 8.0]
    assert crash_backoff(40, DEFAULTS.daemon) == 300.0
