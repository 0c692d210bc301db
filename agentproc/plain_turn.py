"""A plain turn: no middleware around it, and the model answers in text at the first step.

That is most turns of an agent without turn or step middleware. The general turn
(`turn.py`) builds its state, a step context, the step's outcome and result for every turn,
each a few objects and functions; at scale every turn runs on caches the other agents emptied,
where each of them costs cache lines read from memory (docs/performance.md, figure 14). This
path does only what such a turn must, and does it the same way: the same messages, the same
runtime events (the helpers are shared with the general turn), the same answer.

When the first reply is anything else (tool calls, no text) or the call ends otherwise (an
error, a cancel, the time budget), the general turn takes over from the model call
(`FirstCall`): nothing is done twice, and every other case runs the one general code path.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import TYPE_CHECKING

from agentproc.budgets import UsageMeter, usage_data
from agentproc.counters import COUNTERS
from agentproc.deadlines import Deadline
from agentproc.messages import Message, ModelReply, ToolDefinition
from agentproc.runtime_events import new_span_id
from agentproc.step import model_request, step_ended, step_started, visible_tools
from agentproc.tracing import TurnTracer
from agentproc.turn_state import input_message, turn_ended, turn_started, turn_tracer
from goondan.extensions import ErrorDetail, TurnResult
from goondan.paths import StorageError

if TYPE_CHECKING:
    from agentproc.instance import Instance
    from agentproc.turn import AgentDefinition, TurnInput, UpdateSink


class FirstCall:
    """A plain turn's first step up to its model call, for the general turn to take over:
    the turn's ids and events so far, the time budget being watched, and the call's reply or
    the exception it raised."""

    __slots__ = (
        "tracer",
        "started",
        "cancelling",
        "watched",
        "span",
        "step_started",
        "names",
        "tools",
        "reply",
        "error",
    )

    def __init__(
        self,
        tracer: TurnTracer,
        started: float,
        cancelling: int,
        watched: Deadline | None,
        span: str,
        step_started: float,
        offered: tuple[list[str], list[ToolDefinition]],
    ) -> None:
        self.tracer = tracer
        self.started = started  # the turn's start (`time.monotonic()`)
        self.cancelling = cancelling  # the task's cancel count before the call
        self.watched = watched  # the turn's time budget, still watched
        self.span = span  # the first step's
        self.step_started = step_started
        self.names, self.tools = offered  # the tools the model was offered
        self.reply: ModelReply | None = None
        self.error: BaseException | None = None

    def outcome(self) -> ModelReply:
        """The reply, or the call's exception raised again where the general step asks."""
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        assert self.reply is not None
        return self.reply


def can_run_plain(
    agent: AgentDefinition, instance: Instance, turn_input: TurnInput, resume: bool
) -> bool:
    """Whether nothing but the model could make this turn more than one text answer: no turn
    or step middleware and no extension listening to events, a fresh turn (not resumed), no
    message or tool job waiting, the tools as the agent's policy has them (no Connection's),
    no budget the first step could be over."""
    pipeline = agent.pipeline
    budget = agent.budget
    return (
        not resume
        and not pipeline.has("turn")
        and not pipeline.has("step")
        and (agent.bus is None or not agent.bus.subscribed())  # handlers read the turn's context
        and agent.max_steps > 0
        and not instance.has_pending()
        and not agent.registry.refreshing
        and "toolPolicy" not in turn_input.metadata
        and (budget.max_turn_tokens is None or budget.max_turn_tokens > 0)
        and (budget.max_turn_cost_usd is None or budget.max_turn_cost_usd > 0)
    )


async def run_plain_turn(
    agent: AgentDefinition,
    instance: Instance,
    turn_input: TurnInput,
    turn_id: str,
    updates: UpdateSink | None,
) -> TurnResult | FirstCall:
    """The turn, when the model answers in text; otherwise its first call, to take over.
    `updates`: where a streaming model's text goes as it comes (see `run_turn`)."""
    started = time.monotonic()
    task = asyncio.current_task()
    assert task is not None
    cancelling = task.cancelling()  # for the general turn to tell a cancel of its own
    tracer = turn_tracer(agent, instance, turn_input, turn_id)
    conversation = instance.conversation
    # Written with the turn's next change, as the general turn writes it.
    conversation.append(input_message(turn_input, f"{tracer.turn_id}-1"), hold=True)
    turn_started(tracer, turn_input, False)
    seconds = agent.budget.max_turn_seconds
    watched = None
    if seconds is not None:
        watched = agent.deadlines.watch(task, started + seconds)
    offered = visible_tools(agent.policy, agent.catalog.build())
    span = new_span_id()
    step_began = time.monotonic()
    step_started(tracer, span, 0, offered[0])
    try:
        reply = await agent.provider.complete(
            model_request(agent, conversation, offered[1]),
            on_text=None if updates is None else functools.partial(_text, updates),
        )
    except BaseException as exc:  # the general turn answers it as it would its own call's
        first = FirstCall(tracer, started, cancelling, watched, span, step_began, offered)
        first.error = exc
        return first
    text = reply.text
    if reply.tool_calls or not text or not text.strip():
        first = FirstCall(tracer, started, cancelling, watched, span, step_began, offered)
        first.reply = reply
        return first
    if watched is not None:
        agent.deadlines.end(watched)
    meter = UsageMeter(agent.pricing)
    usage = meter.add(reply.usage)
    COUNTERS.model_call("ok", usage.input_tokens, usage.output_tokens)
    try:
        conversation.append(Message(id=f"{tracer.turn_id}-2", role="assistant", content=text))
    except StorageError as exc:  # as the general turn: the step failed, then the turn
        step_ended(tracer, "step.failed", span, 0, step_began, {"finishReason": "error"})
        error = ErrorDetail(exc.code, str(exc))
        failed = TurnResult(tracer.turn_id, "error", str(exc), 1, meter.total(), error)
        turn_ended(tracer, "turn.failed", failed, started)
        raise
    step_ended(
        tracer,
        "step.completed",
        span,
        0,
        step_began,
        {
            "toolCallCount": 0,
            "finishReason": reply.finish_reason,
            "shouldContinue": False,
            "tokenUsage": usage_data(usage),
        },
    )
    result = TurnResult(tracer.turn_id, "text_response", text, 1, meter.total())
    conversation.flush()
    instance.end_turn()
    turn_ended(tracer, "turn.completed", result, started)
    return result


def _text(updates: UpdateSink, text: str) -> None:
    updates("text", text, {})


__all__ = ["FirstCall", "can_run_plain", "run_plain_turn"]
