"""The agent's side of approvals: a tool call that waits for a human before it runs.

A call to a tool in `toolPolicy.requireApproval` (the agent's, and the Connection's for its
turns) asks the orchestrator (`approval_request`) and waits for its `approval_decision`. Only
that call's turn waits: the instance's worker is parked on a future, and the agent serves its
other instances meanwhile. Approved, the call runs; denied or expired, the model gets
`E_TOOL_DENIED` (with the reason) or `E_TOOL_APPROVAL_TIMEOUT` as the call's result.

When the agent stops while calls wait (a daemon stop), their turns are cancelled at once
instead of holding the shutdown, and each waiting call is answered with a *parked* result.
The orchestrator keeps the approval, and the turn, delivered again from its journal, runs the
parked calls once more (`resume_parked`): they ask again under the same id, and find the
approval pending or already decided. Every step is a `tool.approval` runtime event (requested,
approved, denied, expired) naming who decided and when.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from goondan.tools import ToolErrorInfo, ToolResult
from ipc import wire
from ipc.error_codes import ErrorCode

if TYPE_CHECKING:
    from agentproc.messages import Message, ToolCall
    from agentproc.tool_calls import CallCtx
    from agentproc.turn import TurnRun

DEFAULT_TIMEOUT_S = 3600.0
PARKED = "ApprovalParked"  # the error name of a parked call's result


def approval_id(agent: str, instance_key: str, tool_call_id: str) -> str:
    """The same call of the same instance gets the same id, across restarts."""
    digest = hashlib.sha256(f"{agent}\0{instance_key}\0{tool_call_id}".encode()).hexdigest()
    return f"ap-{digest[:12]}"


class ApprovalWaits:
    """The calls of this agent that wait for a decision, by approval id."""

    def __init__(self, agent: str, send: Callable[[bytes], None]) -> None:
        self.agent = agent
        self._send = send
        self._waiting: dict[str, asyncio.Future[wire.ApprovalDecision]] = {}
        self._turns: dict[str, asyncio.Task[Any]] = {}  # the task each waiting call is in
        self._parked: set[str] = set()
        self.stopping = False

    def on_decision(self, decision: wire.ApprovalDecision) -> bool:
        future = self._waiting.get(decision.id)
        if future is None or future.done():
            return False
        future.set_result(decision)
        return True

    def is_parked(self, approval: str) -> bool:
        return approval in self._parked

    def park_all(self) -> None:
        """The agent stops: turns that wait for a human end now, their calls parked."""
        self.stopping = True
        for approval, task in list(self._turns.items()):
            self._parked.add(approval)
            task.cancel()

    async def wait(self, ctx: CallCtx, timeout_s: float | None) -> ToolResult | None:
        """Ask, and wait for the decision: None when approved, else the call's result."""
        run = ctx.run
        approval = approval_id(self.agent, ctx.instance_key, ctx.tool_call_id)
        args = msgspec.json.encode(ctx.args).decode()
        request = wire.ApprovalRequest(
            approval,
            ctx.instance_key,
            ctx.tool_name,
            args,
            ctx.tool_call_id,
            timeout_s or DEFAULT_TIMEOUT_S,
            trace_id=ctx.trace_id,
        )
        future: asyncio.Future[wire.ApprovalDecision] = asyncio.get_running_loop().create_future()
        self._waiting[approval] = future
        task = asyncio.current_task()
        if task is not None:
            self._turns[approval] = task
        event = {"approvalId": approval, "toolCallId": ctx.tool_call_id, "toolName": ctx.tool_name}
        run.tracer.emit(
            "tool.approval",
            ctx.span,
            ctx.step_span,
            {**event, "status": "requested", "arguments": args[:1000]},
        )
        try:
            if self.stopping:  # the shutdown already began: park at once
                self._parked.add(approval)
                raise asyncio.CancelledError
            self._send(wire.encode(wire.APPROVAL_REQUEST, self.agent, wire.ORCHESTRATOR, request))
            run.pause_budget()  # the approval's own time limit applies, not the turn's
            try:
                decision = await future
            finally:
                run.resume_budget()
        except asyncio.CancelledError:
            if approval not in self._parked:  # the turn ended: nobody needs to decide any more
                withdrawn = msgspec.structs.replace(request, withdrawn=True)
                self._send(
                    wire.encode(wire.APPROVAL_REQUEST, self.agent, wire.ORCHESTRATOR, withdrawn)
                )
            raise
        finally:
            self._waiting.pop(approval, None)
            self._turns.pop(approval, None)
        run.tracer.emit(
            "tool.approval",
            ctx.span,
            ctx.step_span,
            {
                **event,
                "status": decision.decision,
                "decidedBy": decision.decided_by,
                "decidedAt": decision.decided_at,
                "reason": decision.reason,
            },
        )
        if decision.decision == "approved":
            return None
        if decision.decision == "denied":
            why = f": {decision.reason}" if decision.reason else " (no reason given)"
            return ToolResult.fail(
                ToolErrorInfo(
                    code=ErrorCode.E_TOOL_DENIED,
                    name="ToolDeniedError",
                    message=f"A human denied the call to '{ctx.tool_name}'{why}",
                    suggestion="Do not retry the same call; ask the user or try another way.",
                )
            )
        return ToolResult.fail(
            ToolErrorInfo(
                code=ErrorCode.E_TOOL_APPROVAL_TIMEOUT,
                name="ToolApprovalTimeoutError",
                message=f"Nobody approved the call to '{ctx.tool_name}' in time; it did not run.",
            )
        )


async def ask_approval(
    waits: ApprovalWaits | None, ctx: CallCtx, timeout_s: float | None
) -> ToolResult | None:
    """None when a human approved the call; an agent with nobody to ask (no orchestrator,
    as in an embedded test) refuses it rather than run it unapproved."""
    if waits is not None:
        return await waits.wait(ctx, timeout_s)
    return ToolResult.fail(
        ToolErrorInfo(
            code=ErrorCode.E_TOOL_DENIED,
            name="ToolDeniedError",
            message=f"The call to '{ctx.tool_name}' needs a human's approval, and this agent "
            "runs without an orchestrator to ask.",
        )
    )


def parked_result(name: str) -> ToolResult:
    """A waiting call's result when the agent stopped: run again when the turn resumes."""
    return ToolResult.fail(
        ToolErrorInfo(
            code=ErrorCode.E_TOOL_INTERRUPTED,
            name=PARKED,
            message=f"The call to '{name}' was waiting for approval when the agent stopped.",
        )
    )


def parked_calls(run: TurnRun) -> tuple[Message, list[tuple[ToolCall, Message]]] | None:
    """The last assistant message of a resumed turn and its calls parked at a stop, each with
    the result message that stands for it now; None when there are none."""
    messages = run.conversation.messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant" and message.tool_calls:
            by_call = {m.tool_call_id: m for m in messages[index + 1 :] if m.role == "tool"}
            parked = [
                (call, by_call[call.id])
                for call in message.tool_calls
                if call.id in by_call and _is_parked(by_call[call.id])
            ]
            return (message, parked) if parked else None
        if message.role == "user" and message.metadata.get("requestId") == run.input.request_id:
            return None  # the turn's own input: nothing of it was parked
    return None


def _is_parked(message: Message) -> bool:
    content = message.content or ""
    return f'"name":"{PARKED}"' in content


__all__ = ["ApprovalWaits", "approval_id", "ask_approval", "parked_calls", "parked_result"]
