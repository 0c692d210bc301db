"""`goondan validate`: the text and JSON reports and the exit code."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

from goondan.cli.validate_cmd import run_validate
from tests.unit.bundle.bundle_testkit import FIXTURES, edit, write_bundle


def _bundle_with_errors(tmp_path: Path) -> Path:
    text = edit("  provider: scripted\n", "  provider: bedrock\n")
    text = edit("    - ref: Tool/calc\n", "    - ref: Tool/calculator\n", text)
    return write_bundle(tmp_path / "broken", text)


def test_text_valid(tmp_path: Path) -> None:
    bundle = shutil.copytree(FIXTURES / "multi", tmp_path / "multi")
    out = io.StringIO()
    assert run_validate(str(bundle), "text", out) == 0
    assert out.getvalue() == f"✓ {bundle} is valid (12 resources)\n"


def test_text_invalid_lists_each_error_and_a_count(tmp_path: Path) -> None:
    path = str(_bundle_with_errors(tmp_path))
    out = io.StringIO()
    assert run_validate(path, "text", out) == 1
    text = out.getvalue()
    assert "Model/fast.spec.provider: unknown model provider 'bedrock'" in text
    assert "(E_CONFIG_REF_NOT_FOUND)\n  hint: declared Tools: calc" in text
    assert ":13: Model/fast.spec.provider" in text  # file:line prefix
    assert text.endswith(f"✗ {path}: 2 errors\n")


def test_json_valid(tmp_path: Path) -> None:
    bundle = shutil.copytree(FIXTURES / "multi", tmp_path / "multi")
    out = io.StringIO()
    assert run_validate(str(bundle), "json", out) == 0
    assert json.loads(out.getvalue()) == {"valid": True, "errors": [], "warnings": []}


def test_json_invalid_shape(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_validate(str(_bundle_with_errors(tmp_path)), "json", out) == 1
    report = json.loads(out.getvalue())
    assert report["valid"] is False
    assert [e["code"] for e in report["errors"]] == [
        "E_CONFIG_SCHEMA_INVALID",
        "E_CONFIG_REF_NOT_FOUND",
    ]
    for error in report["errors"]:
        assert set(error) == {"code", "message", "file", "line", "path", "suggestion"}
        assert isinstance(error["line"], int) and error["file"].endswith("goondan.yaml")
    assert report["errors"][1]["path"] == "Agent/coder.spec.tools[0].ref"


def test_missing_path_is_reported_not_raised(tmp_path: Path) -> None:
    out = io.StringIO()
    assert run_validate(str(tmp_path / "nope"), "json", out) == 1
    (error,) = json.loads(out.getvalue())["errors"]
    assert error["code"] == "FILE_NOT_FOUND" and error["line"] is None
