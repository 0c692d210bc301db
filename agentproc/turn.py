"""One Turn: the user's input, then Steps (LLM call -> tool calls -> results) until the model
answers without tool calls or the step limit is reached."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

import msgspec
import structlog

from agentproc.conversation import Conversation
from agentproc.messages import Message, ModelError, ModelRequest, ToolCall, Usage
from agentproc.providers import Provider
from agentproc.tool_executor import execute_tool_call
from agentproc.tool_registry import ToolRegistry
from goondan.tools import AgentRuntime, ToolContext

FinishReason = Literal["text_response", "max_steps", "error"]
_result_encoder = msgspec.json.Encoder()


class AgentDefinition(msgspec.Struct, frozen=True):
    """Everything about this agent that does not change between turns."""

    name: str
    provider: Provider
    registry: ToolRegistry
    system_prompt: str | None
    params: dict[str, object]
    max_steps: int


class TurnInput(msgspec.Struct, frozen=True):
    input: str
    instance_key: str
    trace_id: str
    source: str  # "cli:<name>", "agent:<name>", ...
    request_id: str = ""


class Replay(msgspec.Struct, frozen=True):
    """A request seen before: its turn's final answer, or None if the turn never finished."""

    answer: str | None


def find_request(messages: list[Message], request_id: str) -> Replay | None:
    """Whether this conversation already holds the turn of `request_id` (a redelivery)."""
    if not request_id:
        return None
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "user" and message.metadata.get("requestId") == request_id:
            rest = messages[index + 1 :]
            turn = rest[: next((i for i, m in enumerate(rest) if m.role == "user"), len(rest))]
            last = turn[-1] if turn else None
            if last is not None and last.role == "assistant" and not last.tool_calls:
                return Replay(last.content or "")
            return Replay(None)
    return None


class TurnOutcome(msgspec.Struct, frozen=True):
    text: str
    finish_reason: FinishReason
    steps: int
    usage: Usage
    error_code: str | None = None  # set when finish_reason == "error"
    restart_reason: str | None = None  # a tool asked for a swarm restart (self-restart)


async def run_turn(
    agent: AgentDefinition,
    conversation: Conversation,
    turn_input: TurnInput,
    runtime: AgentRuntime,
    workdir: Path,
    *,
    resume: bool = False,
    inbox: Callable[[], list[Message]] | None = None,
) -> TurnOutcome:
    """Run one turn. With `resume`, the input is already in the conversation (a redelivered
    request whose turn was cut short): continue from where it stopped. `inbox` yields
    messages that arrived meanwhile (async agent responses); they join before each step."""
    turn_id = secrets.token_hex(6)
    log = structlog.get_logger().bind(
        agent=agent.name, instanceKey=turn_input.instance_key, traceId=turn_input.trace_id
    )
    started = time.monotonic()
    seq = 0

    def next_id() -> str:
        nonlocal seq
        seq += 1
        return f"{turn_id}-{seq}"

    if not resume:
        conversation.append(
            Message(
                id=next_id(),
                role="user",
                content=turn_input.input,
                metadata={
                    "source": turn_input.source,
                    "requestId": turn_input.request_id,
                    "traceId": turn_input.trace_id,
                    "receivedAt": time.time(),
                },
            )
        )
    system = [Message(id="system", role="system", content=agent.system_prompt)]
    prefix = system if agent.system_prompt else []
    catalog = agent.registry.definitions()
    catalog_names = {d.name for d in catalog}
    input_tokens = output_tokens = 0
    last_text = ""
    restart_reason: str | None = None

    for step in range(1, agent.max_steps + 1):
        for message in inbox() if inbox is not None else ():
            conversation.append(message)
        request = ModelRequest(prefix + conversation.messages, catalog, agent.params)
        try:
            reply = await agent.provider.complete(request)
        except ModelError as exc:
            log.warning("model call failed", code=exc.code, error=str(exc), step=step)
            text = f"The model call failed ({exc.code}): {exc}"
            conversation.append(Message(id=next_id(), role="assistant", content=text))
            return TurnOutcome(
                text, "error", step, Usage(input_tokens, output_tokens), error_code=exc.code
            )
        input_tokens += reply.usage.input_tokens
        output_tokens += reply.usage.output_tokens
        assistant = Message(
            id=next_id(), role="assistant", content=reply.text, tool_calls=reply.tool_calls
        )
        conversation.append(assistant)
        if reply.text:
            last_text = reply.text
        if not reply.tool_calls:
            log.info("turn completed", steps=step, ms=round((time.monotonic() - started) * 1000))
            outcome = _outcome(reply.text or "", "text_response", step, input_tokens, output_tokens)
            return msgspec.structs.replace(outcome, restart_reason=restart_reason)

        def make_context(call: ToolCall, assistant: Message = assistant) -> ToolContext:
            return ToolContext(
                agent_name=agent.name,
                instance_key=turn_input.instance_key,
                turn_id=turn_id,
                trace_id=turn_input.trace_id,
                tool_call_id=call.id,
                message=assistant,
                workdir=workdir,
                logger=log.bind(tool=call.name, toolCallId=call.id),
                runtime=runtime,
            )

        # Calls of one response run concurrently; results go back in the order issued.
        results = await asyncio.gather(
            *(
                execute_tool_call(agent.registry, catalog_names, call, make_context)
                for call in reply.tool_calls
            )
        )
        for call, result in zip(reply.tool_calls, results, strict=True):
            log.info("tool call", tool=call.name, status=result.status)
            restart_reason = _restart_requested(result.output) or restart_reason
            conversation.append(
                Message(
                    id=next_id(),
                    role="tool",
                    content=_result_encoder.encode(result).decode(),
                    tool_call_id=call.id,
                )
            )

    text = last_text or f"Reached the step limit ({agent.max_steps}) for this turn."
    log.warning("turn stopped at the step limit", steps=agent.max_steps)
    return _outcome(text, "max_steps", agent.max_steps, input_tokens, output_tokens)


def _restart_requested(output: object) -> str | None:
    """The self-restart convention: an ok tool output with `restartRequested: true`."""
    if isinstance(output, dict) and output.get("restartRequested") is True:
        return str(output.get("restartReason") or "tool:self-restart")
    return None


def _outcome(
    text: str, reason: FinishReason, steps: int, input_tokens: int, output_tokens: int
) -> TurnOutcome:
    return TurnOutcome(text, reason, steps, Usage(input_tokens, output_tokens))
