"""The contract between the runtime and tool handlers: context, result, errors.

A Tool resource's entry module defines `handlers = {"export": fn}` where `fn(ctx, input)` is
sync or async and returns JSON-compatible data (or a `ToolResult`, or a `Pending` for work that
goes on in the background). Raising `ToolError` (or any exception) gives the LLM a structured
error instead of ending the turn. Sync handlers run in a thread, async ones on the agent's loop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import msgspec
import structlog

from ipc.error_codes import ErrorCode


class ToolError(Exception):
    """An error a handler raises on purpose; `code`, `suggestion` and `help_url` reach the LLM."""

    code: str = ErrorCode.E_TOOL

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
    """A tool error as the LLM reads it. `code` defaults to `E_TOOL` (and is always sent)."""

    message: str
    code: str = ""
    name: str | None = None
    suggestion: str | None = None
    help_url: str | None = msgspec.field(default=None, name="helpUrl")

    def __post_init__(self) -> None:
        if not self.code:  # a default of "" keeps `code` on the wire, unlike "E_TOOL" would
            msgspec.structs.force_setattr(self, "code", ErrorCode.E_TOOL)


class ToolResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """The result of one tool call. Two channels, as the best loops keep them:

    - what the LLM reads: `status`, `output` / `error`, and `handle` for a pending call;
    - `details`: structured data for logs, runtime events and extensions (e.g. timings, raw
      responses), never sent to the model.

    A handler may return a `ToolResult` instead of plain JSON data to set `details`, or to
    report an error without raising:

        return ToolResult.ok({"rows": 3}, details={"query": sql, "ms": 12})
    """

    status: Literal["ok", "error", "pending"]
    output: Any = None
    error: ToolErrorInfo | None = None
    handle: str | None = None  # status == "pending": what the completion will refer to
    details: Any = None  # never sent to the LLM

    @classmethod
    def ok(cls, output: Any, *, details: Any = None) -> ToolResult:
        return cls("ok", output=output, details=details)

    @classmethod
    def fail(cls, error: ToolErrorInfo, *, details: Any = None) -> ToolResult:
        return cls("error", error=error, details=details)

    @classmethod
    def pending(cls, handle: str, message: str, *, details: Any = None) -> ToolResult:
        return cls("pending", output=message, handle=handle, details=details)


class Pending:
    """A long-running tool's answer: the work goes on after the handler returns.

    The LLM is told at once that the work was submitted (with a `handle`); when `work`
    finishes, its output (or its exception, as a structured error) reaches the conversation as
    a message before the agent's next step, or its next turn if this one has ended.

        async def build(ctx, args):
            async def work():
                await asyncio.sleep(600)
                return {"artifact": "dist/app.tar.gz"}
            return Pending(work(), message="Build started; the result will follow.")

    `work` is a coroutine (run on the agent's event loop) or a plain callable (run in a
    thread). `handle` defaults to a fresh id.
    """

    __slots__ = ("work", "handle", "message", "details")

    def __init__(
        self,
        work: Awaitable[Any] | Callable[[], Any],
        *,
        handle: str | None = None,
        message: str | None = None,
        details: Any = None,
    ) -> None:
        self.work = work
        self.handle = handle
        self.message = message
        self.details = details


class ToolProgress(msgspec.Struct, frozen=True, omit_defaults=True):
    """One `ctx.update(...)` of a running tool; it becomes a `tool.progress` runtime event."""

    message: str | None = None
    progress: float | None = None  # 0.0 .. 1.0 when the tool knows it
    data: Any = None


class ToolSource(msgspec.Struct, frozen=True):
    """Where a catalog item comes from when it is not plain config: `{type: mcp, name}` for
    the tools of an MCP server declared by the Tool resource `name`."""

    type: Literal["mcp"]
    name: str


class ToolCatalogItem(msgspec.Struct, frozen=True, omit_defaults=True):
    """One entry of a step's Tool Catalog: what the LLM is offered.

    Step middleware may filter, reorder, add or replace items of `ctx.tool_catalog`
    (`msgspec.structs.replace(item, description=...)`). `source` says where it came from.
    """

    name: str  # "{resource}__{export}"
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(
        default_factory=lambda: {"type": "object", "properties": {}}
    )
    source: Literal["config", "extension", "runtime"] | ToolSource = "config"


ToolHandler = Callable[["ToolContext", dict[str, Any]], Any]
"""`fn(ctx, input)`, sync or async, returning JSON data, a `ToolResult` or a `Pending`."""


class DelegateReply(msgspec.Struct, frozen=True):
    target: str
    response: str
    correlation_id: str
    instance_key: str
    event_id: str = ""  # the id of the request sent (the target's `ctx.runtime.inbound.event_id`)


class AgentRuntime(Protocol):
    """`ctx.runtime`: talk to the other agents of the swarm, always through the orchestrator."""

    async def request(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
        event_type: str | None = None,
        metadata: dict[str, Any] | None = None,
        event_id: str | None = None,
    ) -> DelegateReply:
        """Ask `target` and wait for its reply; raises a `DelegateError` subclass on failure.
        `event_type` and `metadata` reach the target as `ctx.runtime.inbound.event_type` /
        `event_metadata`; `event_id` (default: a new one) names the request."""
        ...

    def request_async(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
        event_type: str | None = None,
        metadata: dict[str, Any] | None = None,
        event_id: str | None = None,
    ) -> str:
        """Send without waiting; returns the correlation id. The answer reaches the
        conversation as an `inter_agent_response` message before a later step."""
        ...

    async def send(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        event_type: str | None = None,
        metadata: dict[str, Any] | None = None,
        event_id: str | None = None,
    ) -> str:
        """Notify `target` without waiting; returns the event id."""
        ...

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        """Prepare an instance of an agent of this swarm (its process is started). `cwd`: an
        absolute directory the instance's tools work in instead of its own workspace."""
        ...

    async def list(self, *, include_all: bool = False) -> dict[str, Any]:
        """Instances this instance spawned (`include_all`: every known one)."""
        ...

    def catalog(self) -> dict[str, Any]: ...


class ToolContext:
    """What a handler knows about the call. Nothing else (no bundle, no credentials).

    `update(...)` reports progress while the handler runs (from any thread). `cancelled`
    turns True when the call is cancelled (the turn was cancelled, or the call timed out): an
    async handler is cancelled anyway, but a sync one runs on in its thread until it returns,
    so a long one should look at `ctx.cancelled` now and then and stop early.
    """

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
        "_on_update",
        "_cancelled",
    )

    def __init__(
        self,
        agent_name: str,
        instance_key: str,
        turn_id: str,
        trace_id: str,
        tool_call_id: str,
        message: Any,
        workdir: Path,
        logger: structlog.typing.FilteringBoundLogger,
        runtime: AgentRuntime,
        on_update: Callable[[ToolProgress], None] | None = None,
    ) -> None:
        # Positional too: the runtime builds one per tool call, and a class called with
        # keywords builds a dict of them first.
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.turn_id = turn_id
        self.trace_id = trace_id
        self.tool_call_id = tool_call_id
        self.message = message  # the assistant message holding this call
        self.logger = logger
        self.runtime = runtime
        self._workdir = workdir
        self._on_update = on_update
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        """True once the call is cancelled or timed out; a sync handler should then return."""
        return self._cancelled

    def _cancel(self) -> None:
        """The runtime's: the call is cancelled (set on the agent's loop, read in any thread)."""
        self._cancelled = True

    @property
    def workdir(self) -> Path:
        """The instance's workspace, created on first use."""
        self._workdir.mkdir(parents=True, exist_ok=True)
        return self._workdir

    def update(
        self, message: str | None = None, *, progress: float | None = None, data: Any = None
    ) -> None:
        """Report progress: `ctx.update("3 of 10 files", progress=0.3)`. Safe to call from a
        sync handler's thread; updates after the call has finished are dropped."""
        if self._on_update is not None:
            self._on_update(ToolProgress(message, progress, data))
