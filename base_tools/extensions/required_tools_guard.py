"""`required-tools-guard`: the turn may not end before the required tools have succeeded.

config: requiredTools (names), mode `any` (default, as upstream: one of them) or `all` (each
of them; what `Agent.spec.requiredTools` asks for), errorMessage (the reminder; a default
names the missing tools). When a step would end the turn and the requirement is not met, a
reminder is appended and the turn continues; `maxStepsPerTurn` still bounds it. Successes are
counted per turn (a pending long-running call counts as submitted, i.e. done).
"""

from __future__ import annotations

import itertools
from typing import Any

from base_tools.extensions import _config
from goondan import (
    AppendMessage,
    ExtensionApi,
    Message,
    StepMiddlewareContext,
    StepResult,
    ToolCallMiddlewareContext,
    ToolResult,
    TurnMiddlewareContext,
    TurnResult,
)


def register(api: ExtensionApi, config: dict[str, Any]) -> None:
    required = _config.strings(config, "requiredTools")
    mode = _config.string(config, "mode", "any", choices=("any", "all"))
    reminder = _config.string(config, "errorMessage", "")
    if not required:
        return
    succeeded: dict[str, set[str]] = {}  # turn id -> required tools that succeeded
    ids = itertools.count(1)

    def missing(turn_id: str) -> list[str]:
        done = succeeded.get(turn_id, set())
        if mode == "any" and done:
            return []
        return [name for name in required if name not in done]

    async def per_turn(ctx: TurnMiddlewareContext) -> TurnResult:
        succeeded[ctx.turn_id] = set()
        try:
            return await ctx.next()
        finally:
            succeeded.pop(ctx.turn_id, None)

    async def watch(ctx: ToolCallMiddlewareContext) -> ToolResult:
        result = await ctx.next()
        if ctx.tool_name in required and result.status in ("ok", "pending"):
            succeeded.setdefault(ctx.turn_id, set()).add(ctx.tool_name)
        return result

    async def guard(ctx: StepMiddlewareContext) -> StepResult:
        result = await ctx.next()
        if result.status != "completed" or result.should_continue:
            return result
        still = missing(ctx.turn_id)
        if not still:
            return result
        which = "one of these tools" if mode == "any" else "these tools"
        text = reminder or (
            f"Before you finish, you must call {which} successfully: {', '.join(still)}."
        )
        ctx.emit_message_event(
            AppendMessage(
                Message(
                    id=f"required-tools-{ctx.turn_id}-{next(ids)}",
                    role="user",
                    content=text,
                    metadata={"__goondanRequiredToolsGuard": still},
                )
            )
        )
        api.logger.info("turn kept going: required tools missing", missing=still)
        result.should_continue = True
        return result

    api.pipeline.register("turn", per_turn)
    api.pipeline.register("toolCall", watch)
    api.pipeline.register("step", guard)
