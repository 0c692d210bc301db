"""The core of one Step: call the model with the step's catalog, read its reply, run the calls.

A reply is one of:
- text only: appended; the turn can end;
- tool calls: appended, run (`tool_calls.py`), results appended in the order issued;
- malformed: tool calls whose arguments are not a JSON object, calls cut off by the output
  token limit (not run), or a "tool_calls" finish without calls;
- empty: no text and no calls. Right after tool results this simply ends the turn (the model
  had nothing to add); otherwise it is corrected.
Malformed and empty replies get a corrective message and another step, at most
`MAX_CORRECTIONS` in a row; then the turn ends with an error. The step says what happened in a
`StepOutcome`, which the turn applies (`TurnRun.apply`) to make the `StepResult` that the step
middleware sees.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import msgspec

from agentproc.budgets import usage_data
from agentproc.compaction import compact_on_overflow
from agentproc.counters import COUNTERS
from agentproc.messages import Message, ModelError, ModelReply, ModelRequest, ToolDefinition
from agentproc.runtime_events import elapsed_ms
from agentproc.tool_calls import run_tool_calls
from agentproc.tracing import current_span, new_span_id
from agentproc.turn_state import Correction, StepOutcome, ToolBatchOutcome, TurnStop
from goondan.extensions import ErrorDetail, StepResult, TokenUsage
from goondan.tools import ToolCatalogItem, ToolErrorInfo, ToolResult
from ipc.error_codes import ErrorCode

if TYPE_CHECKING:
    from agentproc.catalog import ToolPolicy
    from agentproc.conversation import Conversation
    from agentproc.plain_turn import FirstCall
    from agentproc.tracing import TurnTracer
    from agentproc.turn import AgentDefinition, TurnRun
    from agentproc.turn_state import StepCtx

_TOOL_FINISH = frozenset({"tool_calls", "tool_use", "function_call"})

EMPTY_CORRECTION = (
    "Your previous reply was empty. Answer the last message in plain text, or call one of "
    "the tools offered to you."
)
MALFORMED_CORRECTION = (
    "Your previous reply had a tool call that could not be used: its arguments must be one "
    "JSON object matching the tool's parameters, complete and not cut off. Call the tool "
    "again with valid arguments, or answer in plain text."
)
AGENTS_EXAMPLE = (
    ' For example: agents__request with {"target": "<agent name>", "input": "<the request>"}.'
)
MALFORMED_STOP = (
    "I could not produce a valid tool call after several attempts, so I stopped this turn. "
    "Please rephrase the request or try again."
)
EMPTY_STOP = "I could not produce an answer after several attempts, so I stopped this turn."
_MALFORMED_STOP = TurnStop(ErrorCode.E_MODEL_MALFORMED_OUTPUT, MALFORMED_STOP)
_EMPTY = Correction("empty", EMPTY_CORRECTION, TurnStop(ErrorCode.E_MODEL_EMPTY_OUTPUT, EMPTY_STOP))
_MALFORMED = Correction("malformed", MALFORMED_CORRECTION, _MALFORMED_STOP)
_MALFORMED_AGENTS = Correction("malformed", MALFORMED_CORRECTION + AGENTS_EXAMPLE, _MALFORMED_STOP)


async def run_step(ctx: StepCtx) -> StepResult:
    run = ctx.run
    first = run.take_first_call()  # a plain turn's model call, taken over (`plain_turn.py`)
    if first is None:
        names, tools = visible_tools(run.policy, ctx.tool_catalog)
        span = new_span_id()
        started = time.monotonic()
        step_started(run.tracer, span, ctx.step_index, names)
    else:
        names, tools = first.names, first.tools
        span, started = first.span, first.step_started
    ctx.span = span
    token = current_span.set(span)
    try:
        try:
            reply = await _ask(ctx, tools, first)
        except ModelError as exc:
            run.log.warning("model call failed", code=exc.code, error=str(exc), step=ctx.step_index)
            COUNTERS.model_call("error")
            error = ErrorDetail(exc.code, str(exc))
            step_ended(
                run.tracer,
                "step.failed",
                span,
                ctx.step_index,
                started,
                {"errorCode": error.code, "errorMessage": error.message},
            )
            return run.apply(StepOutcome(error=error))
        usage = run.replied(reply)
        COUNTERS.model_call("ok", usage.input_tokens, usage.output_tokens)
        result = run.apply(await _handle_reply(ctx, reply, usage, frozenset(names)))
        step_ended(
            run.tracer,
            "step.completed",
            span,
            ctx.step_index,
            started,
            {
                "toolCallCount": len(reply.tool_calls),
                "finishReason": reply.finish_reason,
                "shouldContinue": result.should_continue,
                "tokenUsage": usage_data(usage),
            },
        )
        return result
    except BaseException as exc:
        reason = "aborted" if not isinstance(exc, Exception) else "error"
        step_ended(
            run.tracer, "step.failed", span, ctx.step_index, started, {"finishReason": reason}
        )
        raise
    finally:
        current_span.reset(token)


async def _ask(ctx: StepCtx, tools: list[ToolDefinition], first: FirstCall | None) -> ModelReply:
    """The model's reply to the conversation (`first`'s, when a plain turn made the call).
    Refused as longer than the context window, the conversation is compacted once (its oldest
    half summarised) and asked again."""
    run = ctx.run
    on_text = run.on_text if run.updates is not None else None
    try:
        if first is not None:
            return first.outcome()
        return await run.agent.provider.complete(
            model_request(run.agent, run.conversation, tools), on_text=on_text
        )
    except ModelError as exc:
        if exc.code != ErrorCode.E_CONTEXT_OVERFLOW:
            raise
        run.log.warning("context overflow, compacting", error=str(exc), step=ctx.step_index)
        if not await compact_on_overflow(run, ctx.span):
            raise
    try:
        return await run.agent.provider.complete(
            model_request(run.agent, run.conversation, tools), on_text=on_text
        )
    except ModelError as exc:
        if exc.code != ErrorCode.E_CONTEXT_OVERFLOW:
            raise
        raise ModelError(
            f"{exc}; still too long after compacting the conversation",
            code=ErrorCode.E_CONTEXT_OVERFLOW,
        ) from exc


def model_request(
    agent: AgentDefinition, conversation: Conversation, tools: list[ToolDefinition]
) -> ModelRequest:
    return ModelRequest([*agent.prefix, *conversation.messages], tools, dict(agent.params))


async def _handle_reply(
    ctx: StepCtx, reply: ModelReply, usage: TokenUsage, names: frozenset[str]
) -> StepOutcome:
    run = ctx.run
    text = reply.text or ""
    calls = list(reply.tool_calls)
    if not calls:
        if text.strip():
            run.append(Message(id=run.next_id(), role="assistant", content=text))
            return StepOutcome(text=text, usage=usage)
        if reply.finish_reason in _TOOL_FINISH:
            return StepOutcome(continues=True, usage=usage, correction=_MALFORMED)
        if _after_tool_results(run):
            return StepOutcome(text="", usage=usage)  # nothing to add after its tools ran
        return StepOutcome(continues=True, usage=usage, correction=_EMPTY)

    assistant = Message(
        id=run.next_id(),
        role="assistant",
        content=text or None,
        tool_calls=tuple(calls),
        metadata=(
            {"stepIndex": ctx.step_index, "providerState": reply.provider_state}
            if reply.provider_state
            else {"stepIndex": ctx.step_index}
        ),
    )
    run.append(assistant)
    if reply.finish_reason == "length":
        # Cut off by the output limit: the arguments may parse yet be incomplete. Run none.
        results = [_truncated(call.name) for call in calls]
        for call, result in zip(calls, results, strict=True):
            run.write_result(call, result)
        tools = ToolBatchOutcome(results, malformed=True)
    else:
        tools = await run_tool_calls(ctx, assistant, calls, names)
    correction = None
    if tools.malformed:
        agents = any(c.name.startswith("agents__") for c in calls)
        correction = _MALFORMED_AGENTS if agents else _MALFORMED
    return StepOutcome(
        continues=True,
        text=text or None,
        usage=usage,
        tool_calls=calls,
        tools=tools,
        correction=correction,
    )


def visible_tools(policy: ToolPolicy, items: list[Any]) -> tuple[list[str], list[ToolDefinition]]:
    """The catalog step middleware left, minus what the policy forbids: names and the
    definitions the model is offered, in order, each name once."""
    names: list[str] = []
    tools: list[ToolDefinition] = []
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, ToolCatalogItem):
            item = msgspec.convert(item, ToolCatalogItem)  # a dict a middleware added
        if item.name in seen or not policy.permits(item.name):
            continue
        seen.add(item.name)
        names.append(item.name)
        tools.append(ToolDefinition(item.name, item.description, item.parameters))
    return names, tools


def _after_tool_results(run: TurnRun) -> bool:
    messages = run.conversation.messages
    return bool(messages) and messages[-1].role == "tool"


def _truncated(name: str) -> ToolResult:
    return ToolResult.fail(
        ToolErrorInfo(
            code=ErrorCode.E_TOOL_CALL_TRUNCATED,
            name="ToolCallTruncatedError",
            message=f"Not run: the reply hit the output token limit, so the arguments of "
            f"'{name}' may be cut off.",
            suggestion="Issue the call again, with shorter arguments if they are long.",
        )
    )


def step_started(tracer: TurnTracer, span: str, index: int, tools: list[str]) -> None:
    """`step.started`, with the names of the tools the model is offered."""
    tracer.emit(
        "step.started",
        span,
        tracer.turn_span,
        {"stepId": f"{tracer.turn_id}-step-{index}", "stepIndex": index, "tools": tools},
    )


def step_ended(
    tracer: TurnTracer, event: str, span: str, index: int, started: float, data: dict[str, Any]
) -> None:
    """`step.completed` or `step.failed`, with what the step did."""
    tracer.emit(
        event,
        span,
        tracer.turn_span,
        {
            "stepId": f"{tracer.turn_id}-step-{index}",
            "stepIndex": index,
            "duration": elapsed_ms(started),
            **data,
        },
    )


__all__ = ["run_step"]
