"""The state of one running turn, and the outcomes its steps and tool calls report.

A turn (`turn.py`) owns its `TurnState`; nothing else writes it. A step (`step.py`) and the
batch of tool calls of one reply (`tool_calls.py`) do the work and say what happened: a
`ToolBatchOutcome`, inside the step's `StepOutcome`, which the turn applies when the step ends
(`TurnRun.apply`). Two things cannot wait for the step's end, because a turn its deadline
stops in the middle of a step still reports them: the model's reply (tokens and text,
`TurnRun.replied`) and each tool result as it is written (a self-restart request,
`TurnRun.write_result`). Messages go to the conversation as they are made, through the turn.

What every turn begins and ends with, the general one and a plain one (`plain_turn.py`)
alike, is made here once: its tracer, its input as a message, its `turn.started` and its
`turn.completed` / `turn.failed` events.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from agentproc.budgets import usage_data
from agentproc.compaction import summarize
from agentproc.messages import Message, ToolCall
from agentproc.runtime_events import elapsed_ms
from agentproc.tracing import TurnTracer
from goondan.extensions import (
    ErrorDetail,
    MessageEvent,
    RuntimeContext,
    StepMiddlewareContext,
    TokenUsage,
    TurnMiddlewareContext,
    TurnResult,
)
from goondan.tools import ToolResult

if TYPE_CHECKING:
    from agentproc.conversation import Conversation
    from agentproc.instance import Instance
    from agentproc.turn import AgentDefinition, TurnInput, TurnRun

MAX_CORRECTIONS = 2  # corrective retries of one kind in a row (malformed, empty)

CorrectionKind = Literal["malformed", "empty"]


class TurnStop(msgspec.Struct, frozen=True):
    """Why the turn ends with an error after this step: the code, and the answer to give."""

    code: str
    message: str


class Correction(msgspec.Struct, frozen=True):
    """A corrective message and another try, or `stop` after MAX_CORRECTIONS in a row."""

    kind: CorrectionKind
    text: str
    stop: TurnStop


class ToolBatchOutcome(msgspec.Struct, frozen=True):
    """The tool calls of one reply, run: their results in the order the model issued them."""

    results: list[ToolResult]
    malformed: bool = False  # a call's arguments were not a JSON object (or were cut off)
    warnings: list[str] = []  # loop detection's, for the model
    stop: TurnStop | None = None  # loop detection ended the turn


class StepOutcome(msgspec.Struct, frozen=True):
    """What the core step did, for the turn to apply. `error`: the model call failed;
    otherwise `usage` is the reply's (already counted by `TurnRun.replied`)."""

    continues: bool = False  # another step follows, unless the turn stops
    text: str | None = None
    usage: TokenUsage = TokenUsage()
    tool_calls: list[ToolCall] = []
    tools: ToolBatchOutcome | None = None  # the reply's tool calls, when it had some
    correction: Correction | None = None  # the reply was malformed or empty
    error: ErrorDetail | None = None


def turn_tracer(
    agent: AgentDefinition, instance: Instance, turn_input: TurnInput, turn_id: str
) -> TurnTracer:
    """Where the turn's runtime events go: the agent's log, its extensions, its spans."""
    return TurnTracer(
        instance.events,
        agent.bus,
        agent.spans,
        agent_name=agent.name,
        instance_key=turn_input.instance_key,
        trace_id=turn_input.trace_id,
        turn_id=turn_id,
        parent_span_id=turn_input.parent_span_id,
    )


def input_message(turn_input: TurnInput, message_id: str) -> Message:
    """The turn's input as the conversation keeps it."""
    return Message(
        id=message_id,
        role="user",
        content=turn_input.input,
        metadata={
            **turn_input.metadata,
            "source": turn_input.source,
            "requestId": turn_input.request_id,
            "traceId": turn_input.trace_id,
            "receivedAt": time.time(),
        },
    )


def turn_started(tracer: TurnTracer, turn_input: TurnInput, resume: bool) -> None:
    text = turn_input.input
    tracer.turn(
        "turn.started",
        {
            "source": turn_input.source,
            "requestId": turn_input.request_id,
            "resume": resume,
            "input": text if len(text) <= 200 else text[:197] + "...",
        },
    )


def turn_ended(tracer: TurnTracer, event: str, result: TurnResult, started: float) -> None:
    """`turn.completed` or `turn.failed`. No log line: every turn is in the runtime events
    (`goondan logs`), and binding a logger would cost more than the rest of a short turn."""
    data: dict[str, Any] = {
        "finishReason": result.finish_reason,
        "stepCount": result.steps,
        "duration": elapsed_ms(started),
        "tokenUsage": usage_data(result.usage),
    }
    if result.error is not None:
        data["errorCode"] = result.error.code
        data["errorMessage"] = result.error.message
    tracer.turn(event, data)


class TurnState(msgspec.Struct):
    """What the turn has done so far: changed by `TurnRun` only."""

    steps: int = 0  # steps started
    last_text: str = ""  # the model's latest text that was not blank
    malformed: int = 0  # corrections of each kind in a row
    empty: int = 0
    stop: TurnStop | None = None
    restart_reason: str | None = None  # a tool asked for a swarm restart (self-restart)

    def halt(self, stop: TurnStop) -> None:
        """End the turn after this step with an error (the first reason given wins)."""
        if self.stop is None:
            self.stop = stop

    def corrected(self, kind: CorrectionKind) -> bool:
        """Count a correction of `kind` (ending the other kind's run); whether one more is
        still allowed."""
        if kind == "malformed":
            self.malformed, self.empty = self.malformed + 1, 0
            return self.malformed <= MAX_CORRECTIONS
        self.malformed, self.empty = 0, self.empty + 1
        return self.empty <= MAX_CORRECTIONS

    def steady(self) -> None:
        """The model's reply was usable: the runs of corrections end."""
        self.malformed = self.empty = 0


class ConversationView:
    """`ctx.conversation_state`: base (turn start) + this turn's events = next (now). It holds
    the turn's parts, not the turn: a cycle would keep every turn alive until a gc pass."""

    def __init__(
        self, conversation: Conversation, events: list[MessageEvent], base: list[Message]
    ) -> None:
        self._conversation = conversation
        self._events = events
        self._base = base

    @property
    def base_messages(self) -> list[Message]:
        return self._base

    @property
    def events(self) -> list[MessageEvent]:
        return self._events

    @property
    def next_messages(self) -> list[Message]:
        return self._conversation.messages


class TurnCtx(TurnMiddlewareContext):
    __slots__ = ("run",)
    run: TurnRun

    @property
    def runtime(self) -> RuntimeContext:
        return self.run.runtime_context

    async def summarize(self, messages: Sequence[Message]) -> str:
        return await summarize(self.run, messages)


class StepCtx(StepMiddlewareContext):
    __slots__ = ("run", "span")
    run: TurnRun
    span: str

    @property
    def runtime(self) -> RuntimeContext:
        return self.run.runtime_context


__all__ = [
    "MAX_CORRECTIONS",
    "ConversationView",
    "Correction",
    "StepCtx",
    "StepOutcome",
    "ToolBatchOutcome",
    "TurnCtx",
    "TurnState",
    "TurnStop",
    "input_message",
    "turn_ended",
    "turn_started",
    "turn_tracer",
]
