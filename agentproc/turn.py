"""One Turn: the input, then Steps (LLM call -> tool calls -> results) until the model answers
without tool calls, a step middleware ends it, or a limit is reached.

    turn middleware (onion) -> core turn: for each step
        inbox -> limits -> catalog -> step middleware (onion) -> core step (`step.py`):
            LLM call -> classify the reply -> tool calls (`tool_calls.py`) -> results
            -> its outcome, applied by the turn (`TurnRun.apply`) -> a `StepResult`

The turn's state and the outcomes its parts report are in `turn_state.py`.

`finishReason`: `text_response` (the model answered), `max_steps` (`maxStepsPerTurn`),
`budget` (time, tokens or cost of `policy.budget`), `error` (the model failed, kept producing
malformed output, or looped on a tool), `aborted` (the turn was cancelled). Every message is
written to the conversation's event log before the loop moves on; runtime events
(`turn.*`, `step.*`, `tool.*`) go to the agent's `runtime-events.jsonl`.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import msgspec
import structlog

from agentproc.approvals import ApprovalWaits
from agentproc.budgets import TurnBudget, UsageMeter
from agentproc.catalog import CatalogBuilder, ToolPolicy
from agentproc.conversation import Conversation
from agentproc.deadlines import Deadline, Deadlines
from agentproc.extension_state import current_state
from agentproc.extensions import EventBus
from agentproc.instance import Instance
from agentproc.loop_guard import LoopGuard
from agentproc.messages import Message, ModelReply, ToolCall, Usage
from agentproc.middleware import Pipeline
from agentproc.plain_turn import FirstCall, can_run_plain, run_plain_turn
from agentproc.providers import Provider
from agentproc.runtime_context import runtime_context
from agentproc.runtime_events import new_turn_id
from agentproc.step import run_step
from agentproc.tool_calls import restart_requested, result_message, resume_parked
from agentproc.tool_executor import ToolExecutor
from agentproc.tool_jobs import POLL_TOOL, current_jobs, poll_entry
from agentproc.tool_registry import ToolRegistry
from agentproc.tracing import current_span
from agentproc.turn_state import (
    ConversationView,
    StepCtx,
    StepOutcome,
    TurnCtx,
    TurnState,
    input_message,
    turn_ended,
    turn_started,
    turn_tracer,
)
from goondan.bundle.model import BudgetPolicy, LoopDetectionPolicy, ModelPricing, ToolPolicySpec
from goondan.extensions import (
    AppendMessage,
    ErrorDetail,
    FinishReason,
    InputEvent,
    Layer,
    MessageEvent,
    MiddlewareError,
    RemoveMessage,
    ReplaceMessage,
    RuntimeContext,
    StepResult,
    TokenUsage,
    TruncateMessages,
    TurnResult,
)
from goondan.logs import log_context
from goondan.paths import StorageError
from goondan.settings import DEFAULTS, AgentSettings
from goondan.tools import AgentRuntime, ToolResult
from ipc.error_codes import ErrorCode

if TYPE_CHECKING:  # their modules load SDKs: imported only by agents that use them
    from agentproc.mcp_tools import McpTools
    from agentproc.span_export import SpanSink


@dataclass
class AgentDefinition:
    """Everything about this agent that does not change between turns."""

    name: str
    provider: Provider
    registry: ToolRegistry
    system_prompt: str | None
    params: dict[str, object]
    max_steps: int
    pipeline: Pipeline = field(default_factory=Pipeline)
    policy: ToolPolicy = field(default_factory=ToolPolicy)
    budget: BudgetPolicy = BudgetPolicy()
    loop_detection: LoopDetectionPolicy = LoopDetectionPolicy()
    pricing: ModelPricing | None = None
    bus: EventBus | None = None
    bundle_root: str = ""  # for `ctx.runtime.agent`
    compaction_provider: Provider | None = None  # writes summaries; None: `provider` does
    approvals: ApprovalWaits | None = None  # set by the agent process (`agentproc.approvals`)
    settings: AgentSettings = DEFAULTS.agent  # tool threads and time limits
    mcp: McpTools | None = None  # the MCP servers of its Tools, closed with the agent
    spans: SpanSink | None = None  # OpenTelemetry export, when the orchestrator asked for it
    executor: ToolExecutor = field(init=False)
    catalog: CatalogBuilder = field(init=False)
    deadlines: Deadlines = field(init=False)  # of this agent's running turns
    prefix: list[Message] = field(init=False)  # what every model request starts with

    def __post_init__(self) -> None:
        system = self.system_prompt
        self.prefix = [Message(id="system", role="system", content=system)] if system else []
        self.executor = ToolExecutor(
            self.registry,
            default_timeout_ms=self.settings.tool_timeout_ms,
            threads=self.settings.tool_threads,
            max_abandoned=self.settings.max_abandoned_threads,
        )
        self.catalog = CatalogBuilder(self.registry, self.policy)
        self.deadlines = Deadlines()
        if self.registry.get(POLL_TOOL) is None:
            self.registry.register(poll_entry())


def _turn_policy(agent_policy: ToolPolicy, connection_policy: Any) -> ToolPolicy:
    """The agent's tool policy, narrowed by the Connection's when the turn came through one."""
    if not isinstance(connection_policy, dict):
        return agent_policy
    spec = msgspec.convert(connection_policy, ToolPolicySpec)
    return agent_policy.narrowed(spec)


# (kind, text, data): "text" chunks of a streaming model, "progress" of a tool.
UpdateSink: TypeAlias = Callable[[str, str | None, dict[str, Any]], None]


class TurnInput(msgspec.Struct, frozen=True):
    input: str
    instance_key: str
    trace_id: str
    source: str  # "cli:<name>", "agent:<name>", ...
    request_id: str = ""
    parent_span_id: str | None = None  # the caller's tool span, for a delegated turn
    metadata: dict[str, Any] = {}
    call_chain: tuple[str, ...] = ()  # the agents a delegated request passed through


class Replay(msgspec.Struct, frozen=True):
    """A request seen before: its turn's final answer, or None if the turn never finished.
    `superseded`: unfinished, and other requests' turns came after it (the instance went on
    while this one waited for its redelivery), so it cannot resume where it stopped."""

    answer: str | None
    superseded: bool = False


def find_request(conversation: Conversation, request_id: str) -> Replay | None:
    """Whether this conversation already holds the turn of `request_id` (a redelivery)."""
    index = conversation.request_position(request_id) if request_id else None
    if index is None:
        return None
    rest = conversation.messages[index + 1 :]
    turn = rest[: next((i for i, m in enumerate(rest) if m.role == "user"), len(rest))]
    last = turn[-1] if turn else None
    if last is not None and last.role == "assistant" and not last.tool_calls:
        return Replay(last.content or "")
    later = any(
        m.role == "user" and m.metadata.get("requestId") not in (None, request_id)
        for m in rest[len(turn) :]
    )
    return Replay(None, superseded=later)


class TurnCancel:
    """A handle on a running turn, for `goondan cancel`: `cancel()` cancels the task running
    it, and the turn, telling that cancel from a shutdown's or a deadline's by `requested`,
    ends as cancelled (`E_TURN_CANCELLED`) instead of propagating it."""

    __slots__ = ("task", "requested")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.requested = False

    def cancel(self) -> None:
        if not self.requested:
            self.requested = True
            self.task.cancel()


CANCELLED_TEXT = "The turn was cancelled before it finished."


class TurnOutcome(msgspec.Struct, frozen=True):
    text: str
    finish_reason: FinishReason
    steps: int
    usage: Usage
    error_code: str | None = None  # set when the turn did not finish normally
    restart_reason: str | None = None  # a tool asked for a swarm restart (self-restart)
    cost_usd: float | None = None  # when the Model declares pricing


async def run_turn(
    agent: AgentDefinition,
    instance: Instance,
    turn_input: TurnInput,
    runtime: AgentRuntime,
    workdir: Path,
    *,
    resume: bool = False,
    updates: UpdateSink | None = None,
    cancel: TurnCancel | None = None,
) -> TurnOutcome:
    """Run one turn. With `resume`, the input is already in the conversation (a redelivered
    request whose turn was cut short): continue from where it stopped. Messages that arrived
    in the instance's inbox join the conversation before each step. `cancel`, when given, is
    the handle that may cancel it (see `TurnCancel`). A plain turn (`plain_turn.py`) runs
    apart until its reply needs more than a text answer; this turn then takes it over."""
    turn_id = new_turn_id()
    # Every log line of the turn (extensions' and tools' too) names the instance and trace.
    logged = log_context.set(
        {"instanceKey": turn_input.instance_key, "traceId": turn_input.trace_id, "turnId": turn_id}
    )
    try:
        first: FirstCall | None = None
        if can_run_plain(agent, instance, turn_input, resume):
            plain = await run_plain_turn(agent, instance, turn_input, turn_id, updates)
            if isinstance(plain, TurnResult):
                return outcome_of(plain, None)
            first = plain
        run = TurnRun(agent, instance, turn_input, runtime, workdir, updates, first, turn_id)
        run.cancel = cancel
        tokens = (
            current_state.set(instance.state),
            current_jobs.set(instance.jobs),
            current_span.set(run.tracer.turn_span),
        )
        try:
            return await run.run(resume)
        finally:
            current_span.reset(tokens[2])
            current_jobs.reset(tokens[1])
            current_state.reset(tokens[0])
    finally:
        log_context.reset(logged)


class TurnRun:
    """One running turn: what it was given, what it has done (`TurnState`, which only this
    class changes), and the loop. Steps and tool calls read it, write messages through it,
    and report what they did as outcomes it applies (`replied`, `write_result`, `apply`)."""

    def __init__(
        self,
        agent: AgentDefinition,
        instance: Instance,
        turn_input: TurnInput,
        runtime: AgentRuntime,
        workdir: Path,
        updates: UpdateSink | None = None,
        first: FirstCall | None = None,
        turn_id: str | None = None,
    ) -> None:
        self.agent = agent
        self.updates = updates  # streamed text and tool progress, for whoever waits
        connection_policy = turn_input.metadata.get("toolPolicy")
        self.policy = (
            agent.policy
            if connection_policy is None
            else _turn_policy(agent.policy, connection_policy)
        )
        self.instance = instance
        self.conversation = instance.conversation
        self.input = turn_input
        self.runtime = runtime  # ctx.agents: `request` / `send`, with this turn's call chain
        self.workdir = workdir
        self.first = first  # a plain turn's first call, taken over (`plain_turn.py`)
        if first is None:  # `turn_id`: the one `run_turn` logs with
            self.tracer = turn_tracer(agent, instance, turn_input, turn_id or new_turn_id())
        else:
            self.tracer = first.tracer
        self.turn_id = self.tracer.turn_id

        self.state = TurnState()
        self.meter = UsageMeter(agent.pricing)
        self.budget = TurnBudget(agent.budget)
        self._watched: Deadline | None = None  # the turn's time budget, while it runs
        self._paused = 0  # calls waiting for a human: the budget stops meanwhile
        self._paused_at = 0.0
        self.message_events: list[MessageEvent] = []
        base = list(self.conversation.messages)
        self._seq = 0
        if first is not None:  # the plain turn appended the input, as `run` would have
            self.message_events.append(AppendMessage(base.pop()))
            self._seq = 1
        self.view = ConversationView(self.conversation, self.message_events, base)
        self.metadata: dict[str, Any] = {}
        self.cancel: TurnCancel | None = None

    # -- the turn ------------------------------------------------------------------------------

    async def run(self, resume: bool) -> TurnOutcome:
        first = self.first
        cancel = self.cancel
        if first is not None:  # the plain turn did all this before its call
            started, cancelling = first.started, first.cancelling
        else:
            started = time.monotonic()
            cancelling = cancel.task.cancelling() if cancel is not None else 0
            if not resume:
                user = input_message(self.input, self.next_id())
                # Written with the turn's next change: until then a crash loses nothing the
                # orchestrator would not deliver again.
                self.conversation.append(user, hold=True)
                self.message_events.append(AppendMessage(user))
            self.flush_inbox()
            turn_started(self.tracer, self.input, resume)
        layers = self.agent.pipeline.chain("turn", _turn_core)
        try:
            if resume:  # calls that waited for approval when the agent stopped run now
                await resume_parked(self)
            if len(layers) == 1:  # no turn middleware: no context object to build
                result = await self.core_turn()
            else:
                result = await self._turn_ctx(layers)._start()
            if not isinstance(result, TurnResult):
                raise MiddlewareError(
                    f"turn middleware returned {type(result).__name__}, not a TurnResult"
                )
        except asyncio.CancelledError:
            if cancel is None or not cancel.requested or cancel.task.uncancel() > cancelling:
                self.conversation.flush()
                self.instance.end_turn()
                turn_ended(self.tracer, "turn.failed", self.result("aborted", ""), started)
                raise
            # Cancelled on request: the tool calls have their E_TOOL_CANCELLED results by now;
            # the conversation says the turn stopped, and the requester hears why.
            self.log.info("turn cancelled")
            self.append(
                Message(
                    id=self.next_id(),
                    role="assistant",
                    content=CANCELLED_TEXT,
                    metadata={"__goondanCancelled": True},
                )
            )
            result = self.result(
                "aborted", CANCELLED_TEXT, ErrorDetail(ErrorCode.E_TURN_CANCELLED, CANCELLED_TEXT)
            )
        except StorageError as exc:
            # The disk refused a write: not a bug in the loop. The agent answers with the
            # storage error's code and reloads the instance from the disk (`_run_job` in
            # `agentproc/process.py`), so nothing of this turn lives on in memory alone.
            error = ErrorDetail(exc.code, str(exc))
            turn_ended(self.tracer, "turn.failed", self.result("error", str(exc), error), started)
            raise
        except Exception as exc:  # a bug in middleware or the loop: an answer, not a crash
            self.log.exception("turn failed")
            message = f"The turn failed: {type(exc).__name__}: {exc}"
            result = self.result("error", message, ErrorDetail(ErrorCode.E_TURN_FAILED, message))
        self.conversation.flush()
        self.instance.end_turn()
        ok = result.finish_reason in ("text_response", "max_steps")
        turn_ended(self.tracer, "turn.completed" if ok else "turn.failed", result, started)
        return outcome_of(result, self.state.restart_reason)

    async def core_turn(self) -> TurnResult:
        """The innermost turn layer: the steps, within the turn's time budget."""
        deadline = self.budget.deadline
        if deadline is None:
            return await self._steps()
        task = asyncio.current_task()
        assert task is not None
        first = self.first
        if first is None:
            cancelling = task.cancelling()
            self._watched = self.agent.deadlines.watch(task, deadline)
        else:  # watched since the plain turn began (the same budget)
            cancelling = first.cancelling
            assert first.watched is not None
            self._watched = first.watched
        try:
            return await self._steps()
        except asyncio.CancelledError:
            if not self._watched.expired or task.uncancel() > cancelling:
                raise  # not ours, or someone else cancelled too
            notice = self.budget.time_message()
            self.log.warning(
                "turn stopped: out of time", seconds=self.agent.budget.max_turn_seconds
            )
            return self._stop_for_budget(notice)
        finally:
            self.agent.deadlines.end(self._watched)
            self._watched = None

    def pause_budget(self) -> None:
        """A call waits for a human (`requireApproval`): the turn's time budget stops running
        until `resume_budget`, so an approval can take as long as its own time limit."""
        self._paused += 1
        if self._paused == 1 and self._watched is not None:
            self.agent.deadlines.end(self._watched)
            self._paused_at = time.monotonic()

    def resume_budget(self) -> None:
        self._paused -= 1
        watched = self._watched
        if self._paused == 0 and watched is not None:
            waited = time.monotonic() - self._paused_at
            self._watched = self.agent.deadlines.watch(watched.task, watched.when + waited)

    async def _steps(self) -> TurnResult:
        agent = self.agent
        state = self.state
        while True:
            if self.first is None:  # else a plain turn's first step, checked before its call
                stopped = await self._before_step()
                if stopped is not None:
                    return stopped
            runtime_tools = frozenset({POLL_TOOL}) if self.instance.jobs.has_open() else frozenset()
            ctx = StepCtx(
                agent.pipeline.chain("step", run_step),
                agent_name=agent.name,
                instance_key=self.input.instance_key,
                turn_id=self.turn_id,
                trace_id=self.input.trace_id,
                step_index=state.steps,
                conversation_state=self.view,
                agents=self.runtime,
                tool_catalog=agent.catalog.build(runtime_tools),
                turn_metadata=self.metadata,
                emit=self.emit,
            )
            ctx.run = self
            state.steps += 1
            step = await ctx._start()  # the step middleware, around `run_step`
            if state.stop is not None:
                message = state.stop.message
                self.append(Message(id=self.next_id(), role="assistant", content=message))
                return self.result("error", message, ErrorDetail(state.stop.code, message))
            if step.status == "failed":
                error = step.error or ErrorDetail(ErrorCode.E_STEP_FAILED, "the step failed")
                # The requester gets the code beside this text: not in it a second time.
                text = f"The model call failed: {error.message}"
                self.append(Message(id=self.next_id(), role="assistant", content=text))
                return self.result("error", text, ErrorDetail(error.code, text))
            if not step.should_continue:
                return self.result("text_response", step.text or state.last_text)

    async def _before_step(self) -> TurnResult | None:
        """New messages join; the turn's end, if a limit is reached."""
        agent = self.agent
        state = self.state
        self.flush_inbox()
        if state.steps >= agent.max_steps:
            self.log.warning("turn stopped at the step limit", steps=agent.max_steps)
            text = state.last_text or (f"Reached the step limit ({agent.max_steps}) for this turn.")
            return self.result("max_steps", text)
        over = self.budget.exceeded(self.meter)
        if over is not None:
            self.log.warning("turn stopped: over budget", reason=over)
            return self._stop_for_budget(over)
        if agent.registry.refreshing:  # an MCP server changed its tools
            await agent.registry.settle()
        return None

    # -- what a step reports -------------------------------------------------------------------

    def replied(self, reply: ModelReply) -> TokenUsage:
        """The model answered: its tokens count and its text is the turn's latest at once,
        before any tool runs. Returns the reply's usage."""
        if reply.text and reply.text.strip():
            self.state.last_text = reply.text
        return self.meter.add(reply.usage)

    def write_result(self, call: ToolCall, result: ToolResult) -> None:
        """A tool call's result joins the conversation; a restart it asks for is noted now."""
        self.append(result_message(self.next_id(), call, result))
        if result.status == "ok":
            self.state.restart_reason = restart_requested(result) or self.state.restart_reason

    def apply(self, outcome: StepOutcome) -> StepResult:
        """The end of a step (`step.py`): what it did, applied to the turn, as the
        `StepResult` the step middleware sees."""
        if outcome.error is not None:
            return StepResult("failed", False, error=outcome.error)
        state = self.state
        tools = outcome.tools
        if tools is not None:
            if tools.stop is not None:
                state.halt(tools.stop)
            if tools.warnings:
                self.append(
                    Message(
                        id=self.next_id(),
                        role="user",
                        content="\n".join(tools.warnings),
                        metadata={"__goondanLoopDetection": True},
                    )
                )
        correction = outcome.correction
        if correction is None:
            state.steady()
        elif not state.corrected(correction.kind):
            self.log.warning("turn ended: the model kept failing", kind=correction.kind)
            state.halt(correction.stop)
        else:
            self.append(
                Message(
                    id=self.next_id(),
                    role="user",
                    content=correction.text,
                    metadata={"__goondanCorrection": correction.kind},
                )
            )
        return StepResult(
            "completed",
            outcome.continues and state.stop is None,
            text=outcome.text,
            tool_calls=outcome.tool_calls,
            tool_results=tools.results if tools is not None else [],
            usage=outcome.usage,
        )

    # -- messages ------------------------------------------------------------------------------

    def take_first_call(self) -> FirstCall | None:
        """The plain turn's model call, for the first step to take over (once)."""
        first, self.first = self.first, None
        return first

    def next_id(self) -> str:
        self._seq += 1
        return f"{self.turn_id}-{self._seq}"

    def append(self, message: Message) -> None:
        self.conversation.append(message)
        self.message_events.append(AppendMessage(message))

    def emit(self, event: MessageEvent) -> None:
        """`ctx.emit_message_event`: every change is written to the event log first."""
        if isinstance(event, AppendMessage):
            self.append(event.message)
            return
        if isinstance(event, ReplaceMessage):
            found = self.conversation.replace(event.target_id, event.message)
        elif isinstance(event, RemoveMessage):
            found = self.conversation.remove(event.target_id)
        elif isinstance(event, TruncateMessages):
            self.conversation.truncate()
            found = True
        else:
            raise TypeError(
                f"not a message event: {type(event).__name__} (use AppendMessage, "
                "ReplaceMessage, RemoveMessage or TruncateMessages)"
            )
        if not found:
            self.log.warning(
                "message event target not found",
                code=ErrorCode.E_MESSAGE_TARGET_NOT_FOUND,
                targetId=getattr(event, "target_id", None),
            )
            return
        self.message_events.append(event)

    def flush_inbox(self) -> None:
        for message in self.instance.take_inbox():
            self.append(message)

    # -- helpers -------------------------------------------------------------------------------

    @functools.cached_property
    def runtime_context(self) -> RuntimeContext:
        """`ctx.runtime` of the middleware: made on first use, as most turns never ask."""
        return runtime_context(self.agent, self.runtime.catalog(), self.input)

    @functools.cached_property
    def guard(self) -> LoopGuard:
        """Made on the turn's first tool call: most turns call none."""
        return LoopGuard(self.agent.loop_detection)

    @functools.cached_property
    def log(self) -> structlog.typing.FilteringBoundLogger:
        """Bound only when a turn has something to say (binding costs more than most turns)."""
        logger: structlog.typing.FilteringBoundLogger = structlog.get_logger().bind(
            agent=self.agent.name,
            instanceKey=self.input.instance_key,
            traceId=self.input.trace_id,
            turnId=self.turn_id,
        )
        return logger

    def on_text(self, text: str) -> None:
        """A streamed chunk of the model's text (streaming models only)."""
        if self.updates is not None:
            self.updates("text", text, {})

    def result(
        self, reason: FinishReason, text: str, error: ErrorDetail | None = None
    ) -> TurnResult:
        return TurnResult(self.turn_id, reason, text, self.state.steps, self.meter.total(), error)

    def _turn_ctx(self, layers: tuple[Layer, ...]) -> TurnCtx:
        ctx = TurnCtx(
            layers,
            agent_name=self.agent.name,
            instance_key=self.input.instance_key,
            turn_id=self.turn_id,
            trace_id=self.input.trace_id,
            input_event=InputEvent(
                self.input.input,
                self.input.source,
                self.input.instance_key,
                self.input.request_id,
                self.input.metadata,
            ),
            conversation_state=self.view,
            agents=self.runtime,
            emit=self.emit,
        )
        ctx.run = self
        ctx.metadata = self.metadata
        return ctx

    def _stop_for_budget(self, notice: str) -> TurnResult:
        self.append(Message(id=self.next_id(), role="assistant", content=notice))
        last = self.state.last_text
        text = f"{last}\n\n{notice}" if last else notice
        return self.result("budget", text, ErrorDetail(ErrorCode.E_TURN_BUDGET, notice))


def outcome_of(result: TurnResult, restart_reason: str | None) -> TurnOutcome:
    usage = result.usage
    return TurnOutcome(
        result.text,
        result.finish_reason,
        result.steps,
        Usage(usage.input_tokens, usage.output_tokens),
        error_code=result.error.code if result.error is not None else None,
        restart_reason=restart_reason,
        cost_usd=usage.cost_usd,
    )


async def _turn_core(ctx: TurnCtx) -> TurnResult:
    return await ctx.run.core_turn()
