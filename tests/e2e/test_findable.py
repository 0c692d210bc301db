"""Finding a request again: trace ids from `send`, `logs --trace PREFIX`, readable tool lines,
why a process stopped in `status`, and the daemon's own log (`logs --daemon`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from typing import Any

from tests.e2e.conftest import GOONDAN, REPO, Daemon, solo_bundle, wait_for
from tests.e2e.test_connectors import free_port

TOOL = """\
def run(ctx, args):
    ctx.update("halfway through\\nthe files", progress=0.5)
    return {"done": args.get("what")}

handlers = {"run": run}
"""

RULES: list[dict[str, Any]] = [
    {
        "when": "work",
        "steps": [
            {"call": "job__run", "args": {"what": "the\nlong   report", "pad": "x" * 200}},
            {"reply": "done: {{result.done}}"},
        ],
    },
    {"when": "hello", "steps": [{"reply": "hi there"}]},
]


def logs(daemon: Daemon, *args: str, tty: bool = False) -> subprocess.CompletedProcess[str]:
    if not tty:
        return daemon.cli("logs", *args)
    return on_terminal(daemon, "logs", *args)


def on_terminal(daemon: Daemon, *args: str) -> subprocess.CompletedProcess[str]:
    """Run a command with stdout on a pseudo-terminal: its readable output."""
    import pty

    command = [*GOONDAN, *args, "--state-root", str(daemon.state_root)]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(command, stdout=follower, stderr=subprocess.PIPE, text=True)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    _, stderr = proc.communicate(timeout=30)
    out = b"".join(chunks).decode().replace("\r\n", "\n")
    return subprocess.CompletedProcess(command, proc.returncode, out, stderr)


def test_send_json_and_verbose_give_the_trace_that_logs_finds_by_prefix(start_daemon, tmp_path):
    bundle = solo_bundle(tmp_path / "b", rules=RULES, tool="job", code=TOOL)
    daemon = start_daemon(bundle)

    proc = daemon.send("work please", "--json", "--instance", "desk")
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    trace = answer.pop("traceId")
    assert re.fullmatch(r"[0-9a-f]{32}", trace)
    assert answer == {"reply": "done: the\nlong   report", "agent": "solo", "instanceKey": "desk"}

    proc = daemon.send("hello", "-v")
    assert proc.returncode == 0 and proc.stdout.strip() == "hi there"
    found_trace = re.search(r"trace ([0-9a-f]{32})", proc.stderr)
    assert found_trace is not None, proc.stderr
    verbose_trace = found_trace.group(1)
    assert verbose_trace != trace

    # Any unique prefix of six or more finds the one trace; JSON lines on a pipe.
    def completed() -> list[dict[str, Any]] | None:  # the agent writes its events in batches
        found = logs(daemon, "--trace", trace[:6].upper())
        assert found.returncode == 0, found.stderr
        events = [json.loads(line) for line in found.stdout.splitlines()]
        return events if "turn.completed" in {e["type"] for e in events} else None

    events = wait_for(completed, 20)
    assert events is not None
    assert {e["traceId"] for e in events} == {trace}

    short = logs(daemon, "--trace", trace[:5])
    assert short.returncode == 2 and "at least 6" in short.stderr
    unknown = logs(daemon, "--trace", "zzzzzz")
    assert unknown.returncode == 1 and "no runtime events of trace zzzzzz" in unknown.stderr

    # Readable lines show the tool's arguments on one line, and its progress.
    readable = logs(daemon, "--trace", trace[:8], tty=True)
    assert readable.returncode == 0, readable.stderr
    called = next(line for line in readable.stdout.splitlines() if "tool.called" in line)
    assert '{"what": "the\\nlong report", "pad": "xxx' in called and called.endswith(
        f"trace={trace[:8]}"
    )
    assert len(called) < 200  # cut to a line
    progress = next(line for line in readable.stdout.splitlines() if "tool.progress" in line)
    assert "job__run 50% halfway through the files" in progress


def test_an_ambiguous_trace_prefix_lists_the_candidates(start_daemon, tmp_path):
    bundle = solo_bundle(tmp_path / "b", rules=RULES)
    daemon = start_daemon(bundle)
    traces = []
    for _ in range(2):
        proc = daemon.send("hello", "--json")
        traces.append(json.loads(proc.stdout)["traceId"])

    # The events file is the agent's own: rewrite one trace id so the two share a prefix,
    # as two real traces would one time in 16 million.
    def written():
        files = daemon.state_root.glob("swarms/*/agents/solo/runtime-events.jsonl")
        return next((f for f in files if traces[1] in f.read_text()), None)

    events_file = wait_for(written, 20)
    twin = traces[0][:6] + traces[1][6:]
    events_file.write_text(events_file.read_text().replace(traces[1], twin))
    proc = logs(daemon, "--trace", traces[0][:6])
    assert proc.returncode == 2
    assert "matches 2 traces" in proc.stderr
    assert traces[0] in proc.stderr and twin in proc.stderr
    proc = logs(daemon, "--trace", traces[0][:7] if traces[0][6] != twin[6] else traces[0])
    assert proc.returncode == 0 and traces[0] in proc.stdout


def test_status_says_why_a_process_stopped_and_that_a_connector_never_started(
    start_daemon, tmp_path
):
    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    main = bundle / "goondan.yaml"
    port = free_port()
    main.write_text(
        main.read_text().replace(
            'PORT: {value: "8080"}',
            f'PORT: {{value: "{port}"}}\n    REQUIRE_SIGNATURE: {{value: "true"}}',
        )
    )
    daemon = start_daemon(bundle, env={"WEBHOOK_SECRET": ""})  # no secret: cannot start

    def connector() -> dict[str, Any] | None:
        row = daemon.process("http-in")
        return row if row.get("lastExit") else None

    row = wait_for(connector, 20)
    assert row is not None
    assert row["status"] == "notStarted" and row["pid"] is None
    assert "REQUIRE_SIGNATURE" in row["lastExit"]["error"]
    assert row["lastExit"]["at"] > 0

    # An agent that never ran is `notStarted` with no last exit; SIGKILLed, it says so.
    agent = daemon.process("responder")
    assert agent["status"] == "notStarted" and "lastExit" not in agent
    proc = daemon.send("What is 1 plus 1?")
    assert proc.returncode == 0, proc.stderr
    pid = daemon.process("responder")["pid"]
    os.kill(pid, signal.SIGKILL)
    row = wait_for(lambda: daemon.process("responder").get("lastExit"), 20)
    assert row["signal"] == "SIGKILL" and "code" not in row

    table = on_terminal(daemon, "status")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("http-in")))
    assert "notStarted" in lines[at]
    assert lines[at + 1].strip().startswith("could not start: exit code 3 at ")
    assert "REQUIRE_SIGNATURE" in lines[at + 1]
    responder = lines.index(next(line for line in lines if line.startswith("responder")))
    assert lines[responder + 1].strip().startswith("last stop: killed by SIGKILL at ")


def test_the_daemon_log_is_written_in_the_foreground_and_shown_by_logs_daemon(
    start_daemon, tmp_path
):
    bundle = solo_bundle(tmp_path / "b", rules=RULES)
    daemon = start_daemon(bundle)
    assert daemon.send("hello").returncode == 0
    log_file = daemon.state_root / "logs" / "daemon.log"
    wait_for(lambda: log_file.exists() and "orchestrator started" in log_file.read_text(), 15)
    proc = daemon.cli("logs", "--daemon", "-n", "0")
    assert proc.returncode == 0, proc.stderr
    messages = [json.loads(line)["event"] for line in proc.stdout.splitlines()]
    assert "orchestrator started" in messages
    last = daemon.cli("logs", "--daemon", "-n", "1")
    assert len(last.stdout.splitlines()) == 1

    # -f follows: what the daemon logs later comes out.
    follow = subprocess.Popen(
        [*GOONDAN, "logs", "--daemon", "-f", "-n", "1", "--state-root", str(daemon.state_root)],
        stdout=subprocess.PIPE,
        text=True,
    )
    out = follow.stdout
    assert out is not None
    try:
        assert out.readline()  # the last line so far: it follows from here on
        daemon.cli("restart", "--agent", "solo")
        line = ""
        while "agent process exited" not in line:  # logged by the restart, not before
            line = out.readline()
            assert line, "logs -f ended"
    finally:
        follow.send_signal(signal.SIGINT)
        follow.wait(10)
        out.close()
    assert follow.returncode == 0


DIES = """\
import os

def run(ctx, args):
    ctx.logger.error("cannot write the report", error="OSError: [Errno 28] No space left")
    os._exit(3)

handlers = {"run": run}
"""


def test_status_shows_the_last_error_a_crashed_agent_logged_and_no_stale_one(
    start_daemon, tmp_path
):
    rules = [
        {"when": "die", "steps": [{"call": "dies__run"}, {"reply": "unreachable"}]},
        {"when": "hello", "steps": [{"reply": "hi"}]},
    ]
    daemon = start_daemon(solo_bundle(tmp_path / "b", rules=rules, tool="dies", code=DIES))
    # What a former daemon's agent left behind is not this agent's error.
    stale = daemon.state_root / "run" / "last-error" / "solo"
    stale.write_text("an error of another life")

    def killed(pid: int) -> str:
        os.kill(pid, signal.SIGKILL)
        row = wait_for(lambda: (daemon.process("solo").get("lastExit") or {}).get("signal"), 20)
        return str(row)

    assert daemon.send("hello").returncode == 0
    assert killed(daemon.process("solo")["pid"]) == "SIGKILL"
    assert "error" not in daemon.process("solo")["lastExit"]

    # The tool's call is in the conversation: the request, delivered again, is answered.
    assert daemon.send("die", timeout=60).returncode == 0
    last = daemon.process("solo")["lastExit"]
    assert last["code"] == 3
    assert last["error"] == "cannot write the report: OSError: [Errno 28] No space left"
    table = on_terminal(daemon, "status")
    lines = table.stdout.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("solo")))
    assert lines[at + 1].strip().startswith("last stop: exit code 3 at ")
    assert lines[at + 1].endswith(": cannot write the report: OSError: [Errno 28] No space left")

    # Its next incarnation, killed without a word, shows no error of the one before.
    assert killed(daemon.process("solo")["pid"]) == "SIGKILL"
    assert "error" not in daemon.process("solo")["lastExit"]
