"""The template process: launches before warming, only the bundle's providers imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from agentproc.rehearsal import TURNS

REPO = Path(__file__).resolve().parents[3]
QUICKSTART = REPO / "configs" / "quickstart"


def _template(tmp_path: Path, bundle: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agentproc.zygote", str(os.getpid()), str(bundle)],
        env=dict(os.environ, TMPDIR=str(tmp_path)),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
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
