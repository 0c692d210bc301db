"""goondan: the public API for tool and extension authors.

from goondan import ToolContext, ToolError                 # tools
from goondan import ExtensionApi, StepMiddlewareContext    # extensions
from goondan import ConnectorContext                       # connectors
from goondan import TaskSet                                # background tasks with an owner

`goondan.__version__` is the installed distribution's version.
"""

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


def __getattr__(name: str) -> str:
    # __version__ is looked up on first use: importlib.metadata is slow to import, and every
    # tool and agent process imports goondan.
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("goondan")
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'goondan' has no attribute {name!r}")
