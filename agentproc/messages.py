"""The neutral message model of the agent loop; provider adapters translate it to their wire.

`Message` and `ToolCall` are public (tools and extensions see them) and live in
`goondan.messages`; they are re-exported here for the loop and the providers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from goondan.messages import Message, Role, ToolCall
from ipc.error_codes import ErrorCode

__all__ = [
    "Message",
    "ModelError",
    "ModelReply",
    "ModelRequest",
    "Role",
    "ToolCall",
    "ToolDefinition",
    "Usage",
]


class ToolDefinition(msgspec.Struct, frozen=True):
    """One catalog entry as the LLM sees it."""

    name: str
    description: str
    parameters: dict[str, Any]


class Usage(msgspec.Struct, frozen=True):
    input_tokens: int = 0  # all of the prompt, cached parts included
    output_tokens: int = 0
    cache_read_tokens: int = 0  # of input_tokens: read from the provider's prompt cache
    cache_creation_tokens: int = 0  # of input_tokens: written to it


class ModelRequest(msgspec.Struct, frozen=True):
    messages: list[Message]
    tools: list[ToolDefinition]
    params: dict[str, Any] = {}  # Agent.spec.modelConfig.params (temperature, maxTokens, topP, ...)


class ModelReply(msgspec.Struct, frozen=True):
    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str | None = None
    # What only the provider that produced the reply reads back on later requests (Gemini's
    # thought signatures, Anthropic's thinking blocks), keyed by provider; the loop keeps it in
    # the assistant message's metadata under "providerState".
    provider_state: dict[str, Any] = {}


class ModelError(Exception):
    """A provider call failed. `retryable` says whether trying again may help (429, 5xx)."""

    def __init__(
        self, message: str, *, code: str = ErrorCode.E_MODEL, retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable
