"""`Agent.spec.placement` and `spec.resources` (agents placed on Ray): shapes `validate` checks,
each mistake a ConfigError at its file, line and path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from goondan.bundle import Bundle, ConfigError
from goondan.bundle.model import AgentResources
from tests.unit.bundle.bundle_testkit import edit, line_of, write_bundle

AGENT = "  prompt:\n    system: You write code.\n"


def with_spec(extra: str) -> str:
    return edit(AGENT, AGENT + extra)


def test_placement_and_resources_are_read(load: Callable[[Path], Bundle], tmp_path: Path) -> None:
    text = with_spec(
        "  placement: ray\n  resources: {cpus: 0.5, memoryMB: 512, gpus: 1, custom: {node_b: 1}}\n"
    )
    bundle = load(write_bundle(tmp_path, text))
    spec = bundle.local("Agent", "coder").spec  # type: ignore[union-attr]
    assert spec.placement == "ray"
    assert spec.resources == AgentResources(cpus=0.5, memory_mb=512, gpus=1, custom={"node_b": 1})
    reviewer = bundle.local("Agent", "reviewer").spec  # type: ignore[union-attr]
    assert reviewer.placement is None and reviewer.resources == AgentResources()


def test_bad_placement_names_its_line(
    errors_of: Callable[[Path], list[ConfigError]], tmp_path: Path
) -> None:
    text = with_spec("  placement: rey\n")
    errors = errors_of(write_bundle(tmp_path, text))
    (err,) = [e for e in errors if e.path and e.path.endswith("spec.placement")]
    assert err.line == line_of(text, "placement: rey")
    assert "must be one of local, ray" in err.message and err.suggestion == "did you mean 'ray'?"


def test_bad_resources_name_their_lines(
    errors_of: Callable[[Path], list[ConfigError]], tmp_path: Path
) -> None:
    text = with_spec("  resources:\n    cpus: -1\n    memoryMb: 512\n    custom: {node_b: many}\n")
    errors = errors_of(write_bundle(tmp_path, text))
    by_path = {e.path.rsplit("spec.", 1)[-1]: e for e in errors if e.path}
    assert by_path["resources.cpus"].line == line_of(text, "cpus: -1")
    assert "unknown field 'memoryMb'" in by_path["resources.memoryMb"].message
    assert by_path["resources.memoryMb"].suggestion == "did you mean 'memoryMB'?"
    assert by_path["resources.custom.node_b"].line == line_of(text, "custom: {node_b: many}")
    assert "must be a number" in by_path["resources.custom.node_b"].message
