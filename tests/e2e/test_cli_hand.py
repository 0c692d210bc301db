"""The CLI in a person's hands: large inputs from stdin or a file, pipes closed early, Ctrl-C
(from a signal and typed in tmux), reading a conversation, and questions before deleting."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentproc.conversation import read_messages
from agentproc.runtime_events import RuntimeEvent, RuntimeEventLog
from goondan.paths import StatePaths
from ipc.zmtp import MAX_MESSAGE_BYTES
from tests.e2e.conftest import GOONDAN, QUICKSTART, REPO, goondan, solo_bundle, wait_for

SLOW = """\
import asyncio

async def run(ctx, args):
    await asyncio.sleep(60)  # the event loop stays free: heartbeats go on
    return {}

handlers = {"run": run}
"""


def slow_bundle(directory: Path) -> Path:
    rules = [{"when": "slow", "steps": [{"call": "slow__run"}, {"reply": "done"}]}]
    return solo_bundle(directory, rules=rules, tool="slow", code=SLOW, grace_s=1)


def wait_tool_called(state_root: Path) -> None:
    events = state_root / "swarms/default/agents/solo/runtime-events.jsonl"
    wait_for(lambda: events.exists() and "tool.called" in events.read_text(), timeout=20)


def wait_turn_cancelled(state_root: Path) -> None:
    """The agent's turn stopped: Ctrl-C on `send` cancels it, not only the client."""
    events = state_root / "swarms/default/agents/solo/runtime-events.jsonl"
    wait_for(lambda: "E_TURN_CANCELLED" in events.read_text(), timeout=20)


def no_traceback(text: str) -> None:
    assert "Traceback" not in text and "Exception ignored" not in text, text


# -- send: stdin and --input-file ------------------------------------------------------------


def test_a_one_mib_input_goes_through_stdin_and_an_input_file(start_daemon, tmp_path, state_root):
    start_daemon(solo_bundle(tmp_path / "b"))  # the scripted model answers "You said: <input>"
    line = "ünïcode line, with a tab\tand quotes \"'\n"
    text = line * (1024 * 1024 // len(line.encode()))
    assert len(text.encode()) > 1000 * 1024
    via_stdin = goondan("send", "-", "--state-root", str(state_root), input=text)
    assert via_stdin.returncode == 0, via_stdin.stderr
    assert via_stdin.stdout == f"You said: {text}\n"

    source = tmp_path / "input.txt"
    source.write_text(text, encoding="utf-8")
    args = ("send", "--input-file", str(source), "--instance", "file")
    via_file = goondan(*args, "--state-root", str(state_root))
    assert via_file.returncode == 0, via_file.stderr
    assert via_file.stdout == f"You said: {text}\n"
    stored = read_messages(state_root / "swarms/default/instances/file/solo")
    assert [m.content for m in stored if m.role == "user"] == [text]


def test_send_takes_exactly_one_input(state_root, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("hi")
    for args in [(), ("text", "--input-file", str(source)), ("-", "--input-file", str(source))]:
        proc = goondan("send", *args, "--state-root", str(state_root))
        assert proc.returncode == 2, (args, proc.stderr)
        assert "one input" in proc.stderr
    missing = goondan(
        "send", "--input-file", str(tmp_path / "nope"), "--state-root", str(state_root)
    )
    assert missing.returncode == 2 and str(tmp_path / "nope") in missing.stderr
    source.write_bytes(b"caf\xe9")
    latin = goondan("send", "--input-file", str(source), "--state-root", str(state_root))
    assert latin.returncode == 2 and "not UTF-8" in latin.stderr
    no_traceback(missing.stderr + latin.stderr)


def test_an_input_file_over_the_limit_fails_clearly(start_daemon, tmp_path, state_root):
    daemon = start_daemon(solo_bundle(tmp_path / "b"))
    big = tmp_path / "big.txt"
    try:
        # over the limit by itself: refused from its size, before it is read
        with open(big, "wb") as f:
            f.truncate(MAX_MESSAGE_BYTES + 1)
        proc = goondan("send", "--input-file", str(big), "--state-root", str(state_root))
        assert proc.returncode == 1 and proc.stdout == ""
        [line] = proc.stderr.splitlines()
        assert line.startswith("goondan: MESSAGE_TOO_LARGE: the request is not sent: ")
        assert f"{big} holds {MAX_MESSAGE_BYTES + 1:,} bytes" in line
        assert f"{MAX_MESSAGE_BYTES:,}-byte limit" in line

        # within the limit, but not once wrapped in its message
        with open(big, "wb") as f:
            f.write(b"y" * MAX_MESSAGE_BYTES)
        proc = goondan("send", "--input-file", str(big), "--state-root", str(state_root))
        assert proc.returncode == 1 and proc.stdout == ""
        [line] = proc.stderr.splitlines()
        assert line.startswith("goondan: MESSAGE_TOO_LARGE: the request is not sent: ")
        assert f"{MAX_MESSAGE_BYTES:,}-byte limit" in line
    finally:
        big.unlink()
    assert daemon.send("hello").stdout == "You said: hello\n"


# -- pipes closed early ------------------------------------------------------------------------


def many_events(state_root: Path, count: int) -> None:
    log = RuntimeEventLog(StatePaths.at(state_root).agent_dir("default", "a"))
    for i in range(count):
        stamp = f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}Z"
        log.emit(RuntimeEvent("turn.started", stamp, "a", "k", "t" * 32, "s" * 16))
    log.close()


def test_logs_into_a_pipe_closed_after_one_line(state_root):
    many_events(state_root, 20_000)
    proc = subprocess.Popen(
        [*GOONDAN, "logs", "-n", "0", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()  # as `goondan logs | head -1` does
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(30) == 0, stderr
    assert json.loads(first)["type"] == "turn.started"
    assert stderr == ""


@pytest.mark.parametrize(
    "args",
    [("logs",), ("instance", "list"), ("instance", "show", "cli"), ("logs", "--help")],
)
def test_output_into_a_pipe_already_closed(state_root, args):
    """A short output stays in the buffer until the exit: the pipe is found closed there."""
    many_events(state_root, 3)
    conversation = StatePaths.at(state_root).conversation_dir("default", "cli", "a")
    conversation.mkdir(parents=True)
    line = '{"op":"append","message":{"id":"1","role":"user","content":"hi"}}\n'
    (conversation / "events.jsonl").write_text(line)
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [*GOONDAN, *args, "--state-root", str(state_root)],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=30,
        )
    finally:
        os.close(write)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


# -- Ctrl-C ------------------------------------------------------------------------------------


@pytest.mark.parametrize("presses", [1, 2])
def test_sigint_to_a_waiting_send_exits_130(start_daemon, tmp_path, state_root, presses):
    daemon = start_daemon(slow_bundle(tmp_path / "b"))
    proc = subprocess.Popen(
        [*GOONDAN, "send", "slow", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_tool_called(state_root)
    for _ in range(presses):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.02)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    assert out == ""
    no_traceback(err)
    if presses == 1:
        wait_turn_cancelled(state_root)
    assert daemon.proc.poll() is None  # the daemon serves on (other instances meanwhile)
    assert daemon.send("hi", "--instance", "other", timeout=30).returncode == 0


def test_sigint_to_send_reading_stdin_exits_130(state_root):
    proc = subprocess.Popen(
        [*GOONDAN, "send", "-", "--state-root", str(state_root)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None
    proc.stdin.write("some input, and more to come")
    proc.stdin.flush()
    time.sleep(1)  # it is in its read of stdin
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130
    no_traceback(err)


@pytest.fixture
def tmux(tmp_path: Path):
    """A tmux server of our own (its socket in a temporary directory), killed at the end."""
    if shutil.which("tmux") is None:
        raise AssertionError("tmux is not installed")
    socket_dir = Path(tempfile.mkdtemp(prefix="tmux-"))
    env = {**os.environ, "TMUX_TMPDIR": str(socket_dir)}
    env.pop("TMUX", None)

    def run(*args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", "goondan-test", "-f", "/dev/null", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
        )
        assert done.returncode == 0, (args, done.stderr)
        return done.stdout

    yield run
    subprocess.run(["tmux", "-L", "goondan-test", "kill-server"], env=env, capture_output=True)
    shutil.rmtree(socket_dir, ignore_errors=True)


def test_ctrl_c_typed_into_an_interactive_send(
    start_daemon, tmp_path, state_root, tmux: Callable[..., str]
) -> None:
    start_daemon(slow_bundle(tmp_path / "b"))
    command = [*GOONDAN, "send", "slow", "--state-root", str(state_root)]
    # `goondan send` runs in the pane's foreground process group, so the typed Ctrl-C reaches
    # it as a terminal's does. Its exit code is written by a parent that ignores SIGINT once
    # the child runs: tmux's own record of a pane's exit status sometimes never came.
    code_file = tmp_path / "exit-code"
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(
        "import signal, subprocess, sys\n"
        "child = subprocess.Popen(sys.argv[2:])\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "open(sys.argv[1], 'w').write(str(child.wait()))\n"
    )
    pane = [sys.executable, str(wrapper), str(code_file), *command]
    tmux("new-session", "-d", "-s", "t", "-x", "120", "-y", "30", "-c", str(REPO), *pane)
    tmux("set-option", "-t", "t", "remain-on-exit", "on")
    wait_tool_called(state_root)
    tmux("send-keys", "-t", "t", "C-c")
    try:
        wait_for(code_file.exists, timeout=30)
    except AssertionError:
        raise AssertionError(tmux("capture-pane", "-p", "-t", "t", "-S", "-100")) from None
    wait_for(lambda: code_file.read_text() != "", timeout=5)
    screen = tmux("capture-pane", "-p", "-t", "t", "-S", "-100")
    assert code_file.read_text() == "130", screen
    no_traceback(screen)
    wait_turn_cancelled(state_root)


# -- instance show -----------------------------------------------------------------------------


def test_instance_show_prints_tool_calls_and_results(state_root):
    run = goondan(
        "run", str(QUICKSTART), "--state-root", str(state_root), "--input", "What is 2 plus 3?"
    )
    assert run.returncode == 0, run.stderr
    show = goondan("instance", "show", "cli", "--state-root", str(state_root))
    assert show.returncode == 0, show.stderr
    text = show.stdout
    # both agents of the instance, each under its own heading
    assert "=== default/cli · agent assistant · 6 messages ===" in text
    assert "=== default/cli · agent researcher · 4 messages ===" in text
    assert "user (cli:run):\n  What is 2 plus 3?\n" in text
    assert 'assistant:\n  -> calc__add {"a": 2, "b": 3}\n' in text
    assert 'tool calc__add: ok\n  {"sum": 5}\n' in text
    assert "user (agent:assistant):\n  Tell me a fun fact about the number 5.\n" in text
    assert text.rstrip().endswith("digits add up to 5.")

    only = goondan(
        "instance", "show", "cli", "--agent", "researcher", "--state-root", str(state_root)
    )
    assert "agent researcher" in only.stdout and "agent assistant" not in only.stdout
    as_json = goondan("instance", "show", "cli", "--json", "--state-root", str(state_root))
    rows = json.loads(as_json.stdout)
    assert [(r["swarm"], r["instanceKey"], r["agent"]) for r in rows] == [
        ("default", "cli", "assistant"),
        ("default", "cli", "researcher"),
    ]
    call = rows[0]["messages"][1]["tool_calls"][0]
    assert call["name"] == "calc__add" and json.loads(call["arguments"]) == {"a": 2, "b": 3}

    missing = goondan("instance", "show", "nope", "--state-root", str(state_root))
    assert missing.returncode == 1 and missing.stdout == ""
    assert f"no stored instance 'nope' in {state_root}" in missing.stderr
    no_agent = goondan("instance", "show", "cli", "--agent", "x", "--state-root", str(state_root))
    assert no_agent.returncode == 1 and "its agents: assistant, researcher" in no_agent.stderr


def test_instance_show_cuts_long_contents_unless_full(tmp_path, state_root):
    text = "".join(f"line {i}: " + "word " * 20 + "\n" for i in range(40))
    bundle = solo_bundle(tmp_path / "b")
    run = goondan("run", str(bundle), "--state-root", str(state_root), "--input", text)
    assert run.returncode == 0, run.stderr
    show = goondan("instance", "show", "cli", "--state-root", str(state_root)).stdout
    assert "  line 0: word" in show and "line 39" not in show
    assert len(text.split("\n")[0]) * 12 > 1200  # cut at 1200 characters, before 12 lines
    assert f"… ({len(text) - 1200:,} more chars)" in show  # the input
    assert f"… ({len(text) + len('You said: ') - 1200:,} more chars)" in show  # its echo
    full = goondan("instance", "show", "cli", "--full", "--state-root", str(state_root)).stdout
    assert "more chars" not in full
    assert "  line 39: " in full and full.count("line 39: ") == 2  # the input and its echo


# -- questions before deleting ----------------------------------------------------------------


def on_terminal(args: list[str], answer: str | None, timeout: float = 60) -> tuple[int, str]:
    """Run `args` with stdin, stdout and stderr on a pseudo-terminal; type `answer` when it
    asks. Returns the exit code and everything the terminal showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        args,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        # the terminal is its controlling one: a typed Ctrl-C is a SIGINT, as in a shell
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )
    os.close(slave)
    shown = b""
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: every process on the terminal has exited
                    break
                if not chunk:
                    break
                shown += chunk
                if answer is not None and b"[y/N]" in shown:
                    os.write(master, answer.encode() + b"\n")
                    answer = None
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, shown.decode(errors="replace")


def test_instance_delete_asks_on_a_terminal(tmp_path, state_root):
    bundle = solo_bundle(tmp_path / "b")
    assert (
        goondan("run", str(bundle), "--state-root", str(state_root), "--input", "hi").returncode
        == 0
    )
    stored = state_root / "swarms/default/instances/cli"
    delete = [*GOONDAN, "instance", "delete", "cli", "--state-root", str(state_root)]

    code, shown = on_terminal(delete, "n")
    assert code == 1, shown
    assert "Delete the conversations of instance 'cli' in swarm default? [y/N]" in shown
    assert "nothing deleted" in shown and stored.exists()

    code, shown = on_terminal(delete, "y")
    assert code == 0, shown
    assert "deleted default/cli" in shown and not stored.exists()

    assert (
        goondan("run", str(bundle), "--state-root", str(state_root), "--input", "hi").returncode
        == 0
    )
    code, shown = on_terminal([*delete, "--yes"], None)
    assert code == 0 and "[y/N]" not in shown, shown
    assert not stored.exists()


def test_restart_fresh_asks_on_a_terminal(start_daemon, tmp_path, state_root):
    daemon = start_daemon(solo_bundle(tmp_path / "b"))
    assert daemon.send("hi").returncode == 0
    stored = state_root / "swarms/default/instances/cli/solo"
    restart = [*GOONDAN, "restart", "--agent", "solo", "--fresh", "--state-root", str(state_root)]

    code, shown = on_terminal(restart, "n")
    assert code == 1, shown
    assert "Delete every conversation of agent 'solo' and restart it? [y/N]" in shown
    assert read_messages(stored) and daemon.process("solo")["restarts"] == 0

    code, shown = on_terminal(restart, "y")
    assert code == 0 and "restarted solo (conversations deleted)" in shown, shown
    assert not read_messages(stored)

    assert daemon.send("again").returncode == 0
    code, shown = on_terminal([*restart, "-y"], None)
    assert code == 0 and "[y/N]" not in shown, shown
    assert not read_messages(stored)
    # off a terminal it does not ask, as scripts expect
    assert daemon.send("once more").returncode == 0
    piped = daemon.cli("restart", "--agent", "solo", "--fresh")
    assert piped.returncode == 0 and not read_messages(stored)


def test_ctrl_c_at_the_question_exits_130(tmp_path, state_root):
    bundle = solo_bundle(tmp_path / "b")
    assert (
        goondan("run", str(bundle), "--state-root", str(state_root), "--input", "hi").returncode
        == 0
    )
    code, shown = on_terminal(
        [*GOONDAN, "instance", "delete", "cli", "--state-root", str(state_root)], "\x03"
    )
    assert code == 130, shown
    no_traceback(shown)
    assert (state_root / "swarms/default/instances/cli").exists()
