"""goondan: the public API for tool and extension authors.

from goondan import ToolContext, ToolError
"""

from goondan.delegation import (
    AgentCrashed,
    AgentNotFound,
    CircularCall,
    DelegateError,
    DeliveryFailed,
    RequestTimeout,
)
from goondan.tools import AgentRuntime, DelegateReply, ToolContext, ToolError, ToolResult

__all__ = [
    "AgentCrashed",
    "AgentNotFound",
    "AgentRuntime",
    "CircularCall",
    "DelegateError",
    "DelegateReply",
    "DeliveryFailed",
    "RequestTimeout",
    "ToolContext",
    "ToolError",
    "ToolResult",
]
