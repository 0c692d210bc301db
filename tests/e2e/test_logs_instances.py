"""`goondan instance` and `goondan logs` over real state."""

import json
import os
import queue
import signal
import subprocess
import threading
import time

from agentproc.conversation import read_messages
from agentproc.runtime_events import RuntimeEvent, RuntimeEventLog
from goondan.cli.client import ControlClient
from goondan.paths import StatePaths
from ipc import wire
from tests.e2e.conftest import GOONDAN, goondan


def test_instance_list_and_delete(start_daemon, state_root):
    daemon = start_daemon()
    daemon.send("What is 1 plus 2?")
    daemon.send("a fact about the number 9", "--agent", "researcher", "--instance", "side")
    rows = {r["instanceKey"]: r for r in json.loads(daemon.cli("instance", "list").stdout)}
    assert (
        rows["cli"]["agents"] == ["assistant", "researcher"] and rows["cli"]["swarm"] == "default"
    )
    assert rows["cli"]["messages"] >= 10
    assert rows["side"]["agents"] == ["researcher"]

    # While the daemon runs: the researcher drops the instance from memory, its files go.
    deleted = daemon.cli("instance", "delete", "side")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == "deleted default/side"
    rows = json.loads(daemon.cli("instance", "list").stdout)
    assert [r["instanceKey"] for r in rows] == ["cli"]
    # ... and the next turn of that key starts a new conversation
    daemon.send("a fact about the number 7", "--agent", "researcher", "--instance", "side")
    stored = read_messages(state_root / "swarms/default/instances/side/researcher")
    assert [m.content for m in stored if m.role == "user"] == ["a fact about the number 7"]
    missing = daemon.cli("instance", "delete", "nope")
    assert missing.returncode == 1 and "no instance 'nope'" in missing.stderr

    daemon.cli("stop")
    daemon.proc.wait(10)
    deleted = goondan("instance", "delete", "cli", "--state-root", str(state_root))
    assert deleted.returncode == 0 and deleted.stdout.strip() == "deleted default/cli"
    left = json.loads(goondan("instance", "list", "--state-root", str(state_root)).stdout)
    assert [r["instanceKey"] for r in left] == ["side"]
    missing = goondan("instance", "delete", "nope", "--state-root", str(state_root))
    assert missing.returncode == 1 and "no stored instance 'nope'" in missing.stderr


def test_logs_shows_the_turn_that_just_answered_to_its_end(start_daemon):
    """Agents write their runtime events in batches, up to a second after a turn; `goondan
    logs` has a running daemon's agents write what they hold before it reads, so a script
    that sends and then reads the logs sees the whole request."""
    daemon = start_daemon()
    sent = daemon.send("What is 2 plus 3?", "--json")
    assert sent.returncode == 0, sent.stderr
    shown = daemon.cli("logs", "--json")
    assert shown.returncode == 0, shown.stderr
    turns = [json.loads(line) for line in shown.stdout.splitlines()]
    ends = [(e["agentName"], e["type"]) for e in turns if e["type"].startswith("turn.")]
    assert ends == [
        ("assistant", "turn.started"),
        ("researcher", "turn.started"),
        ("researcher", "turn.completed"),
        ("assistant", "turn.completed"),
    ]


def test_logs_does_not_wait_long_for_a_stuck_agent(start_daemon):
    """An agent that cannot answer (stopped here) is waited for 2 s: the orchestrator answers
    `goondan logs` without it, and the other agents' events are written and shown."""
    daemon = start_daemon()
    assert daemon.send("What is 2 plus 3?").returncode == 0
    researcher = next(p["pid"] for p in daemon.status()["processes"] if p["name"] == "researcher")
    os.kill(researcher, signal.SIGSTOP)
    try:
        shown = daemon.cli("logs", "--json")
    finally:
        os.kill(researcher, signal.SIGCONT)
    assert shown.returncode == 0, shown.stderr
    assert "did not answer" not in shown.stderr  # the orchestrator answered without it
    assistant = [json.loads(line) for line in shown.stdout.splitlines() if '"assistant"' in line]
    assert assistant[-1]["type"] == "turn.completed"


def test_logs_of_one_agent_asks_only_that_agent(start_daemon):
    """`goondan logs --agent NAME` has only that agent write what it holds: with hundreds of
    agents, reading one agent's events does not wake every other."""
    daemon = start_daemon()
    assert daemon.send("What is 2 plus 3?").returncode == 0
    with ControlClient(StatePaths.at(daemon.state_root)) as client:
        one = client.command("logs.flush", wire.LogsFlushArgs(agents=["researcher"])).result
        every = client.command("logs.flush", wire.LogsFlushArgs()).result
    assert one == {"agents": ["researcher"]}
    assert sorted(every["agents"]) == ["assistant", "researcher"]


def test_logs_merges_files_by_time_and_filters(state_root):
    paths = StatePaths.at(state_root)
    for agent, key, trace, kind, second, directory in [
        ("a", "k1", "t" * 32, "turn.started", 1, paths.agent_dir("default", "a")),
        ("b", "k1", "t" * 32, "tool.completed", 2, paths.agent_dir("default", "b")),
        # where earlier builds kept an instance's events: still read
        ("a", "k2", "u" * 32, "turn.completed", 0, paths.conversation_dir("default", "k2", "a")),
    ]:
        log = RuntimeEventLog(directory)
        stamp = f"2026-01-01T00:00:0{second}Z"
        log.emit(RuntimeEvent(kind, stamp, agent, key, trace, "s" * 16))
        log.close()
    every = goondan("logs", "--state-root", str(state_root)).stdout.splitlines()
    assert [json.loads(line)["type"] for line in every] == [
        "turn.completed",
        "turn.started",
        "tool.completed",
    ]
    by_trace = goondan("logs", "--trace", "t" * 32, "--state-root", str(state_root))
    assert [json.loads(line)["agentName"] for line in by_trace.stdout.splitlines()] == ["a", "b"]
    by_agent = goondan("logs", "--agent", "a", "--instance", "k2", "--state-root", str(state_root))
    [only] = by_agent.stdout.splitlines()
    assert json.loads(only)["type"] == "turn.completed"
    empty = goondan("logs", "--state-root", str(state_root / "nothing"))
    assert empty.returncode == 1 and "no runtime events" in empty.stderr
    assert str(state_root / "nothing" / "logs" / "daemon.log") in empty.stderr


def test_one_request_traced_across_agents(state_root):
    from tests.e2e.conftest import QUICKSTART

    run = goondan(
        "run", str(QUICKSTART), "--state-root", str(state_root), "--input", "What is 2 plus 3?"
    )
    assert run.returncode == 0
    events = [
        json.loads(line)
        for line in goondan("logs", "--state-root", str(state_root)).stdout.splitlines()
    ]
    [trace] = {e["traceId"] for e in events}  # one request, one trace, two agents
    assert {e["agentName"] for e in events} == {"assistant", "researcher"}
    delegated = next(
        e
        for e in events
        if e["type"] == "tool.called" and e["data"].get("toolName") == "agents__request"
    )
    callee_turn = next(
        e for e in events if e["type"] == "turn.started" and e["agentName"] == "researcher"
    )
    # the researcher's turn hangs under the assistant's tool call in the trace
    assert callee_turn["parentSpanId"] == delegated["spanId"]
    shown = goondan(
        "logs", "--trace", trace, "--agent", "researcher", "--state-root", str(state_root)
    )
    assert {json.loads(line)["agentName"] for line in shown.stdout.splitlines()} == {"researcher"}


def test_runtime_events_rotate_and_logs_reads_both_files(state_root):
    directory = StatePaths.at(state_root).agent_dir("default", "a")
    log = RuntimeEventLog(directory, rotate_bytes=2000)
    for i in range(40):  # ~200 bytes each: rotates several times
        stamp = f"2026-01-01T00:00:{i:02d}Z"
        log.emit(RuntimeEvent("turn.started", stamp, "a", "k", "t" * 32, f"{i:016x}"))
    log.close()
    files = sorted(p.name for p in directory.iterdir())
    assert files == ["runtime-events.jsonl", "runtime-events.jsonl.1"]
    assert all((directory / name).stat().st_size <= 2000 + 300 for name in files)
    shown = goondan("logs", "--state-root", str(state_root)).stdout.splitlines()
    spans = [int(json.loads(line)["spanId"], 16) for line in shown]
    # the oldest events went with the earlier rotations; what is kept is in order, up to the last
    assert spans == list(range(spans[0], 40)) and len(spans) >= 10


def test_logs_follow_goes_on_across_a_rotation(state_root):
    directory = StatePaths.at(state_root).agent_dir("default", "a")
    log = RuntimeEventLog(directory, rotate_bytes=1000)

    def emit(i: int) -> None:
        stamp = f"2026-01-01T00:00:{i:02d}Z"
        log.emit(RuntimeEvent("turn.started", stamp, "a", "k", "t" * 32, f"{i:016x}"))

    emit(0)
    follower = subprocess.Popen(
        [*GOONDAN, "logs", "-f", "--json", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None
    stdout = follower.stdout
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()

    def next_span() -> int:
        try:
            return int(json.loads(lines.get(timeout=5))["spanId"], 16)
        except queue.Empty:
            raise AssertionError("goondan logs -f printed nothing more") from None

    try:
        assert next_span() == 0
        for i in range(1, 12):  # past 1000 bytes: the file rotates under the follower
            emit(i)
            time.sleep(0.15)
        assert [next_span() for _ in range(11)] == list(range(1, 12))
    finally:
        follower.kill()
        follower.wait()
        stdout.close()
        log.close()
