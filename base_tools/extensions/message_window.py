"""`message-window`: keep the conversation to the last `maxMessages` messages (default 80).

Before each turn the oldest messages beyond the window are removed (`remove` events, so the
conversation log records it). A tool call is never separated from its results: a group cut
by the window goes whole, and orphaned tool results are removed even under the limit. The
current turn's own messages are never removed.
"""

from __future__ import annotations

from typing import Any

from base_tools.extensions import _config
from base_tools.extensions._pairs import safe_removals
from goondan import ExtensionApi, RemoveMessage, TurnMiddlewareContext, TurnResult


def register(api: ExtensionApi, config: dict[str, Any]) -> None:
    limit = _config.integer(config, "maxMessages", 80, minimum=1)

    async def window(ctx: TurnMiddlewareContext) -> TurnResult:
        state = ctx.conversation_state
        messages = list(state.next_messages)
        base_ids = {m.id for m in state.base_messages}
        current = {m.id for m in messages if m.id not in base_ids}  # this turn's input
        over = max(0, len(messages) - limit)
        targets = [m.id for m in messages[:over] if m.id not in current]
        for target in safe_removals(messages, targets, keep=current):
            ctx.emit_message_event(RemoveMessage(target))
        return await ctx.next()

    api.pipeline.register("turn", window)
