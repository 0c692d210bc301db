"""A readable transcript of one request across every agent it reached (`run --transcript`)."""

from __future__ import annotations

import json

from agentproc.conversation import read_messages
from agentproc.messages import Message
from goondan.paths import StatePaths

_MAX = 160


def render_transcript(paths: StatePaths, swarm: str, trace_id: str) -> str:
    """Every turn whose input carried `trace_id`, agent by agent, in the order they started."""
    sections: list[tuple[float, list[str]]] = []
    for directory in sorted((paths.swarm_dir(swarm) / "instances").glob("*/*")):
        for turn in _turns(read_messages(directory)):
            metadata = turn[0].metadata
            if metadata.get("traceId") == trace_id:
                lines = [f"[{directory.name}] {line}" for m in turn for line in _lines(m)]
                sections.append((float(metadata.get("receivedAt", 0)), lines))
    sections.sort(key=lambda section: section[0])
    return "\n".join(line for _, lines in sections for line in lines)


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
        try:
            result = json.loads(message.content or "{}")
        except ValueError:
            return [f"  <- {_clip(message.content or '')}"]
        body = result.get("output") if result.get("status") == "ok" else result.get("error")
        return [f"  <- {result.get('status')}: {_clip(json.dumps(body, ensure_ascii=False))}"]
    lines = [f"assistant: {_clip(message.content)}"] if message.content else []
    lines += [f"  -> {call.name} {_clip(call.arguments)}" for call in message.tool_calls]
    return lines


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX else text[: _MAX - 3] + "..."
