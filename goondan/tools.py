"""The contract between the runtime and tool handlers: context, result, errors.

A Tool resource's entry module defines `handlers = {"export": fn}` where `fn(ctx, input)` is
sync or async and returns JSON-compatible data. Raising `ToolError` (or any exception) gives the
LLM a structured error instead of ending the turn.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec
import structlog


class ToolError(Exception):
    """An error a handler raises on purpose; `code`, `suggestion` and `help_url` reach the LLM."""

    code = "E_TOOL"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        suggestion: str | None = None,
        help_url: str | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.suggestion = suggestion
        self.help_url = help_url


class ToolErrorInfo(msgspec.Struct, frozen=True, omit_defaults=True):
    message: str
    code: str = "E_TOOL"
    name: str | None = None
    suggestion: str | None = None
    help_url: str | None = msgspec.field(default=None, name="helpUrl")


class ToolResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """What the LLM reads as the tool message: the JSON of this struct."""

    status: Literal["ok", "error"]
    output: Any = None
    error: ToolErrorInfo | None = None

    @classmethod
    def ok(cls, output: Any) -> ToolResult:
        return cls("ok", output=output)

    @classmethod
    def fail(cls, error: ToolErrorInfo) -> ToolResult:
        return cls("error", error=error)


class DelegateReply(msgspec.Struct, frozen=True):
    target: str
    response: str
    correlation_id: str
    instance_key: str


class AgentRuntime(Protocol):
    """`ctx.runtime`: talk to the other agents of the swarm, always through the orchestrator."""

    async def request(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
    ) -> DelegateReply:
        """Ask `target` and wait for its reply; raises a `DelegateError` subclass on failure."""
        ...

    def request_async(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
    ) -> str:
        """Send without waiting; returns the correlation id. The answer reaches the
        conversation as an `inter_agent_response` message before a later step."""
        ...

    async def send(self, target: str, input: str, *, instance_key: str | None = None) -> None: ...

    async def spawn(self, target: str, *, instance_key: str | None = None) -> dict[str, Any]:
        """Prepare an instance of an agent of this swarm (its process is started)."""
        ...

    async def list(self, *, include_all: bool = False) -> dict[str, Any]:
        """Instances this instance spawned (`include_all`: every known one)."""
        ...

    def catalog(self) -> dict[str, Any]: ...


class ToolContext:
    """What a handler knows about the call. Nothing else (no bundle, no credentials)."""

    __slots__ = (
        "agent_name",
        "instance_key",
        "turn_id",
        "trace_id",
        "tool_call_id",
        "message",
        "logger",
        "runtime",
        "_workdir",
    )

    def __init__(
        self,
        *,
        agent_name: str,
        instance_key: str,
        turn_id: str,
        trace_id: str,
        tool_call_id: str,
        message: Any,
        workdir: Path,
        logger: structlog.typing.FilteringBoundLogger,
        runtime: AgentRuntime,
    ) -> None:
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.turn_id = turn_id
        self.trace_id = trace_id
        self.tool_call_id = tool_call_id
        self.message = message  # the assistant message holding this call
        self.logger = logger
        self.runtime = runtime
        self._workdir = workdir

    @property
    def workdir(self) -> Path:
        """The instance's workspace, created on first use."""
        self._workdir.mkdir(parents=True, exist_ok=True)
        return self._workdir
