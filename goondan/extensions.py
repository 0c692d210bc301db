"""The contract between the runtime and extensions: the `api`, middleware contexts, results.

An Extension resource's entry module defines `register(api, config)` (sync or async). The agent
process calls it once at start, in the order of `Agent.spec.extensions`, with the Extension's
`spec.config` overlaid by the agent's per-ref `config`:

    from goondan import ExtensionApi, StepMiddlewareContext, StepResult

    def register(api: ExtensionApi, config: dict) -> None:
        hidden = set(config.get("hide", []))

        async def hide_tools(ctx: StepMiddlewareContext) -> StepResult:
            ctx.tool_catalog = [t for t in ctx.tool_catalog if t.name not in hidden]
            return await ctx.next()

        api.pipeline.register("step", hide_tools)

Middleware is an onion: `turn` wraps the whole turn, `step` one LLM call and its tool calls,
`toolCall` one tool call. Lower `priority` is outer; equal priorities keep registration order
(so the first extension listed is outermost). Each middleware calls `await ctx.next()` at most
once; not calling it short-circuits the inner layers (a `toolCall` middleware may return its
own `ToolResult`). Raising `ExtensionConfigError` from `register` reports a bad `config`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar

import msgspec
import structlog

from goondan.messages import Message, ToolCall
from goondan.tools import DelegateReply, ToolCatalogItem, ToolHandler, ToolResult

R = TypeVar("R")
MiddlewareKind = Literal["turn", "step", "toolCall"]
FinishReason = Literal["text_response", "max_steps", "error", "budget", "aborted"]


class ExtensionConfigError(Exception):
    """Raise from `register` when `config` is unusable; the agent does not start (E_EXT_CONFIG)."""


class MiddlewareError(Exception):
    """A middleware broke the pipeline contract (called `next()` twice, returned nothing)."""


# -- conversation events ---------------------------------------------------------------------


class AppendMessage(msgspec.Struct, frozen=True):
    message: Message


class ReplaceMessage(msgspec.Struct, frozen=True):
    target_id: str
    message: Message


class RemoveMessage(msgspec.Struct, frozen=True):
    target_id: str


class TruncateMessages(msgspec.Struct, frozen=True):
    pass


MessageEvent = AppendMessage | ReplaceMessage | RemoveMessage | TruncateMessages
"""How middleware changes the conversation: `ctx.emit_message_event(RemoveMessage(m.id))`.
Every event is written to the conversation's event log before the loop moves on."""


class ConversationState(Protocol):
    """`next_messages = base_messages + events`, as upstream Goondan defines it."""

    @property
    def base_messages(self) -> Sequence[Message]:
        """The messages as they were when the turn started."""
        ...

    @property
    def events(self) -> Sequence[MessageEvent]:
        """Every message event of this turn so far, in order."""
        ...

    @property
    def next_messages(self) -> Sequence[Message]:
        """The conversation now (read-only; change it with `emit_message_event`)."""
        ...


# -- results ---------------------------------------------------------------------------------


class TokenUsage(msgspec.Struct, frozen=True, omit_defaults=True):
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None  # when the Model declares `spec.pricing`
    cache_read_tokens: int = 0  # of input_tokens: read from the provider's prompt cache
    cache_creation_tokens: int = 0  # of input_tokens: written to it

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class ErrorDetail(msgspec.Struct, frozen=True, omit_defaults=True):
    code: str
    message: str


class TurnResult(msgspec.Struct, omit_defaults=True):
    """What a turn produced. A `turn` middleware may return a changed copy
    (`msgspec.structs.replace(result, text=...)`)."""

    turn_id: str
    finish_reason: FinishReason
    text: str  # the answer sent back to whoever asked
    steps: int = 0
    usage: TokenUsage = TokenUsage()
    error: ErrorDetail | None = None


class StepResult(msgspec.Struct, omit_defaults=True):
    """What one step produced. A `step` middleware may set `should_continue` after `next()`:
    True keeps the turn going (bounded by `maxStepsPerTurn`), False ends it."""

    status: Literal["completed", "failed"]
    should_continue: bool
    text: str | None = None
    tool_calls: list[ToolCall] = []
    tool_results: list[ToolResult] = []
    usage: TokenUsage = TokenUsage()
    error: ErrorDetail | None = None
    metadata: dict[str, Any] = {}


class InputEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    """What started the turn."""

    input: str
    source: str  # "cli:<name>", "agent:<name>", "connector:<name>"
    instance_key: str
    request_id: str = ""
    metadata: dict[str, Any] = {}


# -- the runtime context (`ctx.runtime`) -----------------------------------------------------


class RuntimePrompt(msgspec.Struct, frozen=True, omit_defaults=True):
    system: str | None = None  # `spec.prompt`, with `systemRef` already read


class RuntimeAgent(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    bundle_root: str
    prompt: RuntimePrompt | None = None  # None: the agent has no prompt


class RuntimeSwarm(msgspec.Struct, frozen=True):
    """The swarm as `agents__catalog` shows it."""

    swarm_name: str
    entry_agent: str
    self_agent: str
    available_agents: tuple[str, ...]
    callable_agents: tuple[str, ...]


class RuntimeInbound(msgspec.Struct, frozen=True, omit_defaults=True):
    """The message that started the turn. `event_type` is a connector's event name, an
    agent's `eventType` (default `agent.request` / `agent.send`), or `cli.request`."""

    event_id: str
    event_type: str
    source_kind: str  # "agent", "cli", "connector", "orchestrator"
    source_name: str
    created_at: str  # ISO 8601, UTC
    instance_key: str
    properties: dict[str, str] = {}  # a connector event's properties
    event_metadata: dict[str, Any] = {}  # the `metadata` an agent sent with it


class RuntimeReplyTo(msgspec.Struct, frozen=True):
    target: str  # the agent waiting for the answer
    correlation_id: str


class RuntimeCall(msgspec.Struct, frozen=True, omit_defaults=True):
    """Set when another agent asked for the turn (`agents__request` / `agents__send`)."""

    caller_agent: str
    caller_instance_key: str | None = None
    caller_turn_id: str | None = None
    call_source: str | None = None  # "request" or "send"
    call_stack: tuple[str, ...] = ()  # the agents the call passed through, oldest first
    reply_to: RuntimeReplyTo | None = None  # None for `send`: nobody waits


class RuntimeContext(msgspec.Struct, frozen=True, omit_defaults=True):
    """`ctx.runtime` in every middleware context: who runs the turn and why (upstream
    Goondan's `ctx.runtime.agent` / `swarm` / `inbound` / `call`)."""

    agent: RuntimeAgent
    swarm: RuntimeSwarm
    inbound: RuntimeInbound
    call: RuntimeCall | None = None


# -- middleware contexts ---------------------------------------------------------------------


class MiddlewareAgents(Protocol):
    """`ctx.agents` in `turn` and `step` middleware: the same routes as `agents__request`."""

    async def request(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
        event_type: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> DelegateReply: ...

    async def send(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        event_type: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str: ...


Layer = Callable[[Any], Awaitable[Any]]


class _Onion(Generic[R]):
    """The `next()` of every middleware context: walks the layers composed once per agent.

    `next()` hands back the inner layer's coroutine rather than awaiting it in a coroutine of
    its own, so that a layer's `await ctx.next()` runs the inner layer itself: one frame per
    layer, not two. Nothing then runs when an inner layer returns, so the context cannot
    count its way back out; instead it keeps the coroutines of the layers it started
    (`_started`, outermost first) and asks them who is calling. The only layer allowed is the
    innermost started, which is running when it calls and has not called yet."""

    __slots__ = ()
    _layers: tuple[Layer, ...]
    _started: list[Any]

    def _start(self) -> Awaitable[R]:
        """The runtime's entry into the outermost layer."""
        outer = self._layers[0](self)
        self._started.append(outer)
        return outer

    def next(self) -> Awaitable[R]:
        """The inner layers (and finally the core), to await for their result; once per
        layer."""
        started = self._started
        if not started[-1].cr_running:  # not from inside the innermost layer started
            self._check_caller()
        inner: Awaitable[R] = self._layers[len(started)](self)
        started.append(inner)
        return inner

    def _check_caller(self) -> None:
        """MiddlewareError unless the caller is the innermost layer started. The caller is the
        innermost layer running; when none is (a call from another task or a callback), the
        innermost one not finished."""
        started = self._started
        running = [depth for depth, coro in enumerate(started) if coro.cr_running]
        if running:
            caller = running[-1]
        else:
            unfinished = [depth for depth, coro in enumerate(started) if coro.cr_frame]
            caller = unfinished[-1] if unfinished else 0
            if caller == len(started) - 1 and unfinished:
                return
        layer = self._layers[caller]
        name = getattr(layer, "__qualname__", repr(layer))
        raise MiddlewareError(f"middleware {name} called ctx.next() more than once")


class TurnMiddlewareContext(_Onion[TurnResult]):
    __slots__ = (
        "_layers",
        "_started",
        "agent_name",
        "instance_key",
        "turn_id",
        "trace_id",
        "input_event",
        "conversation_state",
        "agents",
        "metadata",
        "_emit",
    )

    def __init__(
        self,
        layers: tuple[Layer, ...],
        *,
        agent_name: str,
        instance_key: str,
        turn_id: str,
        trace_id: str,
        input_event: InputEvent,
        conversation_state: ConversationState,
        agents: MiddlewareAgents,
        emit: Callable[[MessageEvent], None],
    ) -> None:
        self._layers, self._started = layers, []
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.turn_id = turn_id
        self.trace_id = trace_id
        self.input_event = input_event
        self.conversation_state = conversation_state
        self.agents = agents
        self.metadata: dict[str, Any] = {}
        self._emit = emit

    def emit_message_event(self, event: MessageEvent) -> None:
        self._emit(event)

    @property
    def runtime(self) -> RuntimeContext:
        """Agent, swarm, inbound message and caller of this turn (set by the agent process)."""
        raise NotImplementedError("ctx.runtime is provided by the agent process")

    async def summarize(self, messages: Sequence[Message]) -> str:
        """A summary of `messages`, written by the agent's model (or its compaction model),
        for an extension that compacts the conversation. Raises when the model call fails."""
        raise NotImplementedError("this context cannot summarise")


class StepMiddlewareContext(_Onion[StepResult]):
    __slots__ = (
        "_layers",
        "_started",
        "agent_name",
        "instance_key",
        "turn_id",
        "trace_id",
        "step_index",
        "conversation_state",
        "agents",
        "tool_catalog",
        "metadata",
        "turn_metadata",
        "_emit",
    )

    def __init__(
        self,
        layers: tuple[Layer, ...],
        *,
        agent_name: str,
        instance_key: str,
        turn_id: str,
        trace_id: str,
        step_index: int,
        conversation_state: ConversationState,
        agents: MiddlewareAgents,
        tool_catalog: list[ToolCatalogItem],
        turn_metadata: dict[str, Any],
        emit: Callable[[MessageEvent], None],
    ) -> None:
        self._layers, self._started = layers, []
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.turn_id = turn_id
        self.trace_id = trace_id
        self.step_index = step_index  # 0-based within the turn
        self.conversation_state = conversation_state
        self.agents = agents
        self.tool_catalog = tool_catalog  # mutable: what the LLM is offered in this step
        self.metadata: dict[str, Any] = {}
        self.turn_metadata = turn_metadata  # the turn context's `metadata`
        self._emit = emit

    def emit_message_event(self, event: MessageEvent) -> None:
        self._emit(event)

    @property
    def runtime(self) -> RuntimeContext:
        """Agent, swarm, inbound message and caller of this turn (set by the agent process)."""
        raise NotImplementedError("ctx.runtime is provided by the agent process")


class ToolCallMiddlewareContext(msgspec.Struct, _Onion[ToolResult]):
    # Built for every tool call, so a Struct: built in C, in under half the time of a class
    # with an `__init__`.
    _layers: tuple[Layer, ...]
    agent_name: str
    instance_key: str
    turn_id: str
    trace_id: str
    step_index: int
    tool_name: str  # "{resource}__{export}"
    tool_call_id: str
    args: dict[str, Any]  # mutable: the handler receives what is here after the outer layers
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)
    _started: list[Any] = msgspec.field(default_factory=list)

    @property
    def runtime(self) -> RuntimeContext:
        """Agent, swarm, inbound message and caller of this turn (set by the agent process)."""
        raise NotImplementedError("ctx.runtime is provided by the agent process")


TurnMiddleware = Callable[[TurnMiddlewareContext], Awaitable[TurnResult]]
StepMiddleware = Callable[[StepMiddlewareContext], Awaitable[StepResult]]
ToolCallMiddleware = Callable[[ToolCallMiddlewareContext], Awaitable[ToolResult]]


# -- the api ---------------------------------------------------------------------------------


class PipelineRegistry(Protocol):
    def register(self, kind: MiddlewareKind, fn: Any, *, priority: int = 0) -> None:
        """Add a `turn`, `step` or `toolCall` middleware (lower priority = outer layer)."""
        ...


class ExtensionTools(Protocol):
    def register(
        self,
        item: ToolCatalogItem | Mapping[str, Any],
        handler: ToolHandler,
        *,
        timeout_ms: int | None = None,
        sequential: bool = False,
        error_message_limit: int = 1000,
    ) -> None:
        """Add a tool to the Registry; it is in the catalog from the next step on. The name
        must be `{extension}__{tool}`; registering a name again replaces the handler."""
        ...


class ExtensionState(Protocol):
    """This extension's JSON object for the current instance; saved at turn end (only when
    set), restored after a restart. Usable inside middleware, tool handlers and event
    handlers (where an instance is current), not in `register`."""

    def get(self) -> dict[str, Any] | None: ...

    def set(self, value: dict[str, Any] | None) -> None: ...


class ExtensionEvents(Protocol):
    """In-process pub/sub. The runtime publishes its events here too (`turn.started`,
    `turn.completed`, `step.*`, `tool.called`, `tool.completed`, `tool.failed`,
    `tool.progress`) with a dict payload. Handler errors are logged, never propagated."""

    def on(self, event: str, handler: Callable[..., Any]) -> Callable[[], None]:
        """Subscribe; returns the function that unsubscribes."""
        ...

    def emit(self, event: str, *args: Any) -> None: ...


class ExtensionApi(Protocol):
    @property
    def name(self) -> str:
        """The Extension resource's name."""
        ...

    @property
    def agent_name(self) -> str: ...

    @property
    def pipeline(self) -> PipelineRegistry: ...

    @property
    def tools(self) -> ExtensionTools: ...

    @property
    def state(self) -> ExtensionState: ...

    @property
    def events(self) -> ExtensionEvents: ...

    @property
    def logger(self) -> structlog.typing.FilteringBoundLogger: ...
