"""Conversation messages, as tools (`ctx.message`) and extensions (`conversation_state`) see them.

The agent loop keeps one neutral model; provider adapters translate it to their wire format.
`metadata` never reaches a model: it is for the runtime and for extensions.

    Message(id="m1", role="user", content="hello", metadata={"pinned": True})
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Role = Literal["system", "user", "assistant", "tool"]


# Not tracked by the cyclic garbage collector (`gc=False`): an agent holds every loaded
# conversation's messages, and each collection would walk them all, a pause that grows with
# the conversations loaded. A message cannot be part of a reference cycle: its fields are
# text, tool calls and JSON-like metadata, and it is written to the conversation as JSON.


class ToolCall(msgspec.Struct, frozen=True, gc=False):
    id: str
    name: str
    arguments: str  # the JSON text as the model produced it (may be malformed)


class Message(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    id: str
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # role == "tool": the call this answers
    metadata: dict[str, Any] = {}
