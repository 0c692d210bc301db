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


# The modules the names come from, in the order above.
_MODULES = (
    "goondan.connectors",
    "goondan.delegation",
    "goondan.extensions",
    "goondan.messages",
    "goondan.tools",
    "ipc.error_codes",
    "ipc.tasks",
)

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
    if name not in __all__:
        raise AttributeError(f"module 'goondan' has no attribute {name!r}")
    # The first use of any name binds them all: a program that uses one uses others.
    wanted = set(__all__)
    for module in map(importlib.import_module, _MODULES):
        for found in wanted.intersection(vars(module)):
            globals()[found] = getattr(module, found)
        wanted.difference_update(vars(module))
    return globals()[name]


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
