"""Reloading a running swarm: SIGHUP, `goondan restart`, `--watch`, and systemd's view."""

import os
import shutil
import signal
import socket

import pytest

from goondan.paths import conversation_stored
from tests.e2e.conftest import QUICKSTART, wait_for


@pytest.fixture
def bundle(tmp_path):
    target = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, target)
    return target


def edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def pids(daemon):
    return {p["name"]: p["pid"] for p in daemon.status()["processes"]}


def test_sighup_restarts_only_the_changed_agent(start_daemon, bundle):
    daemon = start_daemon(bundle)
    assert daemon.send("What is 1 plus 2?").returncode == 0
    before = pids(daemon)
    edit(bundle / "goondan.yaml", "I only know facts about numbers.", "Numbers only, please.")
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: '"bundle reloaded"' in daemon.logs() or "bundle reloaded" in daemon.logs())
    assert '"restarted": ["researcher"]' in daemon.logs()
    after = wait_for(
        lambda: (p := pids(daemon))["researcher"] not in (None, before["researcher"]) and p
    )
    assert after  # wait_for returns the first truthy value
    assert after["assistant"] == before["assistant"]
    reply = daemon.send("hello", "--agent", "researcher", "--instance", "new")
    assert reply.stdout.strip() == "Numbers only, please."


def test_a_broken_bundle_is_refused_and_the_swarm_keeps_running(start_daemon, bundle):
    daemon = start_daemon(bundle)
    daemon.send("What is 1 plus 2?")
    before = pids(daemon)
    edit(bundle / "goondan.yaml", 'modelRef: "Model/researcher-script"', 'modelRef: "Model/nope"')
    proc = daemon.cli("restart")
    assert proc.returncode == 1
    assert "restart refused" in proc.stderr and "E_CONFIG_REF_NOT_FOUND" in proc.stderr
    assert pids(daemon) == before
    assert daemon.send("What is 2 plus 2?").returncode == 0


def test_a_reload_that_asks_for_ray_in_a_local_run_is_refused(start_daemon, bundle):
    """As at start: an agent with `placement: ray` cannot run in a local run, so the reload
    that gives it one is refused, not run on this machine against what the bundle says."""
    daemon = start_daemon(bundle)
    assert daemon.send("What is 1 plus 2?").returncode == 0
    before = pids(daemon)
    edit(
        bundle / "goondan.yaml",
        'modelRef: "Model/researcher-script"',
        'modelRef: "Model/researcher-script"\n  placement: ray',
    )
    proc = daemon.cli("restart")
    assert proc.returncode == 1
    assert "restart refused" in proc.stderr
    assert "agent 'researcher' has `placement: ray`: run with --placement ray" in proc.stderr
    assert pids(daemon) == before
    assert daemon.send("What is 2 plus 2?").returncode == 0


def test_restart_without_changes_restarts_nothing(start_daemon, bundle):
    daemon = start_daemon(bundle)
    daemon.send("What is 1 plus 2?")
    before = pids(daemon)
    proc = daemon.cli("restart")
    assert proc.returncode == 0 and proc.stdout.strip() == "reloaded; restarted: none"
    assert pids(daemon) == before


def test_restart_one_agent_fresh(start_daemon, bundle, state_root):
    daemon = start_daemon(bundle)
    daemon.send("What is 1 plus 2?")
    convo = state_root / "swarms/default/instances/cli/researcher"
    assert conversation_stored(convo)
    before = pids(daemon)
    proc = daemon.cli("restart", "--agent", "researcher", "--fresh")
    assert proc.returncode == 0, proc.stderr
    assert not conversation_stored(convo) and not convo.exists()
    after = pids(daemon)
    assert after["researcher"] != before["researcher"] and after["assistant"] == before["assistant"]
    assert daemon.process("researcher")["status"] in ("idle", "spawning")
    unknown = daemon.cli("restart", "--agent", "ghost")
    assert unknown.returncode == 1 and "no agent 'ghost'" in unknown.stderr


def test_watch_reloads_on_file_change(start_daemon, bundle):
    daemon = start_daemon(bundle, "--watch")
    daemon.send("What is 1 plus 2?")
    before = pids(daemon)
    edit(bundle / "tools" / "numbers.py", '"a prime"', '"prime"')
    wait_for(lambda: '"restarted": ["researcher"]' in daemon.logs(), timeout=10)
    reply = daemon.send("What is 3 plus 4?")
    assert "7 is prime" in reply.stdout
    assert pids(daemon)["assistant"] == before["assistant"]


def test_systemd_notifications(start_daemon, bundle, state_root):
    path = str(state_root / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    try:
        daemon = start_daemon(bundle, env={"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"})

        def messages_until(field):
            seen = []
            while True:
                data = sock.recv(4096).decode()
                seen.append(data)
                if field in data.split("\n"):
                    return seen

        ready = messages_until("READY=1")
        assert f"MAINPID={daemon.proc.pid}" in ready[-1]
        assert any("WATCHDOG=1" in m for m in messages_until("WATCHDOG=1"))
        daemon.proc.send_signal(signal.SIGHUP)
        reload = messages_until("READY=1")
        assert any(m.startswith("RELOADING=1\nMONOTONIC_USEC=") for m in reload)
        daemon.proc.send_signal(signal.SIGTERM)
        assert any("STOPPING=1" in m for m in messages_until("STOPPING=1"))
        assert daemon.proc.wait(10) == 0
    finally:
        sock.close()


def test_self_restart_tool_restarts_the_swarm(start_daemon, tmp_path):
    from tests.e2e.conftest import solo_bundle

    restart = {
        "when": "restart",
        "steps": [
            {"call": "self-restart__request", "args": {"reason": "new config"}},
            {"reply": "restarting: {{result.restartRequested}}"},
        ],
    }
    bundle = solo_bundle(tmp_path / "b", rules=[restart], base_tools=("self-restart",))
    daemon = start_daemon(bundle)
    assert daemon.send("hello").returncode == 0
    old = daemon.process("solo")["pid"]
    reply = daemon.send("please restart")
    assert reply.stdout.strip() == "restarting: true"
    wait_for(lambda: daemon.process("solo")["pid"] not in (None, old))
    logs = daemon.logs()
    assert "swarm restart requested by an agent" in logs and '"reason": "new config"' in logs
    assert '"restarted": ["solo"]' in logs
    assert daemon.send("hello").stdout.strip() == "You said: hello"


def test_sighup_with_a_broken_bundle_keeps_the_swarm(start_daemon, bundle):
    daemon = start_daemon(bundle)
    daemon.send("What is 1 plus 2?")
    before = pids(daemon)
    (bundle / "goondan.yaml").write_text("apiVersion: goondan.ai/v1\nkind: Agent\n  bad: [\n")
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload refused: the bundle does not validate" in daemon.logs())
    assert "E_CONFIG_PARSE_ERROR" in daemon.logs()
    assert pids(daemon) == before
    assert daemon.send("What is 2 plus 2?").stdout.startswith("2 plus 2 is 4")


def test_a_fifo_in_the_bundle_neither_blocks_the_daemon_nor_is_reloaded(start_daemon, bundle):
    daemon = start_daemon(bundle)
    assert daemon.send("What is 1 plus 2?").returncode == 0
    os.mkfifo(bundle / "tools.yaml")  # reading it would wait for a writer, forever
    daemon.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "reload refused" in daemon.logs())
    assert "E_CONFIG_NOT_A_REGULAR_FILE" in daemon.logs()
    assert daemon.status()["pid"] == daemon.proc.pid  # the loop still answers
    assert daemon.send("What is 2 plus 2?").returncode == 0
    proc = daemon.cli("restart")
    assert proc.returncode == 1 and "FIFO" in proc.stderr
