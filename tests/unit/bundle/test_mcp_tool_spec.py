"""`Tool.spec.mcp`: `entry` XOR `mcp`, and every mistake in the declaration as a ConfigError
with file, line and YAML path. Validation never starts a server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from goondan.bundle import Bundle, ConfigError, McpServerSpec, ValueSource
from tests.unit.bundle.bundle_testkit import edit, line_of, write_bundle

Errors = Callable[[Path], list[ConfigError]]

ENTRY = """\
  entry: ./tools/calc.py
  exports:
    - name: add
      description: Add two numbers.
      parameters:
        type: object
        properties:
          a: {type: number}
          b: {type: number}
        required: [a, b]
"""


def mcp_bundle(tmp_path: Path, spec: str, extra: dict[str, str] | None = None) -> str:
    text = edit(ENTRY, spec)
    write_bundle(tmp_path, text, extra)
    return text


def errors_at(errors: list[ConfigError], path: str) -> list[ConfigError]:
    return [e for e in errors if e.path == path]


def test_a_stdio_server_loads_with_its_values(load: Callable[[Path], Bundle], tmp_path: Path):
    mcp_bundle(
        tmp_path,
        """\
  mcp:
    command: [python, -m, mcp_server_time]
    env: {TZ: {value: UTC}, TOKEN: {valueFrom: {env: MY_TOKEN}}}
    cwd: ./servers
    startupTimeoutMs: 5000
  include: [get_current_time, "convert_*"]
  exclude: [convert_bad]
  timeoutMs: 60000
""",
        {"servers/keep.txt": ""},
    )
    tool = next(r for r in load(tmp_path).resources if r.label == "Tool/calc")
    assert tool.spec.entry is None and tool.spec.exports == ()
    assert tool.spec.mcp == McpServerSpec(
        command=("python", "-m", "mcp_server_time"),
        env={"TZ": ValueSource(value="UTC"), "TOKEN": ValueSource(env="MY_TOKEN")},
        cwd="./servers",
        startup_timeout_ms=5000,
    )
    assert tool.spec.include == ("get_current_time", "convert_*")
    assert tool.spec.exclude == ("convert_bad",)
    assert tool.spec.timeout_ms == 60000


def test_an_http_server_loads_with_headers(load: Callable[[Path], Bundle], tmp_path: Path):
    mcp_bundle(
        tmp_path,
        """\
  mcp:
    url: https://example.com/mcp
    headers: {Authorization: {valueFrom: {env: MCP_TOKEN}}}
""",
    )
    tool = next(r for r in load(tmp_path).resources if r.label == "Tool/calc")
    assert tool.spec.mcp.url == "https://example.com/mcp"
    assert tool.spec.mcp.headers == {"Authorization": ValueSource(env="MCP_TOKEN")}
    assert tool.spec.mcp.startup_timeout_ms == 10_000


def test_entry_and_mcp_together_are_refused(errors_of: Errors, tmp_path: Path):
    text = mcp_bundle(
        tmp_path,
        ENTRY + "  mcp:\n    command: [python, server.py]\n",
    )
    errors = errors_of(tmp_path)
    for key in ("entry", "exports"):
        [err] = errors_at(errors, f"Tool/calc.spec.{key}")
        assert "cannot be set beside 'mcp'" in err.message
        assert err.line == line_of(text, f"  {key}:")
        assert err.file and Path(err.file).name == "goondan.yaml"


def test_neither_entry_nor_mcp_says_both_ways(errors_of: Errors, tmp_path: Path):
    mcp_bundle(tmp_path, "  timeoutMs: 10\n")
    [err] = errors_at(errors_of(tmp_path), "Tool/calc.spec.entry")
    assert "required field 'entry' is missing" in err.message
    assert err.suggestion and "'mcp'" in err.suggestion


def test_command_and_url_are_exclusive(errors_of: Errors, tmp_path: Path):
    text = mcp_bundle(tmp_path, "  mcp:\n    command: [a]\n    url: http://x/mcp\n")
    [err] = errors_at(errors_of(tmp_path), "Tool/calc.spec.mcp")
    assert "exactly one of 'command'" in err.message and "not both" in err.message
    assert err.line == line_of(text, "  mcp:")


def test_a_command_string_is_refused_with_the_list_form(errors_of: Errors, tmp_path: Path):
    text = mcp_bundle(tmp_path, "  mcp:\n    command: uvx mcp-server-time\n")
    [err] = errors_at(errors_of(tmp_path), "Tool/calc.spec.mcp.command")
    assert "list of words" in err.message
    assert err.suggestion and "[uvx, mcp-server-time]" in err.suggestion
    assert err.line == line_of(text, "command: uvx")


def test_values_of_the_other_transport_are_refused(errors_of: Errors, tmp_path: Path):
    mcp_bundle(
        tmp_path,
        "  mcp:\n    url: http://x/mcp\n    env: {A: {value: b}}\n    cwd: ./\n",
    )
    errors = errors_of(tmp_path)
    assert "applies to a server declared with 'command'" in (
        errors_at(errors, "Tool/calc.spec.mcp.env")[0].message
    )
    assert "stdio server" in errors_at(errors, "Tool/calc.spec.mcp.cwd")[0].message


def test_a_bad_url_a_bad_value_and_a_cwd_outside(errors_of: Errors, tmp_path: Path):
    mcp_bundle(tmp_path, "  mcp:\n    url: ftp://x\n    headers: {A: {valueFrom: {}}}\n")
    errors = errors_of(tmp_path)
    [url] = errors_at(errors, "Tool/calc.spec.mcp.url")
    assert "not an http:// or https:// URL" in url.message
    assert errors_at(errors, "Tool/calc.spec.mcp.headers.A.valueFrom")
    other = tmp_path / "other"
    mcp_bundle(other, "  mcp:\n    command: [x]\n    cwd: ../\n")
    [err] = errors_at(errors_of(other), "Tool/calc.spec.mcp.cwd")
    assert err.code == "E_CONFIG_PATH_OUTSIDE_BUNDLE"
    third = tmp_path / "third"
    mcp_bundle(third, "  mcp:\n    command: [x]\n    cwd: ./missing\n")
    [err] = errors_at(errors_of(third), "Tool/calc.spec.mcp.cwd")
    assert "not a directory" in err.message


def test_filters_need_mcp(errors_of: Errors, tmp_path: Path):
    mcp_bundle(tmp_path, ENTRY + "  include: [add]\n")
    [err] = errors_at(errors_of(tmp_path), "Tool/calc.spec.include")
    assert "needs 'mcp'" in err.message


def test_goondan_validate_does_not_start_the_server(tmp_path: Path):
    marker = tmp_path / "started"
    mcp_bundle(tmp_path, f"  mcp:\n    command: [touch, {marker}]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "goondan.cli.main", "validate", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not marker.exists()
