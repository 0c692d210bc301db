"""Supervision: hung agents, crash loops, redelivery — with real processes."""

import os
import signal
import time
from pathlib import Path

from agentproc.conversation import read_messages
from tests.e2e.conftest import QUICKSTART, pid_alive, solo_bundle, wait_for, write_bundle

STUCK = """\
import time

async def run(ctx, args):
    time.sleep(30)  # blocks the agent's event loop: no heartbeats
    return {}

handlers = {"run": run}
"""


def test_a_stopped_agent_is_detected_by_heartbeat_and_replaced(start_daemon):
    daemon = start_daemon(QUICKSTART, "--hang-timeout", "1")
    assert daemon.send("What is 1 plus 1?").returncode == 0
    old = daemon.process("researcher")["pid"]
    os.kill(old, signal.SIGSTOP)
    started = time.monotonic()
    wait_for(lambda: daemon.process("researcher")["restarts"] == 1, timeout=10)
    assert time.monotonic() - started < 4  # timeout + one check interval, with slack
    assert not pid_alive(old)
    assert "agent hung (no heartbeat)" in daemon.logs()
    assert daemon.send("What is 2 plus 2?").returncode == 0


def test_a_request_that_hangs_its_agent_twice_fails_instead_of_hanging(start_daemon, tmp_path):
    blocking = {"when": "block", "steps": [{"call": "stuck__run"}] * 2 + [{"reply": "unreachable"}]}
    bundle = solo_bundle(tmp_path / "b", rules=[blocking], tool="stuck", code=STUCK, grace_s=2)
    daemon = start_daemon(bundle, "--hang-timeout", "1")
    started = time.monotonic()
    proc = daemon.send("block")
    assert proc.returncode == 1
    assert "E_AGENT_CRASHED" in proc.stderr
    assert time.monotonic() - started < 10
    # delivered, killed; redelivered once (the turn resumed at its second tool call), killed
    # again: then the caller got its answer
    assert daemon.logs().count("agent hung (no heartbeat)") == 2


STUCK_ONCE = """\
import os
import time

async def run(ctx, args):
    marker = os.environ["STUCK_MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        time.sleep(30)  # blocks the agent's event loop once: no heartbeats
    return {}

handlers = {"run": run}
"""


def test_a_hang_after_an_earlier_crash_is_redelivered(start_daemon, tmp_path):
    # A ready agent that hangs is a crash while handling the request, even when the process
    # before it crashed: the request is delivered again, not failed as a start-up crash loop.
    blocking = {"when": "block", "steps": [{"call": "stuck__run"}, {"reply": "done"}]}
    bundle = solo_bundle(tmp_path / "b", rules=[blocking], tool="stuck", code=STUCK_ONCE)
    env = {"STUCK_MARKER": str(tmp_path / "marker")}
    daemon = start_daemon(bundle, "--hang-timeout", "1", env=env)
    assert daemon.send("hello").returncode == 0
    first = daemon.process("solo")["pid"]
    os.kill(first, signal.SIGKILL)  # an idle agent crashes; its replacement starts at once

    def replaced() -> bool:
        row = daemon.process("solo")
        return row["pid"] not in (None, first) and row["status"] == "idle"

    wait_for(replaced, timeout=20)
    proc = daemon.send("block")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "done"
    assert daemon.logs().count("agent hung (no heartbeat)") == 1


def test_input_accepted_before_an_orchestrator_kill_is_answered_after_restart(
    start_daemon, tmp_path, state_root
):
    import subprocess

    from tests.e2e.conftest import GOONDAN
    from tests.e2e.test_delegation import BUNDLE, SLOW_TOOL

    bundle = write_bundle(tmp_path / "b", BUNDLE, {"slow.py": SLOW_TOOL})
    daemon = start_daemon(bundle)
    workdir = state_root / "swarms/default/workspaces/cli"
    workdir.mkdir(parents=True)
    (workdir / "delay").write_text("30")
    sender = subprocess.Popen(
        [*GOONDAN, "send", "work please", "--agent", "sleeper", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: (workdir / "attempts").exists(), timeout=15)
    agent_pids = [p["pid"] for p in daemon.status()["processes"] if p["pid"]]
    daemon.proc.kill()  # SIGKILL: no clean shutdown, nothing flushed on purpose
    daemon.proc.wait()
    _, err = sender.communicate(timeout=10)
    assert sender.returncode == 2 and "stopped before answering" in err
    wait_for(lambda: not any(pid_alive(pid) for pid in agent_pids), timeout=2)

    # A new orchestrator on the same state root takes over and answers the journaled input.
    (workdir / "delay").write_text("0")
    restarted = start_daemon(bundle)
    convo = state_root / "swarms/default/instances/cli/sleeper"

    def answered() -> bool:
        messages = read_messages(convo)
        return bool(messages) and messages[-1].content == "attempt E_TOOL_INTERRUPTED"

    wait_for(answered, timeout=15)
    assert "delivering unanswered inputs from the journal" in restarted.logs()
    # answered once: the journal is empty again
    wait_for(lambda: b'"done"' in (state_root / "run/journal.jsonl").read_bytes(), timeout=5)
    assert (workdir / "attempts").read_text() == "1"


def test_crash_loop_backs_off_exponentially(start_daemon, tmp_path):
    import json
    from datetime import datetime

    crash = "import os\nos._exit(7)  # dies while loading, every time\n"
    bundle = solo_bundle(tmp_path / "b", tool="crash", code=crash)
    daemon = start_daemon(bundle)
    proc = daemon.send("hi", timeout=10)
    assert proc.returncode == 1 and "E_AGENT_CRASHED" in proc.stderr

    def crashes():
        return [
            json.loads(line)
            for line in daemon.logs().splitlines()
            if line.startswith("{") and '"agent process crashed"' in line
        ]

    wait_for(lambda: len(crashes()) >= 8, timeout=15)
    assert daemon.process("solo")["status"] in ("crashLoopBackOff", "spawning")
    events = crashes()
    at = [datetime.fromisoformat(e["timestamp"]).timestamp() for e in events]
    assert [e["backoffSeconds"] for e in events[:8]] == [0, 0, 0, 0, 0, 1.0, 2.0, 4.0]
    assert all(e["code"] == 7 for e in events)
    # crashes 1-5 respawn at once; then the waits are 1 s and 2 s
    assert at[4] - at[0] < 2
    assert 0.9 < at[6] - at[5] < 1.6
    assert 1.9 < at[7] - at[6] < 2.6


SLOW = """\
import time
from pathlib import Path

def run(ctx, args):
    time.sleep(float((Path(__file__).parent / "delay").read_text()))
    return {}

handlers = {"run": run}
"""


def _slow_daemon(start_daemon, tmp_path, grace, delay):
    import subprocess

    from tests.e2e.conftest import GOONDAN

    slow = {"when": "slow", "steps": [{"call": "slow__run"}, {"reply": "finished"}]}
    bundle = solo_bundle(
        tmp_path / "b", rules=[slow], tool="slow", code=SLOW, grace_s=grace, files={"delay": delay}
    )
    daemon = start_daemon(bundle)
    assert daemon.send("warm up").returncode == 0  # the agent is running
    sender = subprocess.Popen(
        [*GOONDAN, "send", "slow", "--state-root", str(daemon.state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: daemon.process("solo")["status"] == "processing", timeout=10)
    return daemon, sender


def test_graceful_stop_lets_the_running_turn_finish(start_daemon, tmp_path):
    daemon, sender = _slow_daemon(start_daemon, tmp_path, grace=10, delay="1")
    started = time.monotonic()
    assert daemon.cli("stop").returncode == 0
    out, err = sender.communicate(timeout=10)
    assert sender.returncode == 0 and out.strip() == "finished", err
    assert daemon.proc.wait(5) == 0
    assert time.monotonic() - started < 5
    assert "shutdown acknowledged" in daemon.logs() or "agent process exited" in daemon.logs()


def test_stop_kills_an_agent_that_outlives_the_grace_period(start_daemon, tmp_path):
    daemon, sender = _slow_daemon(start_daemon, tmp_path, grace=1, delay="30")
    pid = daemon.process("solo")["pid"]
    started = time.monotonic()
    assert daemon.cli("stop").returncode == 0
    assert daemon.proc.wait(10) == 0
    assert time.monotonic() - started < 5
    assert "agent did not stop in time; killing it" in daemon.logs()
    assert not pid_alive(pid)
    _, err = sender.communicate(timeout=10)
    assert sender.returncode == 1 and "E_SHUTTING_DOWN" in err
    assert "will be delivered when it starts again" in err
    from orchestrator.journal import Journal

    [kept] = Journal(daemon.state_root / "run" / "journal.jsonl").recover()
    assert b"slow" in kept.frame


def test_a_killed_template_process_is_replaced(start_daemon):
    daemon = start_daemon()
    assert daemon.send("What is 1 plus 1?").returncode == 0
    agents = [p["pid"] for p in daemon.status()["processes"]]

    def template_pid() -> int | None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            if cmdline[0] == b"goondan: template" and parent == daemon.proc.pid:
                return int(entry)
        return None

    template = template_pid()
    assert template is not None
    os.kill(template, signal.SIGKILL)
    wait_for(lambda: not any(pid_alive(pid) for pid in agents), timeout=5)  # they die with it
    again = daemon.send("What is 2 plus 2?")
    assert again.returncode == 0 and again.stdout.startswith("2 plus 2 is 4")
    assert template_pid() not in (None, template)
