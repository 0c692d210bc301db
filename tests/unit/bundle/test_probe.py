"""`goondan.bundle.probe`: which entries deep validation imports, and what it reports (the
probe's child process runs for real)."""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from pathlib import Path

import pytest

from goondan.bundle import (
    ConfigError,
    bundle_entries,
    load_bundle,
    probe_entries,
    probe_entries_async,
)
from tests.unit.bundle.bundle_testkit import FIXTURES
from tests.waiting import wait_for


def _multi(tmp_path: Path) -> Path:
    return shutil.copytree(FIXTURES / "multi", tmp_path / "multi")


def test_entries_are_local_ones_and_the_package_ones_in_use(tmp_path: Path) -> None:
    bundle = load_bundle(_multi(tmp_path))
    labels = {(r.package, r.label) for r in bundle_entries(bundle)}
    assert labels == {
        ("__local__", "Tool/calc"),
        ("__local__", "Extension/logging"),
        ("__local__", "Connector/cli"),
        ("@goondan/base", "Tool/agents"),
        # coder's `requiredTools` brings in the guard extension.
        ("@goondan/base", "Extension/required-tools-guard"),
    }
    # Base tools nobody uses are not imported.
    assert all(r.name != "bash" for r in bundle_entries(bundle))


def test_agent_extensions_add_the_implied_guard_once(tmp_path: Path) -> None:
    bundle = load_bundle(_multi(tmp_path))
    coder = bundle.local("Agent", "coder")
    researcher = bundle.local("Agent", "researcher")
    assert coder is not None and researcher is not None
    assert [r.label for r in bundle.agent_extensions(coder)] == [
        "Extension/logging",
        "Extension/required-tools-guard",
    ]
    assert bundle.agent_extensions(researcher) == []


def test_a_sound_bundle_has_no_problems(tmp_path: Path) -> None:
    bundle = load_bundle(_multi(tmp_path))
    assert probe_entries(bundle, 30.0) == []
    assert probe_entries(bundle, 30.0, resources=[]) == []


def test_problems_of_several_entries_come_back_together(tmp_path: Path) -> None:
    root = _multi(tmp_path)
    (root / "tools" / "calc.py").write_text("handlers = {'add': len, 'sub': len}\n")
    (root / "extensions" / "log.py").write_text("import no_such_module_here\n")
    problems = probe_entries(load_bundle(root), 30.0)
    by_code = {(p.code, p.severity, p.path) for p in problems}
    assert by_code == {
        ("E_CONFIG_HANDLER_MISSING", "error", "Tool/calc"),  # negate
        ("E_CONFIG_HANDLER_UNDECLARED", "warning", "Tool/calc"),  # sub
        ("E_CONFIG_ENTRY_IMPORT", "error", "Extension/logging"),
    }
    ext = next(p for p in problems if p.path == "Extension/logging")
    assert ext.line == 1 and ext.file is not None and ext.file.endswith("extensions/log.py")
    assert "ModuleNotFoundError" in ext.message


def test_a_warning_renders_like_an_error() -> None:
    warning = ConfigError(
        "E_CONFIG_HANDLER_UNDECLARED", "m", "f.py", None, "Tool/x", None, "warning"
    )
    assert warning.render() == "f.py: Tool/x: m (E_CONFIG_HANDLER_UNDECLARED)"


def _hanging(tmp_path: Path) -> tuple[Path, Path]:
    """The multi fixture with a tool that starts a grandchild and hangs at import."""
    root = _multi(tmp_path)
    pid_file = tmp_path / "grandchild.pid"
    written = tmp_path / "grandchild.pid.tmp"
    # Renamed into place once written: the tests read the pid as soon as the file exists.
    (root / "tools" / "calc.py").write_text(
        "import os, subprocess, time\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"with open({str(written)!r}, 'w') as f:\n"
        "    f.write(str(child.pid))\n"
        f"os.replace({str(written)!r}, {str(pid_file)!r})\n"
        "time.sleep(300)\n"
    )
    return root, pid_file


def _gone(pid_file: Path) -> bool:
    try:
        os.kill(int(pid_file.read_text()), 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid_file.read_text()}/stat") as f:  # a zombie is gone too
        return f.read().split(")")[-1].split()[0] == "Z"


def test_async_probe_times_out_like_the_blocking_one(tmp_path: Path) -> None:
    root, pid_file = _hanging(tmp_path)
    bundle = load_bundle(root)
    (problem,) = asyncio.run(probe_entries_async(bundle, 2.0))
    assert problem.code == "E_CONFIG_ENTRY_TIMEOUT" and problem.path == "Tool/calc"
    assert problem.file is not None and problem.file.endswith("tools/calc.py")
    wait_for(lambda: _gone(pid_file), timeout=5)


def test_cancelling_the_async_probe_kills_it_and_what_it_started(tmp_path: Path) -> None:
    root, pid_file = _hanging(tmp_path)
    bundle = load_bundle(root)

    async def cancel_midway() -> None:
        task = asyncio.ensure_future(probe_entries_async(bundle, 60.0))
        await asyncio.to_thread(wait_for, pid_file.exists, 20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    asyncio.run(cancel_midway())
    assert time.monotonic() - started < 30
    wait_for(lambda: _gone(pid_file), timeout=5)


def test_async_probe_reports_what_the_blocking_one_does(tmp_path: Path) -> None:
    root = _multi(tmp_path)
    (root / "connectors" / "cli.py").write_text("def main(ctx):\n    pass\n")
    bundle = load_bundle(root)
    blocking = probe_entries(bundle, 30.0)
    assert [p.code for p in blocking] == ["E_CONFIG_CONNECTOR_NO_MAIN"]
    assert asyncio.run(probe_entries_async(bundle, 30.0)) == blocking
