"""`goondan run --detach`, the daemon's log file and `goondan stop` waiting for the pid."""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import select
import signal
import subprocess
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import GOONDAN, QUICKSTART, goondan, solo_bundle, wait_for

PR_SET_CHILD_SUBREAPER = 36


class Detached:
    """`goondan run --detach` on the test's state root; calling it returns the daemon's pid."""

    def __init__(self, state_root: Path) -> None:
        self.state_root = state_root
        self.pids: list[int] = []

    def __call__(self, bundle: Path = QUICKSTART, *extra: str) -> int:
        proc = goondan("run", str(bundle), "--detach", "--state-root", str(self.state_root), *extra)
        assert proc.returncode == 0, proc.stderr
        pid = _started_pid(proc.stdout, self.state_root)
        self.pids.append(pid)
        return pid


@pytest.fixture
def detached(state_root: Path) -> Iterator[Detached]:
    """The test process is a child subreaper meanwhile, so a detached daemon becomes our
    child when its launcher's child exits (not init's): a test sees the exact moment it exits
    with `waitpid`, and no zombie is left behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    started = Detached(state_root)
    yield started
    libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    for pid in started.pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def _started_pid(stdout: str, state_root: Path) -> int:
    lines = stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("pid ") and lines[1].startswith("log "), stdout
    assert lines[1] == f"log {state_root / 'logs' / 'daemon.log'}"
    return int(lines[0].removeprefix("pid "))


def _cli(state_root: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return goondan(*args, "--state-root", str(state_root), timeout=timeout)


def _log_records(state_root: Path) -> list[dict[str, object]]:
    """Every record of daemon.log and its rotated files, oldest first."""
    records = []
    paths = (state_root / "logs").glob("daemon.log*")
    for path in sorted(paths, key=lambda p: -int(p.suffix[1:]) if p.suffix[1:].isdigit() else 0):
        records += [json.loads(line) for line in path.read_text().splitlines()]
    return records


def test_detach_returns_when_ready_and_stop_waits_for_the_pid(detached, state_root):
    pid = detached()
    info = json.loads((state_root / "run" / "orchestrator.json").read_text())
    assert info["pid"] == pid  # ready: the daemon's own file is there when --detach returns
    assert os.getsid(pid) != os.getsid(0)  # a session of its own

    sent = _cli(state_root, "send", "hi")
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.strip()
    events = [r["event"] for r in _log_records(state_root)]
    assert "orchestrator started" in events and "agent ready" in events

    stop = _cli(state_root, "stop")
    assert stop.returncode == 0, stop.stderr
    # It had exited when stop returned: waiting for it returns at once, and then it is gone.
    assert os.waitpid(pid, os.WNOHANG)[0] == pid
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "orchestrator stopped" in [r["event"] for r in _log_records(state_root)]


def test_detach_reports_the_bundle_errors(tmp_path, state_root):
    bundle = tmp_path / "broken"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text("kind: [\n")
    started = time.monotonic()
    proc = _cli(state_root, "run", str(bundle), "--detach")
    assert proc.returncode == 1
    assert f"{bundle / 'goondan.yaml'}:2" in proc.stderr
    assert "E_CONFIG_PARSE_ERROR" in proc.stderr and "nothing was started" in proc.stderr
    assert "Traceback" not in proc.stderr and "not ready" not in proc.stderr
    assert proc.stdout == ""
    assert time.monotonic() - started < 30  # said at once, not after a time limit


def test_detach_when_one_runs_already_says_so(detached, state_root):
    pid = detached()
    proc = _cli(state_root, "run", str(QUICKSTART), "--detach")
    assert proc.returncode == 1
    assert "already running" in proc.stderr and f"pid {pid}" in proc.stderr, proc.stderr
    assert proc.stdout == ""
    assert _cli(state_root, "stop").returncode == 0


def test_detach_with_input_is_a_usage_error(state_root):
    proc = _cli(state_root, "run", str(QUICKSTART), "--detach", "--input", "hi")
    assert proc.returncode == 2
    assert "not allowed with" in proc.stderr
    assert not (state_root / "run").exists()


def test_the_daemon_log_rotates(detached, state_root):
    limit = 400  # two or three lines a file
    detached(QUICKSTART, "--log-rotate-bytes", str(limit))
    for n in range(4):
        assert _cli(state_root, "send", f"hello {n}", "--instance", f"i{n}").returncode == 0
        assert _cli(state_root, "restart", "--agent", "assistant").returncode == 0
    assert _cli(state_root, "stop").returncode == 0
    logs = state_root / "logs"
    names = sorted(p.name for p in logs.glob("daemon.log*"))
    # five files are kept, the oldest dropped; a file is never past the limit
    assert names == ["daemon.log", *(f"daemon.log.{n}" for n in range(1, 5))], names
    for path in logs.glob("daemon.log*"):
        assert 0 < path.stat().st_size <= limit, path
    records = _log_records(state_root)  # every line of every file is a JSON record
    assert records[-1]["event"] == "orchestrator stopped"
    assert not any(r["event"] == "log lines dropped" for r in records)


CRASH_WITH_TRACEBACK = """\
import os, sys, traceback
try:
    raise RuntimeError("boom-in-a-detached-agent")
except RuntimeError:
    traceback.print_exc()
sys.stderr.flush()
os._exit(7)
"""


def test_an_agents_crash_traceback_reaches_the_log(detached, state_root, tmp_path):
    bundle = solo_bundle(tmp_path / "b", tool="crash", code=CRASH_WITH_TRACEBACK)
    detached(bundle)
    proc = _cli(state_root, "send", "hi", "--timeout", "20")
    assert proc.returncode == 1 and "E_AGENT_CRASHED" in proc.stderr, proc.stderr

    def printed() -> str:
        # One record per traceback, unless a loaded machine cut it: joined, nothing is lost.
        records = _log_records(state_root)
        return "\n".join(str(r["text"]) for r in records if r["event"] == "process output")

    wait_for(lambda: "RuntimeError: boom-in-a-detached-agent" in printed(), timeout=10)
    text = printed()
    assert "Traceback (most recent call last):\n  File " in text
    assert text.index("Traceback") < text.index("RuntimeError: boom-in-a-detached-agent")
    crashed = [r for r in _log_records(state_root) if r["event"] == "agent process crashed"]
    assert crashed and crashed[0]["code"] == 7
    assert _cli(state_root, "stop").returncode == 0


def test_the_detached_daemon_outlives_its_terminal(detached, state_root):
    # A shell on a terminal of its own (a pty it controls) starts the daemon, then the
    # terminal's session gets what closing a terminal window and Ctrl-C send.
    master, slave = os.openpty()

    def take_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    shell = subprocess.Popen(
        [
            "bash",
            "-c",
            f"{' '.join(GOONDAN)} run {QUICKSTART} --detach --state-root {state_root}; "
            "echo launched; sleep 60",
        ],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        preexec_fn=take_terminal,
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + 60
    while b"launched" not in output:
        assert time.monotonic() < deadline, output
        if select.select([master], [], [], 1)[0]:
            output += os.read(master, 4096)
    pid = int(output.split(b"pid ")[1].split()[0])
    detached.pids.append(pid)
    stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    assert stat[4] == "0"  # tty_nr: no controlling terminal
    assert int(stat[3]) != shell.pid  # not in the terminal's session

    os.killpg(shell.pid, signal.SIGINT)
    os.killpg(shell.pid, signal.SIGHUP)
    os.close(master)  # the terminal goes away: its session leader gets SIGHUP
    assert shell.wait(10) != 0
    time.sleep(0.5)

    assert os.waitpid(pid, os.WNOHANG) == (0, 0)  # still running
    sent = _cli(state_root, "send", "still there?")
    assert sent.returncode == 0, sent.stderr
    assert _cli(state_root, "stop").returncode == 0
    assert os.waitpid(pid, os.WNOHANG)[0] == pid


def test_detach_with_an_unusable_state_root_says_why(tmp_path):
    long_root = tmp_path / ("x" * 110)  # its socket paths pass the 107-byte limit
    proc = goondan("run", str(QUICKSTART), "--detach", "--state-root", str(long_root))
    assert proc.returncode == 1
    assert "longer than 107 bytes" in proc.stderr and "--state-root" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_stop_waits_for_a_daemon_that_exits_slowly(detached, state_root):
    # The log "disk" hangs (a FIFO nobody reads): the daemon serves and stops as usual, but
    # after it has released its lock it gives its log writer 2 s before it exits.
    (state_root / "logs").mkdir(mode=0o700)
    os.mkfifo(state_root / "logs" / "daemon.log")
    pid = detached()
    assert _cli(state_root, "send", "hi").returncode == 0
    started = time.monotonic()
    stop = _cli(state_root, "stop")
    assert stop.returncode == 0, stop.stderr
    assert time.monotonic() - started > 1.5
    assert os.waitpid(pid, os.WNOHANG)[0] == pid  # it had exited when stop returned


def test_stop_says_so_when_the_daemon_outlives_its_timeout(detached, state_root):
    (state_root / "logs").mkdir(mode=0o700)
    os.mkfifo(state_root / "logs" / "daemon.log")  # as above: it exits 2 s after its lock
    pid = detached()
    stop = _cli(state_root, "stop", "--timeout", "0.5")
    assert stop.returncode == 1
    assert f"the orchestrator (pid {pid}) did not exit within 0.5s" in stop.stderr
    wait_for(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, timeout=10)  # it does, later
