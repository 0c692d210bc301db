"""`agents` tool of @goondan/base: talk to the other agents of the swarm."""

from __future__ import annotations

from typing import Any

from goondan import ErrorCode, ToolContext, ToolError


async def request(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    target = args["target"]
    if not args["input"].strip():
        raise ToolError("input must not be empty", code=ErrorCode.E_TOOL_INVALID_ARGS)
    if args.get("async"):
        cid = ctx.runtime.request_async(
            target,
            args["input"],
            instance_key=args.get("instanceKey"),
            timeout_ms=args.get("timeoutMs"),
        )
        return {"target": target, "correlationId": cid, "accepted": True, "async": True}
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


async def spawn(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    return await ctx.runtime.spawn(args["target"], instance_key=args.get("instanceKey"))


async def list_(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    return await ctx.runtime.list(include_all=bool(args.get("includeAll")))


def catalog(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    info = ctx.runtime.catalog()
    return {
        **info,
        "availableCount": len(info["availableAgents"]),
        "callableCount": len(info["callableAgents"]),
    }


handlers = {
    "request": request,
    "send": send,
    "spawn": spawn,
    "list": list_,
    "catalog": catalog,
}
