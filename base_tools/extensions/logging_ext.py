"""`logging`: one log line per turn, step and tool call (upstream's `logging` extension).

config: level (info) for turn and step lines; includeToolArgs (false) adds tool arguments to
the toolCall lines (logged at debug); includeTurnMetadata (true) adds the turn's metadata.
Errors are logged and re-raised.
"""

from __future__ import annotations

import time
from typing import Any

from base_tools.extensions import _config
from goondan import (
    ExtensionApi,
    StepMiddlewareContext,
    StepResult,
    ToolCallMiddlewareContext,
    ToolResult,
    TurnMiddlewareContext,
    TurnResult,
)

LEVELS = ("debug", "info", "warning", "error")


def register(api: ExtensionApi, config: dict[str, Any]) -> None:
    level = _config.string(config, "level", "info", choices=LEVELS)
    include_args = _config.boolean(config, "includeToolArgs", False)
    include_metadata = _config.boolean(config, "includeTurnMetadata", True)
    log = api.logger
    emit = getattr(log, level)

    async def turn(ctx: TurnMiddlewareContext) -> TurnResult:
        extra = {"metadata": dict(ctx.metadata)} if include_metadata else {}
        emit("[logging.turn] start", turnId=ctx.turn_id, instanceKey=ctx.instance_key, **extra)
        started = time.monotonic()
        try:
            result = await ctx.next()
        except Exception as exc:
            log.error("[logging.turn] failed", turnId=ctx.turn_id, error=repr(exc))
            raise
        emit(
            "[logging.turn] complete",
            turnId=ctx.turn_id,
            finishReason=result.finish_reason,
            steps=result.steps,
            ms=_ms(started),
        )
        return result

    async def step(ctx: StepMiddlewareContext) -> StepResult:
        emit(
            "[logging.step] start",
            turnId=ctx.turn_id,
            stepIndex=ctx.step_index,
            catalogSize=len(ctx.tool_catalog),
        )
        started = time.monotonic()
        try:
            result = await ctx.next()
        except Exception as exc:
            log.error("[logging.step] failed", stepIndex=ctx.step_index, error=repr(exc))
            raise
        emit(
            "[logging.step] complete",
            turnId=ctx.turn_id,
            stepIndex=ctx.step_index,
            status=result.status,
            toolCalls=len(result.tool_calls),
            shouldContinue=result.should_continue,
            ms=_ms(started),
        )
        return result

    async def tool_call(ctx: ToolCallMiddlewareContext) -> ToolResult:
        extra = {"args": ctx.args} if include_args else {}
        log.debug(
            "[logging.toolCall] start", tool=ctx.tool_name, toolCallId=ctx.tool_call_id, **extra
        )
        started = time.monotonic()
        result = await ctx.next()
        log.debug(
            "[logging.toolCall] complete",
            tool=ctx.tool_name,
            toolCallId=ctx.tool_call_id,
            status=result.status,
            code=result.error.code if result.error else None,
            ms=_ms(started),
        )
        return result

    api.pipeline.register("turn", turn)
    api.pipeline.register("step", step)
    api.pipeline.register("toolCall", tool_call)


def _ms(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 3)
