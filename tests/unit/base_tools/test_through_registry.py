"""The base tools as an agent gets them: a bundle referencing @goondan/base, the Tool Registry
built from its resources, and calls through the executor (schemas validate the arguments)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentproc.messages import ToolCall
from agentproc.tool_executor import execute_tool_call
from agentproc.tool_registry import ToolRegistry
from goondan.bundle import load_bundle
from goondan.bundle.model import Resource
from tests.unit.base_tools.conftest import make_ctx

BASE_TOOLS = {
    "bash": ["exec", "script"],
    "wait": ["seconds"],
    "file-system": ["read", "write", "list", "mkdir"],
    "agents": ["request", "send", "catalog"],  # not ours: checked as "at least these"
    "self-restart": ["request"],
    "http-fetch": ["get", "post"],
    "json-query": ["query", "pick", "count", "flatten"],
    "text-transform": ["replace", "slice", "split", "join", "trim", "case"],
    "telegram": ["send", "edit", "delete", "react", "setChatAction", "downloadFile"],
    "slack": ["send", "read", "edit", "delete", "react", "downloadFile"],
}

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: tools-test
spec:
  version: "0.1.0"
  dependencies:
    - name: "@goondan/base"
      version: "*"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: fast
spec:
  provider: scripted
  model: scripted-v1
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: worker
spec:
  modelConfig:
    modelRef: "Model/fast"
  tools:
    - ref: {kind: Tool, name: file-system, package: "@goondan/base"}
{more}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: "Agent/worker"
  agents:
    - ref: "Agent/worker"
"""


def agent_tools(tmp_path: Path, names: list[str]) -> list[Resource]:
    more = "\n".join(
        f'    - ref: {{kind: Tool, name: {name}, package: "@goondan/base"}}' for name in names
    )
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "goondan.yaml").write_text(BUNDLE.replace("{more}", more), encoding="utf-8")
    bundle = load_bundle(root)
    worker = bundle.local("Agent", "worker")
    assert worker is not None
    return bundle.agent_tools(worker)


@pytest.fixture
def registry(tmp_path: Path) -> ToolRegistry:
    others = [name for name in BASE_TOOLS if name != "file-system"]
    return ToolRegistry.from_resources(agent_tools(tmp_path, others))


async def call(registry: ToolRegistry, workdir: Path, name: str, args: dict[str, Any]):  # noqa: ANN201
    return await execute_tool_call(
        registry,
        registry.names(),
        ToolCall("c1", name, json.dumps(args)),
        lambda c: make_ctx(workdir),
    )


def test_every_export_is_registered_with_a_valid_llm_name(registry: ToolRegistry) -> None:
    expected = {f"{tool}__{export}" for tool, exports in BASE_TOOLS.items() for export in exports}
    assert expected <= set(registry.names())
    assert {name for name in registry.names() if not name.startswith("agents__")} == {
        name for name in expected if not name.startswith("agents__")
    }


def test_every_schema_is_closed_and_described(registry: ToolRegistry) -> None:
    for name in registry.names():
        entry = registry.get(name)
        assert entry is not None and entry.description.strip(), name
        schema = entry.parameters
        assert schema["type"] == "object" and schema["additionalProperties"] is False, name
        for prop, spec in schema["properties"].items():
            assert spec.get("description", "").strip(), f"{name}.{prop} has no description"
        assert set(schema.get("required", [])) <= set(schema["properties"]), name


def test_error_message_limits(registry: ToolRegistry) -> None:
    limits = {
        name.split("__")[0]: registry.get(name).error_message_limit  # type: ignore[union-attr]
        for name in registry.names()
    }
    assert (limits["bash"], limits["file-system"], limits["wait"], limits["agents"]) == (
        1200,
        2000,
        600,
        1500,
    )


async def test_file_system_through_the_executor(registry: ToolRegistry, workdir: Path) -> None:
    written = await call(
        registry, workdir, "file-system__write", {"path": "a/b.txt", "content": "hi"}
    )
    assert written.status == "ok" and written.output["written"] is True
    read = await call(registry, workdir, "file-system__read", {"path": "a/b.txt"})
    assert read.output["content"] == "hi"
    escape = await call(registry, workdir, "file-system__read", {"path": "../../etc/passwd"})
    assert escape.status == "error" and escape.error.code == "E_PATH_OUTSIDE_WORKDIR"
    assert escape.error.suggestion and len(escape.error.message) <= 2000


@pytest.mark.parametrize(
    "name, args, problem",
    [
        ("file-system__read", {}, "path"),
        ("file-system__read", {"path": "x", "extra": 1}, "extra"),
        ("file-system__read", {"path": "x", "maxBytes": 0}, "maxBytes"),
        ("bash__exec", {"command": "true", "timeoutMs": "soon"}, "timeoutMs"),
        ("bash__exec", {"command": "true", "env": {"A": [1]}}, "env"),
        ("wait__seconds", {"seconds": 301}, "seconds"),
        ("text-transform__case", {"text": "x", "to": "title"}, "to"),
        ("telegram__send", {"chatId": 1.5, "text": "x"}, "chatId"),
        ("slack__read", {"channelId": "C1", "limit": 5000}, "limit"),
        ("http-fetch__get", {"url": "http://x", "maxBytes": -1}, "maxBytes"),
    ],
)
async def test_schemas_reject_bad_arguments(
    registry: ToolRegistry, workdir: Path, name: str, args: dict[str, Any], problem: str
) -> None:
    result = await call(registry, workdir, name, args)
    assert result.status == "error" and result.error.code == "E_TOOL_INVALID_ARGS", result
    assert problem in result.error.message + (result.error.suggestion or "")


async def test_each_kind_of_tool_runs_through_the_executor(
    registry: ToolRegistry, workdir: Path
) -> None:
    assert (await call(registry, workdir, "bash__exec", {"command": "echo ok"})).output[
        "stdout"
    ] == "ok\n"
    assert (await call(registry, workdir, "wait__seconds", {"seconds": 0})).output["waitedMs"] == 0
    assert (await call(registry, workdir, "self-restart__request", {})).output[
        "restartRequested"
    ] is True
    assert (await call(registry, workdir, "json-query__count", {"data": "[1,2]"})).output[
        "count"
    ] == 2
    assert (await call(registry, workdir, "text-transform__trim", {"text": " x "})).output[
        "result"
    ] == "x"
    blocked = await call(registry, workdir, "http-fetch__get", {"url": "http://127.0.0.1:9/"})
    assert blocked.status == "error" and blocked.error.code == "E_HTTP_BLOCKED"
    no_token = await call(registry, workdir, "telegram__send", {"chatId": 42, "text": "x"})
    assert no_token.error.code == "E_TOKEN_MISSING"
    no_token = await call(registry, workdir, "slack__send", {"channelId": "C1", "text": "x"})
    assert no_token.error.code == "E_TOKEN_MISSING"
