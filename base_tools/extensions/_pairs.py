"""Removing messages without splitting a tool call from its results.

An assistant message with tool calls and the tool messages answering them form one group:
a group is removed whole or kept whole (providers reject a result without its call, and a
call without its result). Tool results whose call is gone are removed too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from goondan import Message


def safe_removals(
    messages: Sequence[Message], remove: Collection[str], keep: Collection[str] = ()
) -> list[str]:
    """The ids to remove, in conversation order: `remove` widened to whole groups (or
    narrowed where a group has a member in `keep`), plus orphaned tool results."""
    owner: dict[str, str] = {}  # tool call id -> assistant message id
    for message in messages:
        for call in message.tool_calls:
            owner[call.id] = message.id
    groups: dict[str, list[str]] = {}
    for message in messages:
        if message.tool_calls:
            groups.setdefault(message.id, []).append(message.id)
        elif message.role == "tool" and message.tool_call_id in owner:
            groups.setdefault(owner[message.tool_call_id], []).append(message.id)
    grouped = {member for members in groups.values() for member in members}
    doomed = set(remove) - (set(keep) - grouped)
    for members in groups.values():
        if not doomed.intersection(members):
            continue
        if set(keep).intersection(members):
            doomed.difference_update(members)
        else:
            doomed.update(members)
    for message in messages:
        if message.role == "tool" and message.tool_call_id not in owner:
            doomed.add(message.id)  # an orphaned result, whatever the window
    return [m.id for m in messages if m.id in doomed]


def size(message: Message) -> int:
    """Characters a message puts in the context: its text and its calls' arguments."""
    return len(message.content or "") + sum(
        len(call.name) + len(call.arguments) for call in message.tool_calls
    )
