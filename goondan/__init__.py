"""goondan: the public API for tool and extension authors.

from goondan import ToolContext, ToolError                 # tools
from goondan import ExtensionApi, StepMiddlewareContext    # extensions
from goondan import ConnectorContext                       # connectors
from goondan import TaskSet                                # background tasks with an owner

`goondan.__version__` is the installed distribution's version.

The names are imported on first use (PEP 562): `import goondan` alone, as every CLI command
does, does not import the connector API and asyncio with it (~75 ms of a command's start).
"""

import importlib
import typing

if typing.TYPE_CHECKING:  # what each name is, for type checkers and editors
    from goondan.connectors import (
        Ack,
        ConnectorConfigError,
        ConnectorContext,
        ConnectorError,
        ConnectorMessage,
        EventNotAcknowledged,
        EventRefused,
        PendingReply,
        Reply,
        ReplyFailed,
        ReplyTimeout,
        stringify_properties,
    )
    from goondan.delegation import (
        AgentCrashed,
        AgentNotFound,
        CircularCall,
        DelegateError,
        DeliveryFailed,
        RequestTimeout,
    )
    from goondan.extensions import (
        AppendMessage,
        ConversationState,
        ErrorDetail,
        ExtensionApi,
        ExtensionConfigError,
        ExtensionEvents,
        ExtensionState,
        ExtensionTools,
        InputEvent,
        MessageEvent,
        MiddlewareAgents,
        MiddlewareError,
        PipelineRegistry,
        RemoveMessage,
        ReplaceMessage,
        RuntimeAgent,
        RuntimeCall,
        RuntimeContext,
        RuntimeInbound,
        RuntimePrompt,
        RuntimeReplyTo,
        RuntimeSwarm,
        StepMiddleware,
        StepMiddlewareContext,
        StepResult,
        TokenUsage,
        ToolCallMiddleware,
        ToolCallMiddlewareContext,
        TruncateMessages,
        TurnMiddleware,
        TurnMiddlewareContext,
        TurnResult,
    )
    from goondan.messages import Message, ToolCall
    from goondan.tools import (
        AgentRuntime,
        DelegateReply,
        Pending,
        ToolCatalogItem,
        ToolContext,
        ToolError,
        ToolErrorInfo,
        ToolHandler,
        ToolProgress,
        ToolResult,
        ToolSource,
    )
    from ipc.error_codes import ErrorCode
    from ipc.tasks import TaskSet


# Where each name lives, for `__getattr__`.
_HOMES: dict[str, tuple[str, ...]] = {
    "goondan.connectors": (
        "Ack",
        "ConnectorConfigError",
        "ConnectorContext",
        "ConnectorError",
        "ConnectorMessage",
        "EventNotAcknowledged",
        "EventRefused",
        "PendingReply",
        "Reply",
        "ReplyFailed",
        "ReplyTimeout",
        "stringify_properties",
    ),
    "goondan.delegation": (
        "AgentCrashed",
        "AgentNotFound",
        "CircularCall",
        "DelegateError",
        "DeliveryFailed",
        "RequestTimeout",
    ),
    "goondan.extensions": (
        "AppendMessage",
        "ConversationState",
        "ErrorDetail",
        "ExtensionApi",
        "ExtensionConfigError",
        "ExtensionEvents",
        "ExtensionState",
        "ExtensionTools",
        "InputEvent",
        "MessageEvent",
        "MiddlewareAgents",
        "MiddlewareError",
        "PipelineRegistry",
        "RemoveMessage",
        "ReplaceMessage",
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
        "TokenUsage",
        "ToolCallMiddleware",
        "ToolCallMiddlewareContext",
        "TruncateMessages",
        "TurnMiddleware",
        "TurnMiddlewareContext",
        "TurnResult",
    ),
    "goondan.messages": ("Message", "ToolCall"),
    "goondan.tools": (
        "AgentRuntime",
        "DelegateReply",
        "Pending",
        "ToolCatalogItem",
        "ToolContext",
        "ToolError",
        "ToolErrorInfo",
        "ToolHandler",
        "ToolProgress",
        "ToolResult",
        "ToolSource",
    ),
    "ipc.error_codes": ("ErrorCode",),
    "ipc.tasks": ("TaskSet",),
}
_HOME = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
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


__version__: str  # by __getattr__


def __getattr__(name: str) -> object:
    # __version__ too is looked up on first use: importlib.metadata is slow to import.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("goondan")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'goondan' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
