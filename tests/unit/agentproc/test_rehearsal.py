"""The template's rehearsal: real turns before the first fork, and nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REHEARSE = """
import threading
from goondan.logs import configure_logging
from agentproc.rehearsal import rehearse
configure_logging()
print(rehearse(), threading.active_count())
"""


def _env(tmp_path: Path) -> dict[str, str]:
    return dict(os.environ, TMPDIR=str(tmp_path), GOONDAN_LOG_LEVEL="debug")


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter, as the template runs the rehearsal: before anything else."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_rehearsal_answers_every_turn_and_leaves_no_thread_or_file(tmp_path: Path) -> None:
    done = _python(REHEARSE, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "True 1\n"  # every turn answered; only the main thread is left
    assert list(tmp_path.iterdir()) == []  # its socket and state directory are gone


def test_template_says_ready_and_keeps_stdout_for_the_protocol(
    tmp_path: Path,
) -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "agentproc.zygote", str(os.getpid())],
        env=_env(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as template:
        assert template.stdout is not None and template.stdin is not None
        first = template.stdout.readline()
        assert json.loads(first) == {"ready": template.pid}  # debug logs went to stderr
        template.stdin.close()  # EOF ends the template
        assert template.wait(timeout=30) == 0
    assert list(tmp_path.iterdir()) == []


QUICKENED = """
import dis
from goondan.logs import configure_logging
from agentproc.instance import Instance
from agentproc.process import AgentProcess
from agentproc.rehearsal import rehearse
from agentproc.turn import TurnRun
configure_logging()
rehearse()
for f in (TurnRun.__init__, AgentProcess._instance, Instance.__init__):
    adaptive = [i.opname for i in dis.get_instructions(f, adaptive=True)]
    print(f.__qualname__, adaptive != [i.opname for i in dis.get_instructions(f)])
"""


def test_rehearsal_warms_the_turn_and_the_new_conversation_path(tmp_path: Path) -> None:
    # What every forked agent inherits: its first turns and first conversations run bytecode
    # CPython has already quickened and specialised, instead of rewriting it in each agent.
    done = _python(QUICKENED, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [
        "TurnRun.__init__ True",
        "AgentProcess._instance True",
        "Instance.__init__ True",
    ]
