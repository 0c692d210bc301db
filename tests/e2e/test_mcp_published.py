"""A published MCP server that no one here wrote: `mcp-server-time` from the package index
(installed by the `test` extra), declared as docs/mcp.md's walk-through declares it."""

from __future__ import annotations

import importlib.metadata
import textwrap

from tests.e2e.conftest import goondan, write_bundle

BUNDLE = """\
    apiVersion: goondan.ai/v1
    kind: Model
    metadata: {name: clock-script}
    spec:
      provider: scripted
      model: scripted-v1
      options:
        rules:
          - when: "(\\\\d\\\\d:\\\\d\\\\d) UTC in ([A-Za-z_]+/[A-Za-z_]+)"
            steps:
              - call: time__convert_time
                args:
                  source_timezone: UTC
                  time: "{{match.1}}"
                  target_timezone: "{{match.2}}"
              - reply: "{{match.1}} UTC is {{result.target.datetime}} in {{match.2}}."
    ---
    apiVersion: goondan.ai/v1
    kind: Tool
    metadata: {name: time}
    spec:
      mcp:
        command: [python, -m, mcp_server_time, --local-timezone, UTC]
        startupTimeoutMs: 60000
      timeoutMs: 30000
    ---
    apiVersion: goondan.ai/v1
    kind: Agent
    metadata: {name: clock}
    spec:
      modelConfig: {modelRef: Model/clock-script}
      tools: [{ref: Tool/time}]
    ---
    apiVersion: goondan.ai/v1
    kind: Swarm
    metadata: {name: default}
    spec:
      entryAgent: Agent/clock
      agents: [{ref: Agent/clock}]
"""


def test_mcp_server_time_lists_its_tools_and_answers_a_turn(tmp_path, state_root):
    assert importlib.metadata.version("mcp-server-time")  # from the index, not from this repo
    bundle = write_bundle(tmp_path / "clock", textwrap.dedent(BUNDLE))
    goondan("validate", str(bundle), check=True)

    proc = goondan("tools", "list", "--agent", "clock", str(bundle), check=True)
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert names == ["time__get_current_time", "time__convert_time"]

    proc = goondan(
        "run",
        str(bundle),
        "--state-root",
        str(state_root),
        "--input",
        "What is 12:00 UTC in Asia/Tokyo?",
    )
    assert proc.returncode == 0, proc.stderr
    # Tokyo has no daylight saving time: the answer is the same every day of the year.
    assert "12:00 UTC is " in proc.stdout and "T21:00:00+09:00 in Asia/Tokyo." in proc.stdout
