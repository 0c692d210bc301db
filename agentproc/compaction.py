"""Summarising compaction: the oldest part of the conversation replaced by a summary that a
model writes.

A step whose model call is refused for a context-length overflow (`E_CONTEXT_OVERFLOW`)
compacts once and tries again (`step.py`); `message-compaction` in `mode: summarize` asks for
summaries through `ctx.summarize`. The summary is written by the agent's own model, or by
`compaction_provider` when the agent has one. A tool call and its results are never split:
they are summarised together or kept together.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from agentproc.messages import Message, ModelError, ModelRequest
from goondan.extensions import RemoveMessage, ReplaceMessage
from ipc.error_codes import ErrorCode

if TYPE_CHECKING:
    from agentproc.turn import TurnRun

SUMMARY_PREFIX = "[Summary of the earlier conversation]"
INSTRUCTIONS = (
    "You compact a conversation between a user, an AI assistant and its tools, so that the "
    "assistant can go on with only your summary in place of these messages. Write a concise "
    "summary that keeps: the user's goals and requests, decisions and their reasons, facts, "
    "names, numbers, file paths and identifiers that may matter later, what the tools "
    "returned that is still relevant, and what is still to do. Write plain text, no preamble."
)
_PER_MESSAGE = 4000  # characters of one message shown to the summariser (head and tail)


def size(message: Message) -> int:
    """Characters a message puts in the context: its text and its calls' arguments."""
    return len(message.content or "") + sum(
        len(call.name) + len(call.arguments) for call in message.tool_calls
    )


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A rough token count for when the provider reported none: four characters a token."""
    return sum(size(m) for m in messages) // 4


def oldest_part(messages: Sequence[Message], share: float = 0.5) -> list[Message]:
    """The oldest messages holding about `share` of the characters, ending where no tool
    result would lose its call, and never the last message."""
    if len(messages) < 2:
        return []
    target = sum(size(m) for m in messages) * share
    total = 0
    cut = 0
    for index, message in enumerate(messages[:-1]):
        total += size(message)
        cut = index + 1
        if total >= target:
            break
    # A cut before tool results would part them from their call: move it past them, or, when
    # they run to the end, back before the call.
    forward = cut
    while forward < len(messages) - 1 and messages[forward].role == "tool":
        forward += 1
    if messages[forward].role != "tool":
        cut = forward
    else:
        while cut > 0 and messages[cut].role == "tool":
            cut -= 1
    return list(messages[:cut])


def transcript(messages: Sequence[Message]) -> str:
    lines: list[str] = []
    for message in messages:
        text = _clip(message.content or "")
        if message.role == "tool":
            name = message.metadata.get("toolName", "tool")
            lines.append(f"[tool result of {name}] {text}")
            continue
        if text:
            lines.append(f"[{message.role}] {text}")
        for call in message.tool_calls:
            lines.append(f"[assistant called {call.name}] {_clip(call.arguments)}")
    return "\n\n".join(lines)


def _clip(text: str) -> str:
    if len(text) <= _PER_MESSAGE:
        return text
    half = _PER_MESSAGE // 2
    return f"{text[:half]}\n...[{len(text) - _PER_MESSAGE} characters left out]...\n{text[-half:]}"


async def summarize(run: TurnRun, messages: Sequence[Message]) -> str:
    """A summary of `messages`, written by the compaction model or the agent's own."""
    agent = run.agent
    provider = agent.compaction_provider or agent.provider
    request = ModelRequest(
        [
            Message(id="compaction-instructions", role="system", content=INSTRUCTIONS),
            Message(id="compaction-transcript", role="user", content=transcript(messages)),
        ],
        [],
        dict(agent.params),
    )
    reply = await provider.complete(request)
    run.meter.add(reply.usage)
    text = (reply.text or "").strip()
    if not text:
        raise ModelError("the model wrote an empty summary", code=ErrorCode.E_MODEL_EMPTY_OUTPUT)
    return text


def summary_message(message_id: str, text: str, count: int) -> Message:
    # A user message: every provider accepts it first in a conversation, where the summary sits.
    return Message(
        id=message_id,
        role="user",
        content=f"{SUMMARY_PREFIX}\n{text}",
        metadata={"compaction.summary": True, "compaction.removedCount": count},
    )


async def compact_on_overflow(run: TurnRun, step_span: str) -> bool:
    """The model refused the conversation as too long: replace its oldest half by a summary.
    False when there is nothing to compact or the summary could not be written."""
    messages = run.conversation.messages
    head = oldest_part(messages)
    if not head:
        return False
    started = time.monotonic()
    try:
        text = await summarize(run, head)
    except ModelError as exc:
        run.log.warning("compaction failed", code=exc.code, error=str(exc))
        return False
    replace(run, head, summary_message(run.next_id(), text, len(head)))
    run.log.info(
        "conversation compacted after a context overflow",
        removed=len(head),
        kept=len(run.conversation.messages) - 1,
    )
    run.tracer.emit(
        "turn.compacted",
        step_span,
        run.tracer.turn_span,
        {
            "reason": "overflow",
            "removedCount": len(head),
            "duration": round((time.monotonic() - started) * 1000),
        },
    )
    return True


def replace(run: TurnRun, head: Sequence[Message], summary: Message) -> None:
    """`head` leaves the conversation; the summary takes the place of its first message."""
    run.emit(ReplaceMessage(head[0].id, summary))
    for message in head[1:]:
        run.emit(RemoveMessage(message.id))


__all__ = [
    "compact_on_overflow",
    "estimate_tokens",
    "oldest_part",
    "summarize",
    "summary_message",
]
