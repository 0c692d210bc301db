"""`AgentUsage`: agents' cumulative counts, kept across respawns, never going backwards."""

from ipc import wire
from orchestrator.metrics import AgentUsage


def totals(usage: AgentUsage) -> dict[tuple[str, str, str, str], int]:
    return {(agent, *key): n for agent, key, n in usage.totals()}


def test_a_respawn_adds_the_new_process_counts_to_the_old_ones():
    usage = AgentUsage()
    usage.report("w", wire.Heartbeat(10, "m", {"ok": 3}, {"output": 40}, [("t", "ok", 2)]), 10)
    usage.report("w", wire.Heartbeat(11, "m", {"ok": 1}, {}, [("t", "error", 1)]), 11)
    assert totals(usage) == {
        ("w", "llm", "m", "ok"): 4,
        ("w", "tokens", "m", "output"): 40,
        ("w", "tools", "t", "ok"): 2,
        ("w", "tools", "t", "error"): 1,
    }


def test_a_late_beat_from_a_gone_process_is_dropped():
    usage = AgentUsage()
    usage.report("w", wire.Heartbeat(10, "m", {"ok": 3}), 10)
    usage.report("w", wire.Heartbeat(11, "m", {"ok": 1}), 11)
    usage.report("w", wire.Heartbeat(10, "m", {"ok": 5}), 11)  # the old pid, after the new one
    assert totals(usage) == {("w", "llm", "m", "ok"): 4}


def test_an_older_beat_of_the_same_process_never_lowers_a_count():
    usage = AgentUsage()
    usage.report("w", wire.Heartbeat(10, "m", {"ok": 3}), 10)
    usage.report("w", wire.Heartbeat(10, "m", {"ok": 2}), 10)
    assert totals(usage) == {("w", "llm", "m", "ok"): 3}
