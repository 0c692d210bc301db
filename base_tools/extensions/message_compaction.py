"""`message-compaction`: keep the conversation under a message count and a character budget.

config (defaults): maxMessages 40, maxCharacters 12000, retainLastMessages 8, mode `remove`
(or `truncate`), appendSummary true, summaryPrefix "[message-compaction]".

Before each turn, when the conversation is over either limit:
- `remove`: the oldest messages go, except the last `retainLastMessages`, messages with
  `metadata.pinned: true` and the current turn's own; `truncate`: the conversation is cleared
  and those kept messages are appended again.
- A tool call is never separated from its results (groups go or stay whole).
- If what is left is still over `maxCharacters`, the longest older texts are cut (never
  below 200 characters, never the current turn's), so compaction always makes progress.
- With `appendSummary`, a system message records what was done (it takes the place of the
  first removed message, so it reads where the history was).
No LLM summarisation: this is deterministic and cheap.
"""

from __future__ import annotations

import secrets
from typing import Any

import msgspec

from base_tools.extensions import _config
from base_tools.extensions._pairs import safe_removals, size
from goondan import (
    AppendMessage,
    ExtensionApi,
    Message,
    RemoveMessage,
    ReplaceMessage,
    TruncateMessages,
    TurnMiddlewareContext,
    TurnResult,
)

CUT_MARK = "\n...[truncated by message-compaction]"
MIN_KEPT_CHARS = 200


def register(api: ExtensionApi, config: dict[str, Any]) -> None:
    max_messages = _config.integer(config, "maxMessages", 40, minimum=1)
    max_chars = _config.integer(config, "maxCharacters", 12000, minimum=1)
    retain = _config.integer(config, "retainLastMessages", 8, minimum=0)
    mode = _config.string(config, "mode", "remove", choices=("remove", "truncate"))
    summary = _config.boolean(config, "appendSummary", True)
    prefix = _config.string(config, "summaryPrefix", "[message-compaction]")

    async def compact(ctx: TurnMiddlewareContext) -> TurnResult:
        state = ctx.conversation_state
        messages = list(state.next_messages)
        total = sum(size(m) for m in messages)
        if len(messages) <= max_messages and total <= max_chars:
            return await ctx.next()
        base_ids = {m.id for m in state.base_messages}
        keep = {m.id for m in messages if m.id not in base_ids}  # the current turn
        keep.update(m.id for m in messages[len(messages) - retain :] if retain)
        keep.update(m.id for m in messages if m.metadata.get("pinned") is True)
        removed = safe_removals(messages, [m.id for m in messages if m.id not in keep], keep)
        gone = set(removed)
        removed_chars = sum(size(m) for m in messages if m.id in gone)
        remaining = [m for m in messages if m.id not in gone]
        note = _summary(prefix, mode, len(removed), removed_chars) if summary else None
        if mode == "truncate":
            ctx.emit_message_event(TruncateMessages())
            if note is not None:
                ctx.emit_message_event(AppendMessage(note))
            for message in remaining:
                ctx.emit_message_event(AppendMessage(message))
        else:
            for index, target in enumerate(removed):
                if index == 0 and note is not None:
                    ctx.emit_message_event(ReplaceMessage(target, note))
                else:
                    ctx.emit_message_event(RemoveMessage(target))
            if note is not None and not removed:
                ctx.emit_message_event(AppendMessage(note))
        current = {m.id for m in messages if m.id not in base_ids}
        _cut_texts(ctx, remaining, max_chars, current)
        api.logger.info(
            "conversation compacted",
            mode=mode,
            removed=len(removed),
            removedCharacters=removed_chars,
            kept=len(remaining),
        )
        return await ctx.next()

    api.pipeline.register("turn", compact)


def _summary(prefix: str, mode: str, count: int, chars: int) -> Message:
    return Message(
        id=f"compaction-{secrets.token_hex(6)}",
        role="system",
        content=f"{prefix} mode={mode} removed={count} chars={chars}: earlier messages of "
        "this conversation were removed to keep it within its limits.",
        metadata={
            "compaction.summary": True,
            "compaction.mode": mode,
            "compaction.removedCount": count,
            "compaction.removedCharacters": chars,
        },
    )


def _cut_texts(
    ctx: TurnMiddlewareContext, remaining: list[Message], max_chars: int, current: set[str]
) -> None:
    """Still over budget: shorten the longest older texts first, never below a floor."""
    excess = sum(size(m) for m in remaining) - max_chars
    for message in sorted(remaining, key=lambda m: -len(m.content or "")):
        if excess <= 0:
            return
        if message.id in current:
            continue
        text = message.content or ""
        room = len(text) - MIN_KEPT_CHARS
        if room <= len(CUT_MARK):
            continue
        cut = min(room, excess + len(CUT_MARK))
        shorter = text[: len(text) - cut] + CUT_MARK
        ctx.emit_message_event(
            ReplaceMessage(message.id, msgspec.structs.replace(message, content=shorter))
        )
        excess -= cut - len(CUT_MARK)
