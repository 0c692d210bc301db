"""Readable conversations: one request across every agent it reached (`run --transcript`), and
a stored instance's conversations (`instance show`)."""

from __future__ import annotations

import json
from typing import Any

from agentproc.conversation import read_messages
from agentproc.messages import Message
from goondan.paths import StatePaths, stored_agents

_MAX = 160
# `instance show` cuts a content past this many lines or characters (--full shows it whole).
SHOW_LINES = 12
SHOW_CHARS = 1200
SHOW_ARGS_CHARS = 300


def render_transcript(paths: StatePaths, swarm: str, trace_id: str) -> str:
    """Every turn whose input carried `trace_id`, agent by agent, in the order they started."""
    sections: list[tuple[float, list[str]]] = []
    instances = sorted((paths.swarm_dir(swarm) / "instances").glob("*"))
    for directory in [agent for key in instances for agent in stored_agents(key)]:
        for turn in _turns(read_messages(directory)):
            metadata = turn[0].metadata
            if metadata.get("traceId") == trace_id:
                lines = [f"[{directory.name}] {line}" for m in turn for line in _lines(m)]
                sections.append((float(metadata.get("receivedAt", 0)), lines))
    sections.sort(key=lambda section: section[0])
    return "\n".join(line for _, lines in sections for line in lines)


def render_conversation(messages: list[Message], *, full: bool = False) -> list[str]:
    """One agent's conversation for a reader: each message under its role (a user input with
    its source), tool calls as `-> name args`, each result under `tool NAME: status`; long
    contents are cut unless `full`."""
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    lines: list[str] = []
    for message in messages:
        if message.role == "tool":
            status, body = tool_result(message)
            name = names.get(message.tool_call_id or "") or message.metadata.get("toolName", "?")
            lines.append(f"tool {name}: {status}")
            lines += _indented(body, full)
            continue
        source = message.metadata.get("source") if message.role == "user" else None
        lines.append(f"{message.role} ({source}):" if source else f"{message.role}:")
        if message.content or not message.tool_calls:
            lines += _indented(message.content or "", full)
        lines += [
            f"  -> {call.name} {_cut_line(call.arguments, full)}" for call in message.tool_calls
        ]
    return lines


def tool_result(message: Message) -> tuple[str, str]:
    """A tool message's status and its output (or error) as text: a string as it is, any
    other value as JSON."""
    try:
        result: Any = json.loads(message.content or "{}")
    except ValueError:
        return "?", message.content or ""
    if not isinstance(result, dict) or "status" not in result:
        return "?", message.content or ""
    body = result.get("output") if result.get("status") == "ok" else result.get("error")
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False)
    return str(result.get("status")), text


def _indented(text: str, full: bool) -> list[str]:
    if not full and (len(text) > SHOW_CHARS or text.count("\n") >= SHOW_LINES):
        kept = "\n".join(text.split("\n")[:SHOW_LINES])[:SHOW_CHARS]
        text = f"{kept}\n… ({len(text) - len(kept):,} more chars)"
    return ["  " + line for line in text.split("\n")]


def _cut_line(text: str, full: bool) -> str:
    if full or len(text) <= SHOW_ARGS_CHARS:
        return text
    return f"{text[:SHOW_ARGS_CHARS]}… ({len(text) - SHOW_ARGS_CHARS:,} more chars)"


def _turns(messages: list[Message]) -> list[list[Message]]:
    turns: list[list[Message]] = []
    for message in messages:
        if message.role == "user":
            turns.append([message])
        elif turns:
            turns[-1].append(message)
    return turns


def _lines(message: Message) -> list[str]:
    if message.role == "user":
        return [f"user: {_clip(message.content or '')}"]
    if message.role == "tool":
        status, body = tool_result(message)
        if status == "?":
            return [f"  <- {_clip(body)}"]
        return [f"  <- {status}: {_clip(body)}"]
    lines = [f"assistant: {_clip(message.content)}"] if message.content else []
    lines += [f"  -> {call.name} {_clip(call.arguments)}" for call in message.tool_calls]
    return lines


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX else text[: _MAX - 3] + "..."
