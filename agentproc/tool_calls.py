"""The tool calls of one model reply: concurrently, results in the order the model issued them.

Calls run at the same time, except that a call to a tool declared `sequential` runs alone
(after the calls before it, before the calls after it). Each result is appended to the
conversation as soon as every call before it has its result too, so a crash loses as little
as possible and the order stays the model's. Each call gets its own span, runs through the
`toolCall` middleware onion and the executor, and is seen by loop detection. Cancelling the
turn cancels its calls; each unfinished call is answered with `E_TOOL_CANCELLED`. The batch
reports what happened as a `ToolBatchOutcome`; it changes nothing of the turn's state.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, cast

import msgspec

from agentproc.approvals import approval_id, ask_approval, parked_calls, parked_result
from agentproc.counters import COUNTERS
from agentproc.loop_guard import Verdict
from agentproc.messages import Message, ToolCall
from agentproc.runtime_events import elapsed_ms
from agentproc.tool_args import ArgumentsError, parse_arguments
from agentproc.tool_executor import invalid_args, truncate_error_message
from agentproc.tracing import current_span, new_span_id
from agentproc.turn_state import ToolBatchOutcome, TurnStop
from goondan.extensions import ReplaceMessage, RuntimeContext, ToolCallMiddlewareContext
from goondan.tools import Pending, ToolContext, ToolErrorInfo, ToolProgress, ToolResult
from ipc.error_codes import ErrorCode

if TYPE_CHECKING:
    from agentproc.tool_registry import ToolEntry
    from agentproc.turn import TurnRun
    from agentproc.turn_state import StepCtx

_encoder = msgspec.json.Encoder()
_PREVIEW = 1000  # characters of arguments and details kept in runtime events


class CallCtx(ToolCallMiddlewareContext, kw_only=True):
    run: TurnRun
    call: ToolCall
    assistant: Message
    span: str
    step_span: str
    catalog_names: frozenset[str]
    loop_verdict: Verdict = "run"  # loop detection's judgement on the arguments as executed
    loop_warning: str | None = None

    @property
    def runtime(self) -> RuntimeContext:
        return self.run.runtime_context


class _Done(msgspec.Struct):
    """One call's part of the batch's outcome."""

    result: ToolResult
    malformed: bool = False
    warning: str | None = None
    stop: TurnStop | None = None


async def run_tool_calls(
    step: StepCtx, assistant: Message, calls: list[ToolCall], names: frozenset[str]
) -> ToolBatchOutcome:
    """Run the calls, writing each result to the conversation in the model's order."""
    run = step.run
    done: list[_Done | None] = [None] * len(calls)
    flushed = 0

    def flush() -> None:
        nonlocal flushed
        while flushed < len(calls):
            item = done[flushed]
            if item is None:
                return
            run.write_result(calls[flushed], item.result)
            flushed += 1

    async def one(index: int) -> None:
        done[index] = await _call(step, assistant, calls[index], names)
        flush()

    try:
        for group in _groups(run, calls):
            if len(group) == 1:
                await one(group[0])
            else:
                await asyncio.gather(*(one(index) for index in group))
    except asyncio.CancelledError:
        for index, item in enumerate(done):
            if item is None:
                done[index] = _Done(_unfinished(run, calls[index]))
        flush()
        raise
    finished = [item for item in done if item is not None]
    return ToolBatchOutcome(
        [item.result for item in finished],
        malformed=any(item.malformed for item in finished),
        warnings=[item.warning for item in finished if item.warning],
        stop=next((item.stop for item in finished if item.stop is not None), None),
    )


def result_message(message_id: str, call: ToolCall, result: ToolResult) -> Message:
    """The conversation's message for a tool result."""
    metadata: dict[str, Any] = {"toolName": call.name, "status": result.status}
    if result.handle is not None:
        metadata["handle"] = result.handle
    if result.details is not None:
        media = _images(result.details)
        if media:
            metadata["media"] = media  # for the providers that take images (Anthropic)
    return Message(
        id=message_id,
        role="tool",
        content=llm_text(result),
        tool_call_id=call.id,
        metadata=metadata,
    )


def _images(details: Any) -> list[dict[str, str]]:
    """`details["media"]` images of a tool result (an MCP tool's image content): the text the
    model reads only describes them, a provider that takes images sends them too."""
    media = details.get("media") if isinstance(details, dict) else None
    if not isinstance(media, list):
        return []
    return [
        {"type": "image", "mimeType": item["mimeType"], "data": item["data"]}
        for item in media
        if isinstance(item, dict)
        and item.get("type") == "image"
        and isinstance(item.get("mimeType"), str)
        and isinstance(item.get("data"), str)
    ]


def llm_text(result: ToolResult) -> str:
    """What the model reads for a tool result: the JSON of the result without `details`."""
    if result.details is not None:
        result = msgspec.structs.replace(result, details=None)
    return _encoder.encode(result).decode()


def _groups(run: TurnRun, calls: list[ToolCall]) -> list[list[int]]:
    """Runs of calls that may go together; a sequential tool's call is a group of its own."""
    groups: list[list[int]] = []
    current: list[int] = []
    for index, call in enumerate(calls):
        entry = run.agent.registry.get(call.name)
        if entry is not None and entry.sequential:
            if current:
                groups.append(current)
                current = []
            groups.append([index])
        else:
            current.append(index)
    if current:
        groups.append(current)
    return groups


async def _call(step: StepCtx, assistant: Message, call: ToolCall, names: frozenset[str]) -> _Done:
    run = step.run
    span = new_span_id()
    token = current_span.set(span)
    started = time.monotonic()
    run.tracer.emit(
        "tool.called",
        span,
        step.span,
        {
            "toolCallId": call.id,
            "toolName": call.name,
            "stepIndex": step.step_index,
            "arguments": call.arguments[:_PREVIEW],
        },
    )
    outcome = _Done(_cancelled(call.name))
    try:
        try:
            args = parse_arguments(call.arguments)
        except ArgumentsError as exc:
            outcome = _Done(invalid_args(call.name, str(exc)), malformed=True)
            return outcome
        ctx = _call_ctx(step, assistant, call, names, span, args)
        outcome = _Done(await _through_middleware(ctx))
        outcome.warning = ctx.loop_warning
        if ctx.loop_verdict == "stop":
            outcome.stop = TurnStop(
                ErrorCode.E_TOOL_LOOP_DETECTED,
                f"I stopped this turn: the call to {call.name} kept repeating with the same "
                "arguments and the same result.",
            )
        return outcome
    finally:
        current_span.reset(token)
        _tool_event(run, call, outcome.result, span, step.span, started)


def _call_ctx(
    step: StepCtx,
    assistant: Message,
    call: ToolCall,
    names: frozenset[str],
    span: str,
    args: dict[str, Any],
) -> CallCtx:
    run = step.run
    return CallCtx(
        run.agent.pipeline.chain("toolCall", _call_core),
        run.agent.name,
        run.input.instance_key,
        run.turn_id,
        run.input.trace_id,
        step.step_index,
        call.name,
        call.id,
        args,
        run=run,
        call=call,
        assistant=assistant,
        span=span,
        step_span=step.span,
        catalog_names=names,
    )


async def _through_middleware(ctx: CallCtx) -> ToolResult:
    run, call = ctx.run, ctx.call
    try:
        result = await ctx._start()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a middleware bug: the model sees an error, the turn goes on
        run.log.exception("toolCall middleware failed", tool=call.name)
        return ToolResult.fail(
            ToolErrorInfo(
                code=ErrorCode.E_TOOL_MIDDLEWARE,
                name=type(exc).__name__,
                message=truncate_error_message(f"A toolCall middleware failed: {exc}", 1000),
            )
        )
    if not isinstance(result, ToolResult):
        return ToolResult.fail(
            ToolErrorInfo(
                code=ErrorCode.E_TOOL_MIDDLEWARE,
                name="MiddlewareError",
                message=f"A toolCall middleware returned {type(result).__name__}, not a "
                "ToolResult.",
            )
        )
    return result


async def _call_core(ctx: CallCtx) -> ToolResult:
    """The innermost layer: loop detection, then the executor (policy, catalog, validation,
    handler). Loop detection sits here so that it judges the arguments the call runs with,
    after any middleware rewrote them."""
    guard, name = ctx.run.guard, ctx.tool_name
    key = guard.key(name, ctx.args)
    verdict = guard.check(key)
    if verdict != "run":
        ctx.loop_verdict = verdict
        return guard.blocked(name)
    result = await _execute(ctx)
    ctx.loop_warning = guard.record(name, key, result)
    return result


async def _execute(ctx: CallCtx) -> ToolResult:
    run = ctx.run
    agent = run.agent
    loop = asyncio.get_running_loop()
    finished = False

    def progress(update: ToolProgress) -> None:
        if finished:
            return  # updates after the call settled are dropped
        data: dict[str, Any] = {"toolCallId": ctx.tool_call_id, "toolName": ctx.tool_name}
        data.update(msgspec.to_builtins(update))
        run.tracer.emit("tool.progress", ctx.span, ctx.step_span, data)
        if run.updates is not None:
            run.updates("progress", None, data)

    def on_update(update: ToolProgress) -> None:
        try:
            same_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            same_loop = False
        if same_loop:
            progress(update)
        else:  # a sync handler's thread
            loop.call_soon_threadsafe(progress, update)

    def make_context() -> ToolContext:
        return ToolContext(  # positional: keywords to a class cost a dict per call
            agent.name,
            ctx.instance_key,
            ctx.turn_id,
            ctx.trace_id,
            ctx.tool_call_id,
            ctx.assistant,  # message
            run.workdir,
            run.log.bind(tool=ctx.tool_name, toolCallId=ctx.tool_call_id),  # logger
            run.runtime,
            on_update,
        )

    def submit(pending: Pending, entry: ToolEntry) -> ToolResult:
        return run.instance.jobs.submit(pending, entry, ctx.tool_call_id, run.tracer, ctx.span)

    policy = run.policy
    if (
        policy.require_approval
        and policy.needs_approval(ctx.tool_name)
        and policy.refusal(ctx.tool_name) is None
    ):
        refused = await ask_approval(agent.approvals, ctx, policy.approval_timeout_s)
        if refused is not None:
            return refused
    try:
        return await agent.executor.invoke(
            ctx.tool_name,
            ctx.args,
            make_context,
            catalog=ctx.catalog_names,
            denied=None if policy.is_open else policy.refusal,
            allow_registry_calls=policy.allow_registry_calls,
            submit=submit,
        )
    finally:
        finished = True


def _tool_event(
    run: TurnRun, call: ToolCall, result: ToolResult, span: str, step_span: str, started: float
) -> None:
    data: dict[str, Any] = {
        "toolCallId": call.id,
        "toolName": call.name,
        "status": result.status,
        "duration": elapsed_ms(started),
    }
    if result.handle is not None:
        data["handle"] = result.handle
    if result.error is not None:
        data["errorCode"] = result.error.code
        data["errorMessage"] = result.error.message
    if result.details is not None:
        data["details"] = _json_safe(result.details)
    if result.status != "pending":  # an async job is counted when it finishes (tool_jobs)
        COUNTERS.tool_call(call.name, result.status)
    run.tracer.emit(
        "tool.failed" if result.status == "error" else "tool.completed", span, step_span, data
    )


def _json_safe(value: Any) -> Any:
    try:
        return msgspec.to_builtins(value)
    except (TypeError, ValueError):
        return repr(value)[:_PREVIEW]


def _cancelled(name: str) -> ToolResult:
    return ToolResult.fail(
        ToolErrorInfo(
            code=ErrorCode.E_TOOL_CANCELLED,
            name="ToolCancelledError",
            message=f"The call to '{name}' was cancelled before it finished (the turn stopped).",
        )
    )


def _unfinished(run: TurnRun, call: ToolCall) -> ToolResult:
    """A call the cancelled batch did not finish: parked when it waited for a human while the
    agent stopped (it runs again when the turn resumes), else cancelled."""
    approvals = run.agent.approvals
    if approvals is not None and approvals.is_parked(
        approval_id(run.agent.name, run.input.instance_key, call.id)
    ):
        return parked_result(call.name)
    return _cancelled(call.name)


class _ResumedStep(msgspec.Struct):
    """What a call needs of its step, for the calls a resumed turn runs again."""

    run: TurnRun
    span: str
    step_index: int


async def resume_parked(run: TurnRun) -> None:
    """A turn delivered again after a stop: its calls that waited for approval run now (they
    ask again and find the orchestrator's approval), each result replacing the parked one."""
    found = parked_calls(run)
    if found is None:
        return
    assistant, parked = found
    names = frozenset(item.name for item in run.agent.catalog.build())
    step = cast("StepCtx", _ResumedStep(run, run.tracer.turn_span, 0))
    for call, standing in parked:
        done = await _call(step, assistant, call, names)
        run.emit(ReplaceMessage(standing.id, result_message(standing.id, call, done.result)))


def restart_requested(result: ToolResult) -> str | None:
    """The self-restart convention: an ok tool output with `restartRequested: true`."""
    output = result.output
    if (
        result.status == "ok"
        and isinstance(output, dict)
        and output.get("restartRequested") is True
    ):
        return str(output.get("restartReason") or "tool:self-restart")
    return None


__all__ = ["CallCtx", "llm_text", "restart_requested", "result_message", "run_tool_calls"]
