"""The public API of `goondan`, pinned: a name added, removed or renamed fails here first.

To change the API on purpose, edit PUBLIC (one name a line, sorted) in the same commit.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import goondan

PUBLIC = [
    "Ack",
    "AgentCrashed",
    "AgentNotFound",
    "AgentRuntime",
    "AppendMessage",
    "CircularCall",
    "ConnectorConfigError",
    "ConnectorContext",
    "ConnectorError",
    "ConnectorMessage",
    "ConversationState",
    "DelegateError",
    "DelegateReply",
    "DeliveryFailed",
    "ErrorCode",
    "ErrorDetail",
    "EventNotAcknowledged",
    "EventRefused",
    "ExtensionApi",
    "ExtensionConfigError",
    "ExtensionEvents",
    "ExtensionState",
    "ExtensionTools",
    "InputEvent",
    "Message",
    "MessageEvent",
    "MiddlewareAgents",
    "MiddlewareError",
    "Pending",
    "PendingReply",
    "PipelineRegistry",
    "RemoveMessage",
    "ReplaceMessage",
    "Reply",
    "ReplyFailed",
    "ReplyTimeout",
    "RequestTimeout",
    "RuntimeAgent",
    "RuntimeCall",
    "RuntimeContext",
    "RuntimeInbound",
    "RuntimePrompt",
    "RuntimeReplyTo",
    "RuntimeSwarm",
    "StepMiddleware",
    "StepMiddlewareContext",
    "StepResult",
    "TaskSet",
    "TokenUsage",
    "ToolCall",
    "ToolCallMiddleware",
    "ToolCallMiddlewareContext",
    "ToolCatalogItem",
    "ToolContext",
    "ToolError",
    "ToolErrorInfo",
    "ToolHandler",
    "ToolProgress",
    "ToolResult",
    "ToolSource",
    "TruncateMessages",
    "TurnMiddleware",
    "TurnMiddlewareContext",
    "TurnResult",
    "stringify_properties",
]

# What a connector's `main(ctx)` uses; connectors import it from `goondan`, like tools do.
CONNECTOR_API = [
    "Ack",
    "ConnectorConfigError",
    "ConnectorContext",
    "ConnectorError",
    "ConnectorMessage",
    "ErrorCode",
    "EventNotAcknowledged",
    "EventRefused",
    "PendingReply",
    "Reply",
    "ReplyFailed",
    "ReplyTimeout",
    "TaskSet",
    "stringify_properties",
]

BASE_TOOLS = Path(__file__).resolve().parents[3] / "base_tools"
RUNTIME_PACKAGES = {"goondan", "ipc", "agentproc", "orchestrator"}


def test_all_is_exactly_the_public_api() -> None:
    assert PUBLIC == sorted(PUBLIC)
    assert goondan.__all__ == PUBLIC


def test_every_public_name_is_importable() -> None:
    namespace: dict[str, object] = {}
    exec(f"from goondan import {', '.join(PUBLIC)}", namespace)
    assert all(namespace[name] is getattr(goondan, name) for name in PUBLIC)


def test_no_public_name_is_left_out_of_all() -> None:
    exported = {
        name
        for name, value in vars(goondan).items()
        if not name.startswith("_") and not isinstance(value, ModuleType)
    }
    assert exported == set(PUBLIC)


def runtime_imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, module, names) of each import of goondan or the runtime packages in `path`."""
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in RUNTIME_PACKAGES:
                    found.append((node.lineno, alias.name, []))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in RUNTIME_PACKAGES:
                found.append((node.lineno, node.module, [a.name for a in node.names]))
    return found


def test_base_tools_import_only_the_public_api() -> None:
    files = sorted(BASE_TOOLS.rglob("*.py"))
    assert len(files) > 10  # the scan found the package
    wrong = [
        f"{path.relative_to(BASE_TOOLS.parent)}:{line}: {module} {names}"
        for path in files
        for line, module, names in runtime_imports(path)
        if module != "goondan" or not set(names) <= set(PUBLIC)
    ]
    assert wrong == []


def test_the_connector_api_is_public_and_is_what_connectors_use() -> None:
    assert set(CONNECTOR_API) <= set(PUBLIC)
    used = {
        name
        for path in (BASE_TOOLS / "connectors").glob("*.py")
        for _, _, names in runtime_imports(path)
        for name in names
    }
    assert "ConnectorContext" in used  # the scan found the connectors
    assert used <= set(CONNECTOR_API)


def test_the_scan_sees_a_private_import(tmp_path: Path) -> None:
    tool = tmp_path / "tool.py"
    tool.write_text(
        "from goondan import ToolError\nfrom goondan.paths import StatePaths\nimport ipc.wire\n"
    )
    assert runtime_imports(tool) == [
        (1, "goondan", ["ToolError"]),
        (2, "goondan.paths", ["StatePaths"]),
        (3, "ipc.wire", []),
    ]


def test_version_is_the_installed_distribution() -> None:
    from importlib.metadata import version

    assert goondan.__version__ == version("goondan")
    assert "__version__" not in goondan.__all__


def test_the_cli_prints_the_version() -> None:
    for flag in ("--version", "-V"):
        out = subprocess.run(
            [sys.executable, "-m", "goondan.cli.main", flag],
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip() == f"goondan {goondan.__version__}"


def test_importing_goondan_alone_imports_no_part_of_the_api() -> None:
    # Every CLI command imports goondan; the connector API (and asyncio) come on first use.
    probe = (
        "import sys, goondan; "
        "print(sorted(m for m in ('asyncio', 'goondan.connectors', 'goondan.tools') "
        "if m in sys.modules)); "
        "from goondan import ConnectorContext; "
        "print(ConnectorContext.__module__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    assert out[:2] == ["[]", "goondan.connectors"]
