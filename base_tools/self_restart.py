"""`self-restart` tool of @goondan/base: ask for a restart of the orchestrator.

The tool only raises the flag: its output carries `restartRequested: true`, and the runtime,
seeing it in the tool result, restarts gracefully after the call (connectors included).
"""

from __future__ import annotations

from typing import Any

from goondan import ToolContext

DEFAULT_REASON = "tool:self-restart"


def request(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    reason = (args.get("reason") or "").strip() or DEFAULT_REASON
    ctx.logger.info("self_restart_requested", reason=reason)
    return {"ok": True, "restartRequested": True, "restartReason": reason}


handlers = {"request": request}
