"""A daemon left running, driven by `goondan send/status/stop` like a user would."""

import os
import resource
import signal
import time

import msgspec
import pytest
import zmq

from agentproc.conversation import read_messages
from goondan.cli.client import ControlClient
from goondan.paths import StatePaths
from ipc import wire
from tests.e2e.conftest import QUICKSTART, goondan, pid_alive, solo_bundle, wait_for
from tests.proc_table import open_files


def test_send_status_and_stop(start_daemon, state_root):
    daemon = start_daemon()
    first = daemon.send("What is 2 plus 3?")
    assert first.returncode == 0, first.stderr + daemon.logs()
    assert first.stdout.startswith("2 plus 3 is 5")

    status = daemon.status()
    assert status["pid"] == daemon.proc.pid and status["swarm"] == "default"
    rows = {p["name"]: p for p in status["processes"]}
    assert set(rows) == {"assistant", "researcher"}
    for row in rows.values():  # both started on demand: the researcher by the delegation
        assert row["kind"] == "agent" and row["status"] == "idle" and row["restarts"] == 0
        assert pid_alive(row["pid"])

    # another agent can be addressed directly, in its own conversation
    direct = daemon.send(
        "a fact about the number 7 please", "--agent", "researcher", "--instance", "x"
    )
    assert direct.stdout.strip().startswith("7 is a prime")

    stop = daemon.cli("stop")
    assert stop.returncode == 0, stop.stderr
    assert daemon.proc.wait(10) == 0
    assert not any(pid_alive(r["pid"]) for r in rows.values())
    assert not (state_root / "run" / "orchestrator.json").exists()
    # every agent drained, acknowledged and exited cleanly
    logs = daemon.logs()
    assert logs.count('"agent process exited"') == 2 and logs.count('"code": 0') >= 2
    assert "Assertion" not in logs and "Traceback" not in logs


def test_conversation_continues_across_sends(start_daemon, state_root):
    daemon = start_daemon()
    daemon.send("What is 1 plus 1?")
    daemon.send("What is 2 plus 2?")
    convo = state_root / "swarms/default/instances/cli/assistant"
    wait_for(lambda: sum(m.role == "user" for m in read_messages(convo)) == 2)


def test_send_without_a_daemon_says_so(state_root):
    proc = goondan("send", "hello", "--state-root", str(state_root))
    assert proc.returncode == 2
    assert "no orchestrator is running" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_agent_is_a_clear_error(start_daemon):
    daemon = start_daemon()
    proc = daemon.send("hi", "--agent", "nobody")
    assert proc.returncode == 1
    assert "AGENT_NOT_FOUND" in proc.stderr and "assistant, researcher" in proc.stderr


@pytest.mark.parametrize("spawn", ["zygote", "subprocess"])
def test_killed_agent_is_respawned_and_answers(start_daemon, spawn):
    daemon = start_daemon(QUICKSTART, "--spawn", spawn)
    assert daemon.send("What is 4 plus 4?").returncode == 0
    old = daemon.process("researcher")
    os.kill(old["pid"], signal.SIGKILL)
    wait_for(lambda: daemon.process("researcher")["restarts"] == 1)
    again = daemon.send("What is 5 plus 5?")
    assert again.returncode == 0, again.stderr + daemon.logs()
    assert "10 is not a prime" in again.stdout
    new = daemon.process("researcher")
    assert new["pid"] != old["pid"] and new["status"] == "idle"


def _thread_nices(pid: int) -> set[int]:
    """The nice value of every thread of `pid` (field 19 of /proc/PID/task/TID/stat)."""
    nices = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            nices.add(int(f.read().rsplit(")", 1)[1].split()[16]))
    return nices


def _thread_policies(pid: int) -> set[int]:
    """The scheduling policy of every thread of `pid`."""
    return {os.sched_getscheduler(int(tid)) for tid in os.listdir(f"/proc/{pid}/task")}


@pytest.mark.parametrize("spawn", ["zygote", "subprocess"])
def test_agents_run_a_little_below_the_daemons_priority(start_daemon, spawn):
    daemon = start_daemon(QUICKSTART, "--spawn", spawn)
    assert daemon.send("What is 4 plus 4?").returncode == 0
    own = os.getpriority(os.PRIO_PROCESS, daemon.proc.pid)
    for name in ("assistant", "researcher"):
        # every thread: libzmq's I/O thread is the agent's too
        pid = daemon.process(name)["pid"]
        assert _thread_nices(pid) == {min(own + 3, 19)}
        # Woken agents do not preempt each other's turns; the daemon preempts them to route.
        assert _thread_policies(pid) == {os.SCHED_BATCH}
    assert _thread_nices(daemon.proc.pid) == {own}
    assert _thread_policies(daemon.proc.pid) == {os.SCHED_OTHER}


def test_agent_priority_is_an_option(start_daemon):
    daemon = start_daemon(QUICKSTART, "--agent-nice", "0")
    assert daemon.send("What is 4 plus 4?").returncode == 0
    own = os.getpriority(os.PRIO_PROCESS, daemon.proc.pid)
    assert _thread_nices(daemon.process("assistant")["pid"]) == {own}
    refused = goondan("run", str(QUICKSTART), "--agent-nice", "20")
    assert refused.returncode == 2
    assert "--agent-nice: 20 is not between 0 and 19" in refused.stderr


def _soft_open_files(pid: int) -> int:
    with open(f"/proc/{pid}/limits") as f:
        line = next(line for line in f if line.startswith("Max open files"))
    return int(line.split()[3])


def test_daemon_and_agents_raise_their_open_files_limit_to_the_hard_one(start_daemon):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = 256 if hard == resource.RLIM_INFINITY else min(256, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))  # the daemon inherits it
    try:
        daemon = start_daemon(QUICKSTART)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert daemon.send("What is 4 plus 4?").returncode == 0
    expected = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    assert _soft_open_files(daemon.proc.pid) == expected
    assert _soft_open_files(daemon.process("assistant")["pid"]) == expected


def test_sigint_stops_everything_cleanly(start_daemon):
    daemon = start_daemon()
    daemon.send("What is 1 plus 2?")
    pids = [p["pid"] for p in daemon.status()["processes"]]
    assert daemon.stop(signal.SIGINT) == 0
    assert not any(pid_alive(pid) for pid in pids)


def test_second_daemon_on_the_same_state_root_refuses(start_daemon, state_root):
    start_daemon()
    proc = goondan("run", str(QUICKSTART), "--state-root", str(state_root), timeout=20)
    assert proc.returncode == 1
    assert "already running" in proc.stderr


def test_killed_orchestrator_takes_its_agents_with_it(start_daemon):
    daemon = start_daemon()
    daemon.send("What is 3 plus 3?")
    pids = [p["pid"] for p in daemon.status()["processes"]]
    daemon.proc.kill()
    daemon.proc.wait()
    wait_for(lambda: not any(pid_alive(pid) for pid in pids), timeout=1)  # within 1 s


def test_malformed_frames_do_not_hurt_the_daemon(start_daemon, state_root):
    daemon = start_daemon()
    ctx = zmq.Context()
    for endpoint in ("control.sock", "agents.sock"):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.IDENTITY, b"assistant" if endpoint == "agents.sock" else b"junk")
        if endpoint == "agents.sock":  # admitted (the operator's key), so its frames are read
            key = (state_root / "run" / "peer.key").read_bytes().strip()
            sock.setsockopt(zmq.METADATA, b"X-Goondan-Credential:" + key)
        sock.connect(f"ipc://{state_root}/run/{endpoint}")
        for junk in (b"", b"\xc1\xc1", b"\x93\x01\x02\x03", b"x" * 10_000):
            sock.send(junk)
        time.sleep(0.1)
        sock.close(0)
    ctx.term()
    proc = daemon.send("What is 6 plus 6?")
    assert proc.returncode == 0 and "12" in proc.stdout
    assert "dropped malformed frame" in daemon.logs()


def test_agent_that_cannot_start_gives_the_reason(start_daemon, tmp_path):
    code = "raise ImportError('no numpy here')\n"
    bundle = solo_bundle(tmp_path / "b", tool="broken", code=code)
    daemon = start_daemon(bundle)
    proc = daemon.send("hi")
    assert proc.returncode == 1
    assert "E_AGENT_START" in proc.stderr
    assert "Tool/broken" in proc.stderr and "no numpy here" in proc.stderr
    # fixing the file is enough: the next request starts the agent again
    (bundle / "broken.py").write_text("handlers = {'run': lambda ctx, args: 'ok'}\n")
    fixed = daemon.send("hi")
    assert fixed.returncode == 0 and fixed.stdout.strip() == "You said: hi"


def test_state_root_and_sockets_are_private(start_daemon, state_root):
    import stat

    daemon = start_daemon()
    daemon.send("What is 1 plus 1?")
    run_dir = state_root / "run"
    assert stat.S_IMODE(state_root.stat().st_mode) == 0o700
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    convo = state_root / "swarms/default/instances/cli/assistant+events.jsonl"
    assert stat.S_IMODE(convo.stat().st_mode) & 0o077 == 0
    for name in ("agents.sock", "control.sock", "journal.jsonl", "orchestrator.lock"):
        mode = stat.S_IMODE((run_dir / name).stat().st_mode)
        assert mode & 0o077 == 0, f"{name} is {oct(mode)}"


def test_requests_during_a_restart_wait_for_the_new_process(start_daemon):
    import subprocess
    import time as clock

    from tests.e2e.conftest import GOONDAN

    daemon = start_daemon()
    assert daemon.send("What is 1 plus 1?").returncode == 0
    old = daemon.process("researcher")["pid"]
    restart = subprocess.Popen(
        [*GOONDAN, "restart", "--agent", "researcher", "--state-root", str(daemon.state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    clock.sleep(0.05)  # the researcher is draining or gone now
    reply = daemon.send("a fact about the number 11", "--agent", "researcher", "--instance", "z")
    assert reply.returncode == 0 and reply.stdout.startswith("11 is a prime")
    out, err = restart.communicate(timeout=20)
    assert restart.returncode == 0, err
    assert out.strip() == "restarted researcher"
    assert daemon.process("researcher")["pid"] != old


def test_fsync_durability_has_the_turn_on_disk_when_it_answers(start_daemon, state_root):
    daemon = start_daemon(QUICKSTART, "--durability", "fsync")
    assert daemon.send("What is 1 plus 1?").returncode == 0
    stored = read_messages(state_root / "swarms/default/instances/cli/assistant")
    assert stored[0].content == "What is 1 plus 1?"  # at once, not when the instance is quiet
    assert stored[-1].role == "assistant" and "2" in (stored[-1].content or "")


@pytest.mark.slow  # waits out the agent's quiet period
def test_quiet_instances_are_synced_and_unloaded(start_daemon, state_root):
    daemon = start_daemon()
    assert daemon.send("What is 3 plus 3?").returncode == 0
    # Quiet for a few seconds, the instance is made durable and leaves the agent's memory,
    # closing its files; the next turn reloads it and the conversation goes on where it was.
    pid = daemon.process("assistant")["pid"]
    wait_for(
        lambda: not any("instances/cli" in path for path in open_files(pid).values()), timeout=15
    )
    assert daemon.send("What is 4 plus 4?").returncode == 0
    stored = state_root / "swarms/default/instances/cli/assistant"
    inputs = [m.content for m in read_messages(stored) if m.role == "user"]
    assert inputs == ["What is 3 plus 3?", "What is 4 plus 4?"]


def test_an_answer_too_large_to_send_comes_back_as_an_error(start_daemon, tmp_path):
    """Sent, it would make the orchestrator drop the agent's connection with it."""
    code = "handlers = {'run': lambda ctx, args: 'x' * (65 * 1024 * 1024)}\n"
    rules = [{"when": "big", "steps": [{"call": "big__run"}, {"reply": "{{result}}"}]}]
    daemon = start_daemon(solo_bundle(tmp_path / "b", rules=rules, tool="big", code=code))
    proc = daemon.send("big")
    assert proc.returncode == 1
    assert "MESSAGE_TOO_LARGE" in proc.stderr and "67,108,864-byte limit" in proc.stderr
    after = daemon.send("hi")  # the same process, still connected
    assert after.returncode == 0 and after.stdout.strip() == "You said: hi"
    assert daemon.process("solo")["restarts"] == 0


def test_a_control_command_with_bad_args_is_refused_and_the_daemon_serves_on(start_daemon):
    daemon = start_daemon()
    bad = msgspec.Raw(msgspec.msgpack.encode({"command": "restart", "args": {"fresh": "yes"}}))
    frame = wire.encode(wire.CONTROL, "cli", wire.ORCHESTRATOR, bad, correlation_id="1")
    with ControlClient(StatePaths.at(daemon.state_root)) as client:
        reply = wire.decode_payload(client.call(frame, 10), wire.ControlReply)
        assert not reply.ok and reply.error is not None
        assert reply.error.code == "E_BAD_REQUEST"
        assert "'restart'" in reply.error.message and "$.fresh" in reply.error.message
        assert client.command("status").result["pid"] == daemon.proc.pid
    assert "Traceback" not in daemon.logs()
