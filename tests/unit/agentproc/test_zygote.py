"""The template process: launches before warming, only the bundle's providers imported, and
spares forked ahead that become the agents launched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentproc.immortal_heap import supported
from agentproc.rehearsal import TURNS
from goondan.settings import DEFAULTS
from orchestrator.launcher import LaunchSpec
from tests.proc_table import children, open_files, title
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "configs" / "quickstart"


def _template(
    tmp_path: Path, bundle: Path, stderr: Any = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentproc.zygote", str(os.getpid()), str(bundle)],
        env=dict(os.environ, TMPDIR=str(tmp_path)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )


def _send(template: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    assert template.stdin is not None
    template.stdin.write((json.dumps(message) + "\n").encode())
    template.stdin.flush()


def _read(template: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert template.stdout is not None
    message: dict[str, Any] = json.loads(template.stdout.readline())
    return message


def _has_pydantic(pid: int) -> bool:
    """Whether the process has the openai SDK's pydantic (a shared object) mapped."""
    return "pydantic_core" in Path(f"/proc/{pid}/maps").read_text()


def test_the_first_launch_is_answered_before_the_template_warms(tmp_path: Path) -> None:
    with _template(tmp_path, QUICKSTART) as template:
        # In the pipe before the template is even ready: it forks before any warming.
        _send(template, {"id": 1, "argv": ["--not-an-option"]})
        assert _read(template) == {"ready": template.pid}
        answer = _read(template)
        assert answer["id"] == 1 and answer["pid"] > 0
        assert _read(template) == {"exit": answer["pid"], "code": 2}  # argparse's usage error
        # Then, idle, it rehearses and freezes.
        assert _read(template) == {"warm": template.pid, "rehearsedTurns": TURNS}
        _send(template, {"id": 2, "argv": ["--not-an-option"]})
        assert _read(template)["id"] == 2
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0
    assert list(tmp_path.iterdir()) == []  # the rehearsal's files are gone


def test_the_template_imports_only_the_providers_the_bundle_uses(tmp_path: Path) -> None:
    with _template(tmp_path, QUICKSTART) as template:
        assert _read(template) == {"ready": template.pid}
        assert not _has_pydantic(template.pid)  # the quickstart's Models are all scripted
        # A reload adds an openai Model: the same template imports the SDK before its next fork.
        _send(template, {"bundle": str(QUICKSTART), "providers": ["openai", "scripted"]})
        _send(template, {"id": 1, "argv": ["--not-an-option"]})
        message = _read(template)
        assert message["id"] == 1 and _has_pydantic(template.pid)
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0


def test_a_rehearsal_stops_after_a_turn_when_asked_and_resumes(tmp_path: Path) -> None:
    code = f"""
from goondan.logs import configure_logging
from agentproc.rehearsal import rehearse_turns
configure_logging()  # to stderr
first = rehearse_turns(0, {TURNS}, lambda: True)
rest = rehearse_turns(first, {TURNS}, lambda: False)
print(first, rest)
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"1 {TURNS - 1}\n"


SPARE = "goondan: template spare"


def _spare_of(template: subprocess.Popen[bytes], other_than: int = 0) -> int:
    """The template's spare (waiting until there is one, other than `other_than`)."""
    spares: list[int] = []

    def one() -> bool:
        spares[:] = [p for p in children(template.pid) if title(p) == SPARE and p != other_than]
        return len(spares) == 1

    wait_for(one, timeout=20)
    return spares[0]


def _gone(pid: int) -> bool:
    """No such process, not even a zombie: it was reaped."""
    return not Path(f"/proc/{pid}").exists()


def _pipes(pid: int, fds: tuple[str, ...] | None = None) -> set[str]:
    """The pipes `pid` has open (among `fds`, or all)."""
    targets = open_files(pid)
    return {t for fd in fds or targets if (t := targets.get(fd, "")).startswith("pipe:")}


def _end(pid: int) -> int:
    """SIGKILL `pid` and wait until its parent has reaped it."""
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _gone(pid), timeout=20)
    return pid


def _debug_records(log: Path, agent: str, event: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [
        {k: v for k, v in r.items() if k not in ("event", "level", "timestamp", "agent")}
        for r in records
        if r.get("agent") == agent and r.get("event") == event
    ]


def _debug_lines(log: Path, pid: int) -> list[str]:
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    return [
        record["event"]
        for record in map(json.loads, lines)
        if record.get("pid") == pid and record.get("level") == "debug"
    ]


def test_a_launch_takes_the_spare_which_becomes_that_agent(tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    spec = LaunchSpec(QUICKSTART, "default", f"ipc://{tmp_path}/a.sock", tmp_path, DEFAULTS)
    with log.open("wb") as stderr, _template(tmp_path, QUICKSTART, stderr) as template:
        assert _read(template) == {"ready": template.pid}
        # (No `agentArgv`: the spare is not hardened before its launch, so that a process of
        # the same user, this test, may list its fds without being root.)
        _send(template, {"bundle": str(QUICKSTART), "providers": [], "spares": 1})
        assert "warm" in _read(template)  # then the spare is forked
        spare = _spare_of(template)
        # Forked ahead, it holds neither the template's pipes nor anything of an agent.
        own = _pipes(spare)
        assert not own & _pipes(template.pid, fds=("0", "1"))
        _send(
            template,
            {
                "id": 1,
                "argv": spec.argv("assistant", template.pid),
                "credential": "k" * 32,
                "env": {"GOONDAN_LOG_LEVEL": "debug"},  # changed since the configuration
            },
        )
        assert _read(template) == {"id": 1, "pid": spare}
        # It is that agent now (no orchestrator listens: it waits to connect), with the
        # environment of its launch: it logs at debug level.
        wait_for(lambda: title(spare) == "goondan: agent assistant (default)", timeout=20)
        wait_for(lambda: "agent ready" in _debug_lines(log, spare), timeout=20)
        assert f"\nPPid:\t{template.pid}\n" in Path(f"/proc/{spare}/status").read_text()
        second = _spare_of(template, other_than=spare)
        assert not own & _pipes(second)  # nor the assignment pipe of the spare before it
        os.kill(spare, signal.SIGKILL)
        assert _read(template) == {"exit": spare, "code": -signal.SIGKILL}  # an agent's exit
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0
    assert _gone(second)  # the template reaped its spare before it exited


def test_a_spare_that_ends_is_no_agents_exit_and_is_replaced(tmp_path: Path) -> None:
    with _template(tmp_path, QUICKSTART) as template:
        assert _read(template) == {"ready": template.pid}
        _send(template, {"bundle": str(QUICKSTART), "providers": [], "spares": 1})
        assert "warm" in _read(template)
        first = _spare_of(template)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: _gone(first), timeout=20)  # reaped by the template
        second = _spare_of(template, other_than=first)
        # A new configuration discards the spare forked with the one before.
        _send(template, {"bundle": str(QUICKSTART), "providers": [], "spares": 1})
        wait_for(lambda: _gone(second), timeout=20)
        assert "warm" in _read(template)  # loaded and frozen again, then a new spare
        third = _spare_of(template, other_than=second)
        _send(template, {"id": 7, "argv": ["--not-an-option"]})
        # Neither ended spare was reported: the first line is the launch's answer.
        assert _read(template) == {"id": 7, "pid": third}
        assert _read(template) == {"exit": third, "code": 2}  # argparse's usage error
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0


def test_without_spares_every_launch_forks(tmp_path: Path) -> None:
    with _template(tmp_path, QUICKSTART) as template:
        assert _read(template) == {"ready": template.pid}
        _send(template, {"bundle": str(QUICKSTART), "providers": [], "spares": 0})
        _send(template, {"id": 1, "argv": ["--not-an-option"]})
        answer = _read(template)
        assert _read(template) == {"exit": answer["pid"], "code": 2}
        assert [p for p in children(template.pid) if title(p) == SPARE] == []
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0


def test_a_spare_sets_the_agent_up_before_its_launch(tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    spec = LaunchSpec(QUICKSTART, "default", f"ipc://{tmp_path}/a.sock", tmp_path, DEFAULTS)
    with log.open("wb") as stderr, _template(tmp_path, QUICKSTART, stderr) as template:
        assert _read(template) == {"ready": template.pid}
        environ = dict(os.environ, GOONDAN_LOG_LEVEL="debug")
        _send(
            template,
            {
                "bundle": str(QUICKSTART),
                "providers": [],
                "environ": environ,
                "spares": 1,
                "agentArgv": spec.argv("", template.pid),
            },
        )
        assert "warm" in _read(template)
        spare = _spare_of(template)
        # Set up ahead: its priority lowered, not inspectable, before it is anyone.
        wait_for(lambda: _niceness(spare) == DEFAULTS.daemon.agent_nice, timeout=20)
        launch = {"id": 1, "argv": spec.argv("researcher", template.pid), "credential": "k" * 32}
        _send(template, launch)
        assert _read(template) == {"id": 1, "pid": spare}
        wait_for(lambda: "agent ready" in _debug_lines(log, spare), timeout=20)
        assert _debug_records(log, "researcher", "agent process set up") == [{"spare": True}]
        assert title(spare) == "goondan: agent researcher (default)"
        assert _niceness(spare) == DEFAULTS.daemon.agent_nice  # lowered once, not twice
        # A launch whose argv differs from the one prepared for (but --agent) does it all.
        second = _spare_of(template, other_than=spare)
        other = spec.argv("assistant", template.pid) + ["--credential-fd", "0"]
        _send(template, {"id": 2, "argv": other, "credential": "j" * 32})
        assert _read(template) == {"id": 2, "pid": second}
        wait_for(lambda: _debug_records(log, "assistant", "agent process set up"), timeout=20)
        assert _debug_records(log, "assistant", "agent process set up") == [{"spare": False}]
        assert _niceness(second) == DEFAULTS.daemon.agent_nice
        for pid in (spare, second):
            os.kill(pid, signal.SIGKILL)
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0


def test_a_launch_that_changes_the_environment_is_set_up_anew(tmp_path: Path) -> None:
    log = tmp_path / "stderr"
    spec = LaunchSpec(QUICKSTART, "default", f"ipc://{tmp_path}/a.sock", tmp_path, DEFAULTS)
    with log.open("wb") as stderr, _template(tmp_path, QUICKSTART, stderr) as template:
        assert _read(template) == {"ready": template.pid}
        configuration = {"bundle": str(QUICKSTART), "providers": [], "spares": 1}
        _send(template, {**configuration, "agentArgv": spec.argv("", template.pid)})
        assert "warm" in _read(template)
        spare = _spare_of(template)
        argv = spec.argv("assistant", template.pid)
        changed = {"GOONDAN_LOG_LEVEL": "debug"}  # since the configuration
        _send(template, {"id": 1, "argv": argv, "credential": "k" * 32, "env": changed})
        assert _read(template) == {"id": 1, "pid": spare}
        # The spare set up its logging under the environment before: done again, at debug.
        wait_for(lambda: "agent ready" in _debug_lines(log, spare), timeout=20)
        assert _debug_records(log, "assistant", "agent process set up") == [{"spare": False}]
        assert _niceness(spare) == DEFAULTS.daemon.agent_nice  # lowered once, not twice
        os.kill(spare, signal.SIGKILL)
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0


def _niceness(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16])


def test_spares_that_keep_ending_are_given_up_until_a_new_configuration(tmp_path: Path) -> None:
    configuration = {"bundle": str(QUICKSTART), "providers": [], "spares": 1}
    with _template(tmp_path, QUICKSTART) as template:
        assert _read(template) == {"ready": template.pid}
        _send(template, configuration)
        assert "warm" in _read(template)
        ended = 0
        for _ in range(3):  # Spares.MAX_LOST
            ended = _end(_spare_of(template, other_than=ended))
        # No fourth: a template that cannot keep a spare alive does not fork one in a loop;
        # launches fork as they did before spares.
        _send(template, {"id": 1, "argv": ["--not-an-option"]})
        answer = _read(template)
        assert answer["id"] == 1
        assert _read(template) == {"exit": answer["pid"], "code": 2}
        assert [p for p in children(template.pid) if title(p) == SPARE] == []
        _send(template, configuration)  # a reload: spares get another chance
        assert "warm" in _read(template)
        _spare_of(template)
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0


def test_a_template_whose_orchestrator_is_gone_ends_quietly(tmp_path: Path) -> None:
    # As when `goondan run` fails as it starts (a metrics port in use): the template's next
    # message meets a closed pipe, and it must end as at a stop, with no traceback.
    with _template(tmp_path, QUICKSTART, stderr=subprocess.PIPE) as template:
        assert _read(template) == {"ready": template.pid}
        template.stdout.close()  # type: ignore[union-attr]
        # Answered into the closed pipe, before the template reads the EOF behind it.
        _send(template, {"id": 1, "argv": ["--not-an-option"]})
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0
        assert b"Traceback" not in template.stderr.read()  # type: ignore[union-attr]


def _private_kib(pid: int) -> int:
    rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
    return sum(int(line.split()[1]) for line in rollup if line.startswith("Private_"))


def _waiting_on_pipe(pid: int) -> bool:
    return Path(f"/proc/{pid}/wchan").read_text().endswith("pipe_read")


def _spare_private_kib(tmp_path: Path, immortal: bool) -> int:
    """The private memory of a spare forked from a warm template, once it is set up."""
    spec = LaunchSpec(QUICKSTART, "default", f"ipc://{tmp_path}/a.sock", tmp_path, DEFAULTS)
    with _template(tmp_path, QUICKSTART) as template:
        assert _read(template) == {"ready": template.pid}
        configuration = {"bundle": str(QUICKSTART), "providers": [], "spares": 1}
        argv = spec.argv("", template.pid)
        _send(template, {**configuration, "immortal": immortal, "agentArgv": argv})
        assert "warm" in _read(template)
        spare = _spare_of(template)
        # Niced first thing in its set-up; reading its launch line once the set-up is done.
        wait_for(lambda: _waiting_on_pipe(spare), timeout=20)
        private = _private_kib(spare)
        template.stdin.close()  # type: ignore[union-attr]
        assert template.wait(timeout=30) == 0
    return private


def test_agents_forked_from_a_warm_template_share_its_immortal_objects(tmp_path: Path) -> None:
    # A spare's set-up runs the agent runtime's code: with the template's objects immortal
    # it copies none of their pages (CPython 3.12 and 3.13; elsewhere nothing changes).
    immortal = _spare_private_kib(tmp_path / "on", immortal=True)
    mortal = _spare_private_kib(tmp_path / "off", immortal=False)
    if supported():
        assert immortal < mortal - 512
    else:
        assert abs(immortal - mortal) < 256
