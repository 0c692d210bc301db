"""`wait` tool of @goondan/base: pause for a number of seconds without blocking other work."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from goondan import ErrorCode, ToolContext, ToolError

MAX_SECONDS = 300


async def seconds(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    value = args["seconds"]
    if not math.isfinite(value) or not 0 <= value <= MAX_SECONDS:
        raise ToolError(
            f"seconds must be between 0 and {MAX_SECONDS}, got {value}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    await asyncio.sleep(value)
    return {"waitedSeconds": value, "waitedMs": round(value * 1000)}


handlers = {"seconds": seconds}
