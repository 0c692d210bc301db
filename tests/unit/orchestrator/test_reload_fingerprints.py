"""Reload fingerprints: a change restarts exactly the processes that load what changed."""

from __future__ import annotations

import shutil
from pathlib import Path

from goondan.bundle import load_bundle
from orchestrator.reload import swarm_entries, swarm_fingerprints
from tests.unit.bundle.bundle_testkit import FIXTURES


def _prints(root: Path) -> dict[str, str]:
    bundle = load_bundle(root)
    return swarm_fingerprints(bundle, bundle.select_swarm("default"))


def _changed(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in after if before.get(name) != after[name]}


def test_an_extension_file_or_config_change_touches_its_agents_only(tmp_path: Path) -> None:
    root = shutil.copytree(FIXTURES / "multi", tmp_path / "multi")
    before = _prints(root)
    assert {"coder", "reviewer", "researcher"} <= set(before)
    log = root / "extensions" / "log.py"
    log.write_text(log.read_text() + "# changed\n")
    after = _prints(root)
    assert _changed(before, after) == {"coder"}
    yaml = root / "goondan.yaml"
    yaml.write_text(yaml.read_text().replace("level: info", "level: warning"))
    assert _changed(after, _prints(root)) == {"coder"}


def test_a_connector_file_change_touches_its_connections_only(tmp_path: Path) -> None:
    root = shutil.copytree(FIXTURES / "multi", tmp_path / "multi")
    before = _prints(root)
    connections = {name for name in before if name.startswith("connection:")}
    assert connections
    cli = root / "connectors" / "cli.py"
    cli.write_text(cli.read_text() + "# changed\n")
    assert _changed(before, _prints(root)) == connections


def test_swarm_entries_are_what_its_processes_import(tmp_path: Path) -> None:
    root = shutil.copytree(FIXTURES / "multi", tmp_path / "multi")
    bundle = load_bundle(root)
    labels = [r.label for r in swarm_entries(bundle, bundle.select_swarm("default"))]
    assert len(labels) == len(set(labels))
    assert {"Tool/calc", "Extension/logging", "Extension/required-tools-guard"} <= set(labels)
