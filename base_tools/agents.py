"""`agents` tool of @goondan/base: talk to the other agents of the swarm.

`request` and `send` name what they send: an `eventType` and `metadata`, which the target's
middleware reads as `ctx.runtime.inbound.event_type` / `event_metadata`, and the `eventId`
they return, which is the target's `ctx.runtime.inbound.event_id`.
"""

from __future__ import annotations

import secrets
from typing import Any

from base_tools._workspace import resolve_path
from goondan import ErrorCode, ToolContext, ToolError


def _event(args: dict[str, Any]) -> dict[str, Any]:
    """The event's id, type and metadata, as the runtime's `request` / `send` take them."""
    return {
        "event_id": f"agent_event_{secrets.token_hex(8)}",
        "event_type": args.get("eventType") or None,
        "metadata": args.get("metadata") or None,
    }


async def request(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    target = args["target"]
    if not args["input"].strip():
        raise ToolError("input must not be empty", code=ErrorCode.E_TOOL_INVALID_ARGS)
    event = _event(args)
    if args.get("async"):
        cid = ctx.runtime.request_async(
            target,
            args["input"],
            instance_key=args.get("instanceKey"),
            timeout_ms=args.get("timeoutMs"),
            **event,
        )
        return {
            "target": target,
            "eventId": event["event_id"],
            "correlationId": cid,
            "accepted": True,
            "async": True,
        }
    reply = await ctx.runtime.request(
        target,
        args["input"],
        instance_key=args.get("instanceKey"),
        timeout_ms=args.get("timeoutMs"),
        **event,
    )
    return {
        "target": reply.target,
        "eventId": reply.event_id,
        "response": reply.response,
        "correlationId": reply.correlation_id,
        "instanceKey": reply.instance_key,
        "accepted": True,
        "async": False,
    }


async def send(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    event_id = await ctx.runtime.send(
        args["target"], args["input"], instance_key=args.get("instanceKey"), **_event(args)
    )
    return {"target": args["target"], "eventId": event_id, "accepted": True}


async def spawn(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    cwd = None
    if args.get("cwd"):
        # The same sandbox as file-system and bash: the new instance works where this one
        # may, not anywhere on the host.
        path = resolve_path(ctx.workdir, args["cwd"], what="cwd")
        if path.exists() and not path.is_dir():
            raise ToolError(
                f"cwd {args['cwd']!r} is not a directory", code=ErrorCode.E_TOOL_INVALID_ARGS
            )
        cwd = str(path)
    spawned = await ctx.runtime.spawn(args["target"], instance_key=args.get("instanceKey"), cwd=cwd)
    return {**spawned, "cwd": spawned.get("cwd")}  # null when none was given, as upstream


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
