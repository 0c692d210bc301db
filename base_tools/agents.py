"""`agents` tool of @goondan/base: talk to the other agents of the swarm."""

from __future__ import annotations

from typing import Any

from goondan import ToolContext, ToolError


async def request(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    target = args["target"]
    if not args["input"].strip():
        raise ToolError("input must not be empty", code="E_TOOL_INVALID_ARGS")
    reply = await ctx.runtime.request(
        target,
        args["input"],
        instance_key=args.get("instanceKey"),
        timeout_ms=args.get("timeoutMs"),
    )
    return {
        "target": reply.target,
        "response": reply.response,
        "correlationId": reply.correlation_id,
        "instanceKey": reply.instance_key,
        "accepted": True,
        "async": False,
    }


async def send(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    await ctx.runtime.send(args["target"], args["input"], instance_key=args.get("instanceKey"))
    return {"target": args["target"], "accepted": True}


def catalog(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    return ctx.runtime.catalog()


handlers = {"request": request, "send": send, "catalog": catalog}
