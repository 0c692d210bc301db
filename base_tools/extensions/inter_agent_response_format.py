"""`inter-agent-response-format`: async agent responses as readable text for the model.

An `agents__request {async: true}` answer joins the conversation as a JSON user message with
`metadata.__goondanInterAgentResponse`. Before each step this replaces such messages (once)
with text:

    [inter-agent response] from researcher -> assistant status=ok requestId=7
    <the response, or error(CODE): message>

config: includeRequestMetadata (false) appends the request's metadata when it has any.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from base_tools.extensions import _config
from goondan import ErrorCode, ExtensionApi, ReplaceMessage, StepMiddlewareContext, StepResult

KEY = "__goondanInterAgentResponse"
DONE = "__goondanInterAgentResponseFormatted"


def register(api: ExtensionApi, config: dict[str, Any]) -> None:
    with_metadata = _config.boolean(config, "includeRequestMetadata", False)

    async def format_responses(ctx: StepMiddlewareContext) -> StepResult:
        for message in list(ctx.conversation_state.next_messages):
            info = message.metadata.get(KEY) if message.metadata else None
            if not isinstance(info, dict) or message.metadata.get(DONE):
                continue
            text = _text(info, ctx.agent_name, with_metadata)
            metadata = {**message.metadata, DONE: True}
            formatted = msgspec.structs.replace(message, content=text, metadata=metadata)
            ctx.emit_message_event(ReplaceMessage(message.id, formatted))
        return await ctx.next()

    api.pipeline.register("step", format_responses)


def _text(info: dict[str, Any], me: str, with_metadata: bool) -> str:
    source = info.get("fromAgentId", "?")
    target = info.get("toAgentId") or me
    head = (
        f"[inter-agent response] from {source} -> {target} "
        f"status={info.get('status', '?')} requestId={info.get('requestId', '?')}"
    )
    error = info.get("error")
    if isinstance(error, dict):
        body = f"error({error.get('code', ErrorCode.E_UNKNOWN)}): {error.get('message', '')}"
    else:
        response = info.get("response")
        body = response if isinstance(response, str) else json.dumps(response, ensure_ascii=False)
    if with_metadata and isinstance(info.get("requestMetadata"), dict):
        body += "\nrequest metadata: " + json.dumps(info["requestMetadata"], ensure_ascii=False)
    return f"{head}\n{body}"
