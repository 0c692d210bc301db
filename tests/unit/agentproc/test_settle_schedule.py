"""When quiet instances are settled (`agentproc.settle_schedule`): at a busy agent's turns' ends,
and by a timer only for an agent with no turn meanwhile, on a real event loop."""

from __future__ import annotations

import asyncio
import time

from agentproc.settle_schedule import SettleSchedule, phase_of

QUIET_S = 0.4  # long beside the stalls of a loaded machine's event loop
LATE_S = 0.2  # how late such a machine may run a timer


class Instances:
    """Each instance's last turn; `settle_quiet` settles those quiet for QUIET_S, recording
    whether a turn's end or the timer asked."""

    def __init__(self) -> None:
        self.last_turn: dict[str, float] = {}  # the changed ones, not settled yet
        self.settled: list[tuple[str, str, float]] = []  # (instance, asked by, quiet for)
        self.asking = "timer"

    def settle_quiet(self, now: float) -> float | None:
        for name, last in list(self.last_turn.items()):
            if now - last >= QUIET_S:
                self.settled.append((name, self.asking, now - last))
                del self.last_turn[name]
        return min((last + QUIET_S for last in self.last_turn.values()), default=None)

    def turn(self, schedule: SettleSchedule, name: str) -> None:
        now = time.monotonic()
        self.last_turn[name] = now
        self.asking = "turn"
        schedule.touched(now)
        self.asking = "timer"


async def test_a_busy_agent_settles_at_its_turns_ends_and_is_not_woken_for_it() -> None:
    instances = Instances()
    schedule = SettleSchedule(QUIET_S, instances.settle_quiet)
    instances.turn(schedule, "old")
    started = time.monotonic()
    while time.monotonic() - started < QUIET_S * 1.6:  # another instance's turns, every 10 ms
        await asyncio.sleep(0.01)
        instances.turn(schedule, "busy")
    assert [(name, by) for name, by, _ in instances.settled] == [("old", "turn")]
    _, _, quiet_for = instances.settled[0]
    assert QUIET_S <= quiet_for < QUIET_S * 1.5  # at a turn's end once due, before the timer
    schedule.close()


async def test_an_agent_with_no_turn_is_woken_to_settle_within_half_the_quiet_time() -> None:
    instances = Instances()
    schedule = SettleSchedule(QUIET_S, instances.settle_quiet)
    instances.turn(schedule, "k")
    await asyncio.sleep(QUIET_S * 2)
    assert [(name, by) for name, by, _ in instances.settled] == [("k", "timer")]
    _, _, quiet_for = instances.settled[0]
    assert QUIET_S <= quiet_for < QUIET_S * 1.5 + LATE_S
    # Nothing left to settle: no timer until the next turn.
    settled = len(instances.settled)
    await asyncio.sleep(QUIET_S * 2)
    assert len(instances.settled) == settled
    instances.turn(schedule, "k")
    await asyncio.sleep(QUIET_S * 2)
    assert [name for name, _, _ in instances.settled] == ["k", "k"]
    schedule.close()


async def test_a_closed_schedule_settles_nothing_more() -> None:
    """A stopping agent settles nothing more, not even after its last turns: it syncs every
    instance as it closes them."""
    instances = Instances()
    schedule = SettleSchedule(QUIET_S, instances.settle_quiet)
    instances.turn(schedule, "old")
    schedule.close()
    await asyncio.sleep(QUIET_S * 1.2)
    instances.turn(schedule, "last")
    await asyncio.sleep(QUIET_S * 2)
    assert instances.settled == []


async def test_instances_going_quiet_one_after_another_are_settled_together() -> None:
    """Ten instances whose last turns came 10 ms apart, then another instance's turns every
    10 ms: the instances are looked through a few times, not at every turn once due."""
    instances = Instances()
    looks = 0

    def settle_quiet(now: float) -> float | None:
        nonlocal looks
        looks += 1
        return instances.settle_quiet(now)

    schedule = SettleSchedule(QUIET_S, settle_quiet)
    for n in range(10):
        instances.turn(schedule, f"k{n}")
        await asyncio.sleep(0.01)
    started = time.monotonic()
    while time.monotonic() - started < QUIET_S * 1.2:
        await asyncio.sleep(0.01)
        instances.turn(schedule, "busy")
    assert sorted(name for name, _, _ in instances.settled) == [f"k{n}" for n in range(10)]
    assert looks <= 3
    assert all(QUIET_S <= quiet_for < QUIET_S * 1.5 for _, _, quiet_for in instances.settled)
    schedule.close()


async def test_an_agents_phase_puts_its_looks_off_by_up_to_a_quarter_of_the_quiet_time() -> None:
    """Agents started together do not all look for quiet instances in the same moment."""
    quiet = 100.0  # no timer fires during the test
    looks: list[float] = []

    def settle_quiet(now: float) -> float | None:
        looks.append(now)
        return None

    schedule = SettleSchedule(quiet, settle_quiet, 0.2)  # looks 5 s after the due time
    schedule.touched(0.0)
    schedule.touched(quiet + 4.9)
    assert looks == []
    schedule.touched(quiet + 5.1)
    assert looks == [quiet + 5.1]
    schedule.close()
    looks.clear()
    schedule = SettleSchedule(quiet, settle_quiet, 0.0)
    schedule.touched(0.0)
    schedule.touched(quiet + 0.1)
    assert looks == [quiet + 0.1]
    schedule.close()


def test_phases_spread_over_the_agents_and_stay_the_same() -> None:
    phases = [phase_of(f"w{i}") for i in range(200)]
    assert all(0.0 <= p < 1.0 for p in phases)
    assert all(sum(q / 4 <= p < (q + 1) / 4 for p in phases) >= 30 for q in range(4))
    assert phase_of("w7") == phase_of("w7")
