"""The neutral message model of the agent loop; provider adapters translate it to their wire."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Role = Literal["system", "user", "assistant", "tool"]


class ToolCall(msgspec.Struct, frozen=True):
    id: str
    name: str
    arguments: str  # the JSON text as the model produced it (may be malformed)


class Message(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # role == "tool": the call this answers
    metadata: dict[str, Any] = {}


class ToolDefinition(msgspec.Struct, frozen=True):
    """One catalog entry as the LLM sees it."""

    name: str
    description: str
    parameters: dict[str, Any]


class Usage(msgspec.Struct, frozen=True):
    input_tokens: int = 0
    output_tokens: int = 0


class ModelRequest(msgspec.Struct, frozen=True):
    messages: list[Message]
    tools: list[ToolDefinition]
    params: dict[str, Any] = {}  # Agent.spec.modelConfig.params (temperature, maxTokens, topP, ...)


class ModelReply(msgspec.Struct, frozen=True):
    text: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str | None = None


class ModelError(Exception):
    """A provider call failed. `retryable` says whether trying again may help (429, 5xx)."""

    def __init__(self, message: str, *, code: str = "E_MODEL", retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable
