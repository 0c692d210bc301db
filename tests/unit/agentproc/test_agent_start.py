"""Building an agent from its bundle: extensions, policies, budgets, and what stops a start."""

import argparse
import textwrap

import pytest
import structlog

from agentproc.main import StartError, build_definition

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec:
  provider: scripted
  model: s
  pricing: {input: 1, output: 2}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: calc}
spec:
  entry: ./calc.py
  timeoutMs: 1234
  exports:
    - name: add
      description: add
      parameters: {type: object, properties: {}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  tools: [{ref: Tool/calc}]
%(agent)s
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/a
  agents: [{ref: Agent/a}]
  policy:
    budget: {maxTurnTokens: 500}
"""


def args_for(tmp_path, agent_yaml: str = "") -> argparse.Namespace:
    text = BUNDLE % {"agent": textwrap.indent(textwrap.dedent(agent_yaml), "  ")}
    (tmp_path / "goondan.yaml").write_text(text)
    (tmp_path / "calc.py").write_text("handlers = {'add': lambda ctx, args: 1}\n")
    return argparse.Namespace(bundle=str(tmp_path), swarm="default", agent="a")


async def test_a_definition_carries_the_policies(tmp_path):
    definition, catalog = await build_definition(args_for(tmp_path))
    assert definition.budget.max_turn_tokens == 500
    assert definition.pricing is not None and definition.pricing.output == 2
    entry = definition.registry.get("calc__add")
    assert entry is not None and entry.timeout_ms == 1234
    assert catalog["selfAgent"] == "a"


async def test_required_tools_load_the_guard(tmp_path):
    definition, _ = await build_definition(args_for(tmp_path, "requiredTools: [calc__add]"))
    owners = {
        m.owner
        for kind in ("turn", "step", "toolCall")
        for m in definition.pipeline.middlewares(kind)
    }
    assert owners == {"required-tools-guard"}


async def test_a_required_tool_the_agent_lacks_stops_the_start(tmp_path):
    with pytest.raises(StartError) as caught:
        await build_definition(args_for(tmp_path, "requiredTools: [calc__mul]"))
    message = str(caught.value)
    assert "Agent/a: spec.requiredTools names calc__mul" in message
    assert "its tools: calc__add" in message


async def test_a_required_tool_the_policy_denies_stops_the_start(tmp_path):
    agent = "requiredTools: [calc__add]\ntoolPolicy: {deny: ['calc__*']}"
    with pytest.raises(StartError, match="toolPolicy does not allow"):
        await build_definition(args_for(tmp_path, agent))


async def test_policy_entries_matching_nothing_are_warned_about(tmp_path):
    with structlog.testing.capture_logs() as logs:
        await build_definition(args_for(tmp_path, "toolPolicy: {deny: ['bash__*']}"))
    [warning] = [e for e in logs if e["event"].startswith("toolPolicy entry matches no tool")]
    assert warning["pattern"] == "bash__*" and warning["log_level"] == "warning"


async def test_an_extension_error_stops_the_start_with_its_code(tmp_path):
    agent = "extensions: [{ref: Extension/bad}]"
    args = args_for(tmp_path, agent)
    with open(tmp_path / "goondan.yaml", "a") as f:
        f.write(
            "---\napiVersion: goondan.ai/v1\nkind: Extension\nmetadata: {name: bad}\n"
            "spec: {entry: ./bad.py}\n"
        )
    (tmp_path / "bad.py").write_text("# no register here\n")
    with pytest.raises(StartError, match=r"^E_EXT_LOAD: Extension/bad: .*must define"):
        await build_definition(args)
