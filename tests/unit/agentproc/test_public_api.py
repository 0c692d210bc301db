"""What tool and extension authors import from `goondan`: kept, and free of the runtime."""

import subprocess
import sys

import goondan

PUBLIC = [
    "AgentCrashed", "AgentNotFound", "AgentRuntime", "AppendMessage", "CircularCall",
    "ConversationState", "DelegateError", "DelegateReply", "DeliveryFailed", "ErrorDetail",
    "ExtensionApi", "ExtensionConfigError", "ExtensionEvents", "ExtensionState",
    "ExtensionTools", "InputEvent", "Message", "MessageEvent", "MiddlewareAgents",
    "MiddlewareError", "Pending", "PipelineRegistry", "RemoveMessage", "ReplaceMessage",
    "RequestTimeout", "StepMiddleware", "StepMiddlewareContext", "StepResult", "TokenUsage",
    "ToolCall", "ToolCallMiddleware", "ToolCallMiddlewareContext", "ToolCatalogItem",
    "ToolContext", "ToolError", "ToolErrorInfo", "ToolHandler", "ToolProgress", "ToolResult",
    "TruncateMessages", "TurnMiddleware", "TurnMiddlewareContext", "TurnResult",
]  # fmt: skip


def test_public_names_are_frozen():
    # the tool and extension surface (connectors export theirs beside it)
    assert set(PUBLIC) <= set(goondan.__all__)
    assert all(hasattr(goondan, name) for name in PUBLIC)


def test_the_public_api_does_not_pull_in_the_runtime():
    code = "import sys, goondan; print(sorted(m for m in sys.modules if m.startswith('agentproc')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_extension_contract_implements_the_protocol():
    from agentproc.extensions import EventBus, ExtensionApiImpl
    from agentproc.middleware import Pipeline
    from agentproc.tool_registry import ToolRegistry

    api: goondan.ExtensionApi = ExtensionApiImpl(
        "x", "agent", Pipeline(), ToolRegistry([]), EventBus()
    )
    assert api.name == "x" and callable(api.pipeline.register)
