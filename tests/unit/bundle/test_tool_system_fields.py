"""The Tool-system fields: Tool timeoutMs/sequential, Agent toolPolicy, Swarm budget and
loopDetection, Model pricing. Accepted when right, a located error when not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from goondan.bundle import Bundle, ConfigError
from goondan.bundle.model import (
    BudgetPolicy,
    LoopDetectionPolicy,
    ModelPricing,
    PingPongPolicy,
    ToolPolicySpec,
)
from tests.unit.bundle.bundle_testkit import edit, line_of, write_bundle

Errors = Callable[[Path], list[ConfigError]]
Load = Callable[[Path], Bundle]

TOOL = "  entry: ./tools/calc.py\n"
AGENT = "    system: You write code.\n"
SWARM = "  entryAgent: Agent/coder\n"
MODEL = "  model: scripted-v1\n"


def spec(bundle: Bundle, kind: str, name: str) -> Any:
    resource = bundle.local(kind, name)
    assert resource is not None, f"no {kind}/{name}"
    return resource.spec


def test_defaults(load: Load, tmp_path: Path) -> None:
    bundle = load(write_bundle(tmp_path))
    tool = spec(bundle, "Tool", "calc")
    assert (tool.timeout_ms, tool.sequential) == (None, False)
    assert spec(bundle, "Agent", "coder").tool_policy == ToolPolicySpec()
    policy = spec(bundle, "Swarm", "default").policy
    assert policy.budget == BudgetPolicy(1800.0, 1_000_000, None)
    assert policy.loop_detection == LoopDetectionPolicy(True, 3, 5, 8)
    assert policy.loop_detection.ping_pong == PingPongPolicy(True, 6, 8, 12)
    assert spec(bundle, "Model", "fast").pricing is None


def test_every_field_set(load: Load, tmp_path: Path) -> None:
    text = edit(TOOL, TOOL + "  timeoutMs: 5000\n  sequential: true\n")
    text = edit(
        AGENT,
        AGENT + "  toolPolicy:\n    allow: ['calc__*', agents__request]\n"
        "    deny: [calc__add]\n    allowRegistryCalls: true\n",
        text,
    )
    text = edit(
        SWARM,
        SWARM + "  policy:\n    maxStepsPerTurn: 8\n"
        "    budget: {maxTurnSeconds: 60, maxTurnTokens: null, maxTurnCostUsd: 0.5}\n"
        "    loopDetection: {enabled: false, warnAt: 2, blockAt: 4, stopAt: 4,\n"
        "      pingPong: {enabled: false, warnAt: 4, blockAt: 6, stopAt: 10}}\n",
        text,
    )
    text = edit(MODEL, MODEL + "  pricing: {input: 2.5, output: 10}\n", text)
    bundle = load(write_bundle(tmp_path, text))
    tool = spec(bundle, "Tool", "calc")
    assert (tool.timeout_ms, tool.sequential) == (5000, True)
    assert spec(bundle, "Agent", "coder").tool_policy == ToolPolicySpec(
        allow=("calc__*", "agents__request"), deny=("calc__add",), allow_registry_calls=True
    )
    policy = spec(bundle, "Swarm", "default").policy
    assert policy.max_steps_per_turn == 8
    assert policy.budget == BudgetPolicy(60.0, None, 0.5)
    assert policy.loop_detection == LoopDetectionPolicy(
        False, 2, 4, 4, ping_pong=PingPongPolicy(False, 4, 6, 10)
    )
    assert spec(bundle, "Model", "fast").pricing == ModelPricing(2.5, 10.0)


@pytest.mark.parametrize(
    "old, new, path, words",
    [
        (TOOL, TOOL + "  timeoutMs: 0\n", "Tool/calc.spec.timeoutMs", "integer >= 1"),
        (TOOL, TOOL + "  sequential: yes please\n", "Tool/calc.spec.sequential", "true or false"),
        (TOOL, TOOL + "  timeout: 5\n", "Tool/calc.spec.timeout", "did you mean 'timeoutMs'"),
        (
            AGENT,
            AGENT + "  toolPolicy: {deny: ['bash exec']}\n",
            "Agent/coder.spec.toolPolicy.deny[0]",
            "cannot match a tool name",
        ),
        (
            AGENT,
            AGENT + "  toolPolicy: {allow: calc__add}\n",
            "Agent/coder.spec.toolPolicy.allow",
            "must be a list",
        ),
        (
            AGENT,
            AGENT + "  toolPolicy: {requireApproval: ['rm -rf']}\n",
            "Agent/coder.spec.toolPolicy.requireApproval[0]",
            "cannot match a tool name",
        ),
        (
            AGENT,
            AGENT + "  toolPolicy: {approvalTimeoutSeconds: 0}\n",
            "Agent/coder.spec.toolPolicy.approvalTimeoutSeconds",
            "must be a number > 0",
        ),
        (
            SWARM,
            SWARM + "  policy:\n    budget: {maxTurnSeconds: 0}\n",
            "Swarm/default.spec.policy.budget.maxTurnSeconds",
            "must be a number > 0",
        ),
        (
            SWARM,
            SWARM + "  policy:\n    budget: {maxTurnTokens: 1.5}\n",
            "Swarm/default.spec.policy.budget.maxTurnTokens",
            "integer",
        ),
        (
            SWARM,
            SWARM + "  policy:\n    loopDetection: {warnAt: 6, blockAt: 4}\n",
            "Swarm/default.spec.policy.loopDetection",
            "warnAt <= blockAt <= stopAt",
        ),
        (
            SWARM,
            SWARM + "  policy:\n    loopDetection: {pingPong: {warnAt: 9}}\n",
            "Swarm/default.spec.policy.loopDetection.pingPong",
            "warnAt <= blockAt <= stopAt",
        ),
        (
            SWARM,
            SWARM + "  policy:\n    loopDetection: {pingPong: {every: 2}}\n",
            "Swarm/default.spec.policy.loopDetection.pingPong.every",
            "",
        ),
        (
            MODEL,
            MODEL + "  pricing: {input: 1}\n",
            "Model/fast.spec.pricing.output",
            "required field 'output'",
        ),
        (
            MODEL,
            MODEL + "  pricing: {input: -1, output: 1}\n",
            "Model/fast.spec.pricing.input",
            ">= 0",
        ),
    ],
)
def test_mistakes_are_located(
    errors_of: Errors, tmp_path: Path, old: str, new: str, path: str, words: str
) -> None:
    text = edit(old, new)
    errors = errors_of(write_bundle(tmp_path, text))
    hits = [e for e in errors if e.path == path]
    assert hits, "\n".join(e.render() for e in errors)
    assert words in hits[0].message + (hits[0].suggestion or "")
    assert hits[0].line is not None and hits[0].line >= line_of(text, new.splitlines()[-1][:12])


def test_agent_compaction_model(load: Load, errors_of: Errors, tmp_path: Path) -> None:
    from goondan.bundle.model import AgentCompaction, ObjectRef

    text = edit(AGENT, AGENT + "  compaction: {modelRef: Model/fast}\n")
    bundle = load(write_bundle(tmp_path / "ok", text))
    agent = bundle.local("Agent", "coder")
    assert agent is not None
    assert spec(bundle, "Agent", "coder").compaction == AgentCompaction(ObjectRef("Model", "fast"))
    model = bundle.compaction_model(agent)
    assert model is not None and model.name == "fast"

    text = edit(AGENT, AGENT + "  compaction: {modelRef: Model/tiny}\n")
    errors = errors_of(write_bundle(tmp_path / "bad", text))
    hits = [e for e in errors if e.path == "Agent/coder.spec.compaction.modelRef"]
    assert hits and hits[0].code == "E_CONFIG_REF_NOT_FOUND"


def test_base_package_ships_its_extensions(load: Load, tmp_path: Path) -> None:
    from goondan.bundle import load_bundle

    bundle = load_bundle(write_bundle(tmp_path))  # the real @goondan/base
    names = sorted(r.name for r in bundle.of_kind("Extension") if r.package == "@goondan/base")
    assert names == [
        "context-message",
        "inter-agent-response-format",
        "logging",
        "message-compaction",
        "message-window",
        "required-tools-guard",
        "tool-search",
    ]


def test_connection_tool_policy(tmp_path, load, errors_of):
    from tests.unit.bundle.bundle_testkit import edit, write_bundle

    base = edit(
        "spec:\n  connectorRef: Connector/cli\n",
        'spec:\n  toolPolicy: {deny: ["calc__*"]}\n  connectorRef: Connector/cli\n',
    )
    bundle = load(write_bundle(tmp_path / "ok", base))
    [connection] = [r for r in bundle.of_kind("Connection") if r.package == "__local__"]
    assert connection.spec.tool_policy.deny == ("calc__*",)
    broken = base.replace('deny: ["calc__*"]', 'deny: ["not a tool!"]')
    [error] = errors_of(write_bundle(tmp_path / "bad", broken))
    assert error.path.endswith("spec.toolPolicy.deny[0]")


def test_require_approval(load: Load, tmp_path: Path) -> None:
    text = edit(
        AGENT,
        AGENT + "  toolPolicy:\n    requireApproval: ['bash__*', calc__add]\n"
        "    approvalTimeoutSeconds: 90\n",
    )
    policy = spec(load(write_bundle(tmp_path, text)), "Agent", "coder").tool_policy
    assert policy == ToolPolicySpec(
        require_approval=("bash__*", "calc__add"), approval_timeout_seconds=90.0
    )
