"""`message-compaction`: keep the conversation under a message count and a character budget,
or, in `mode: summarize`, under a token budget by summarising its oldest part.

config (defaults): maxMessages 40, maxCharacters 12000, retainLastMessages 8, mode `remove`
(or `truncate`, or `summarize`), appendSummary true, summaryPrefix "[message-compaction]";
for `summarize`, maxTokens 100000.

Before each turn, when the conversation is over either limit:
- `remove`: the oldest messages go, except the last `retainLastMessages`, messages with
  `metadata.pinned: true` and the current turn's own; `truncate`: the conversation is cleared
  and those kept messages are appended again.
- A tool call is never separated from its results (groups go or stay whole).
- If what is left is still over `maxCharacters`, the longest older texts are cut (never
  below 200 characters, never the current turn's), so compaction always makes progress.
- With `appendSummary`, a system message records what was done (it takes the place of the
  first removed message, so it reads where the history was).
These two modes make no LLM call: deterministic and cheap.

`summarize`: before each turn, when the conversation holds more than `maxTokens` tokens
(`maxMessages` and `maxCharacters` do not apply), the messages the other modes would remove
are summarised by the agent's model (`ctx.summarize`), and the summary, a user message
starting with `summaryPrefix`, takes their place. The token count is the input tokens
the provider reported for the last step, plus an estimate (characters / 4) for the messages
added since; an estimate of the whole conversation when no step reported usage. When the
summary cannot be written, the conversation is left as it is (a context overflow still
compacts it, in the runtime).
"""

from __future__ import annotations

import secrets
import sys
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
    StepMiddlewareContext,
    StepResult,
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
    mode = _config.string(config, "mode", "remove", choices=("remove", "truncate", "summarize"))
    summary = _config.boolean(config, "appendSummary", True)
    prefix = _config.string(config, "summaryPrefix", "[message-compaction]")
    max_tokens = _config.integer(config, "maxTokens", 100_000, minimum=1)
    if mode == "summarize":  # the token budget is its only trigger
        max_messages = max_chars = sys.maxsize

    async def compact(ctx: TurnMiddlewareContext) -> TurnResult:
        state = ctx.conversation_state
        messages = list(state.next_messages)
        total = sum(size(m) for m in messages)
        tokens = _tokens(api.state.get(), messages) if mode == "summarize" else 0
        if len(messages) <= max_messages and total <= max_chars and tokens <= max_tokens:
            return await ctx.next()
        base_ids = {m.id for m in state.base_messages}
        keep = {m.id for m in messages if m.id not in base_ids}  # the current turn
        keep.update(m.id for m in messages[len(messages) - retain :] if retain)
        keep.update(m.id for m in messages if m.metadata.get("pinned") is True)
        removed = safe_removals(messages, [m.id for m in messages if m.id not in keep], keep)
        if mode == "summarize":
            if removed and await _summarize(ctx, api, messages, removed, prefix, tokens):
                api.state.set(None)  # the reported count was of the longer conversation
            return await ctx.next()
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
    if mode == "summarize":

        async def measure(ctx: StepMiddlewareContext) -> StepResult:
            result = await ctx.next()
            if result.usage.input_tokens:
                count = len(ctx.conversation_state.next_messages)
                api.state.set({"inputTokens": result.usage.input_tokens, "messages": count})
            return result

        api.pipeline.register("step", measure)


def _tokens(saved: dict[str, Any] | None, messages: list[Message]) -> int:
    """The provider's count for the last step's request, plus an estimate for what came
    after it; an estimate of everything when there is no count (or it no longer fits)."""
    if saved is not None:
        reported, counted = saved.get("inputTokens"), saved.get("messages")
        if isinstance(reported, int) and isinstance(counted, int) and counted <= len(messages):
            return reported + sum(size(m) for m in messages[counted:]) // 4
    return sum(size(m) for m in messages) // 4


async def _summarize(
    ctx: TurnMiddlewareContext,
    api: ExtensionApi,
    messages: list[Message],
    removed: list[str],
    prefix: str,
    tokens: int,
) -> bool:
    gone = set(removed)
    old = [m for m in messages if m.id in gone]
    try:
        text = await ctx.summarize(old)
    except Exception as exc:  # noqa: BLE001 - the turn goes on uncompacted
        api.logger.warning("summary failed, conversation left as it is", error=str(exc))
        return False
    note = Message(
        id=f"compaction-{secrets.token_hex(6)}",
        role="user",  # every provider accepts a user message first in the conversation
        content=f"{prefix} Summary of the earlier conversation:\n{text}",
        metadata={
            "compaction.summary": True,
            "compaction.mode": "summarize",
            "compaction.removedCount": len(removed),
        },
    )
    ctx.emit_message_event(ReplaceMessage(removed[0], note))
    for target in removed[1:]:
        ctx.emit_message_event(RemoveMessage(target))
    api.logger.info(
        "conversation summarised",
        removed=len(removed),
        tokens=tokens,
        kept=len(messages) - len(old),
    )
    return True


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
