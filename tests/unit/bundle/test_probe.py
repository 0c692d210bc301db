"""`goondan.bundle.probe`: which entries deep validation imports, and what it reports (the
probe's child process runs for real)."""

from __future__ import annotations

import shutil
from pathlib import Path

from goondan.bundle import ConfigError, bundle_entries, load_bundle, probe_entries
from tests.unit.bundle.bundle_testkit import FIXTURES


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
