"""`context-message`: one system message, built before each turn from `ctx.runtime`.

Segments, each switched on by config, in this order: the agent's prompt
(`includeAgentPrompt`), the swarm catalog (`includeSwarmCatalog`, followed by
`swarmCatalogInstruction`), the inbound event (`includeInboundContext`), the calling agent
(`includeCallContext`) and who the message is from (`includeRouteSummary`: the caller when
there is one, else the inbound source; only with the inbound or call segment on).

The message is appended once: it carries the sha256 of its text in
`metadata.__goondanContextMessage {promptHash, segmentIds}`, and a turn whose text is already
in the conversation appends nothing. What happened is recorded in `ctx.metadata
["extension.events"]` (`context.segment.resolved`, `context.message.appended`,
`context.message.duplicate`, `context.message.empty`).

Unlike upstream Goondan, this runtime sends `spec.prompt` as the system prompt of every model
request itself, so the prompt segment is resolved but not repeated (`included: false,
reason: sent by the runtime`): the model sees the prompt once, as it does upstream.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from typing import Any

from base_tools.extensions import _config
from goondan import (
    AppendMessage,
    ExtensionApi,
    ExtensionConfigError,
    Message,
    TurnMiddlewareContext,
    TurnResult,
)

NAME = "context-message"
MARKER = "__goondanContextMessage"
EVENTS = "extension.events"
DEFAULT_INSTRUCTION = (
    "When the agent to delegate to is unclear, call agents__catalog for the current list "
    "of callableAgents."
)
ORDER = (
    "agent.prompt.system",
    "runtime.swarm.catalog",
    "runtime.inbound",
    "runtime.call",
    "runtime.route.summary",
)


def register(api: ExtensionApi, config: dict[str, Any]) -> None:
    include_prompt = _config.boolean(config, "includeAgentPrompt", True)
    include_catalog = _config.boolean(config, "includeSwarmCatalog", False)
    include_inbound = _config.boolean(config, "includeInboundContext", False)
    include_call = _config.boolean(config, "includeCallContext", False)
    include_route = _config.boolean(config, "includeRouteSummary", False)
    instruction = _config.string(config, "swarmCatalogInstruction", DEFAULT_INSTRUCTION).strip()
    if not instruction:
        raise ExtensionConfigError("swarmCatalogInstruction must not be blank")

    async def context_message(ctx: TurnMiddlewareContext) -> TurnResult:
        segments: dict[str, str] = {}
        if include_prompt:
            prompt = ctx.runtime.agent.prompt
            if prompt is not None and prompt.system and prompt.system.strip():
                _record(
                    ctx,
                    "context.segment.resolved",
                    id=ORDER[0],
                    included=False,
                    reason="sent by the runtime",
                )
            else:
                _record(ctx, "context.segment.resolved", id=ORDER[0], included=False)
        if include_catalog:
            segments[ORDER[1]] = _catalog(ctx, instruction)
            _record(ctx, "context.segment.resolved", id=ORDER[1], included=True)
        if include_inbound:
            segments[ORDER[2]] = _inbound(ctx)
            _record(ctx, "context.segment.resolved", id=ORDER[2], included=True)
        if include_call:
            call = _call(ctx)
            if call is not None:
                segments[ORDER[3]] = call
            _record(ctx, "context.segment.resolved", id=ORDER[3], included=call is not None)
        if include_route and (include_inbound or include_call):
            segments[ORDER[4]] = _route(ctx)
            _record(ctx, "context.segment.resolved", id=ORDER[4], included=True)
        if not segments:
            _record(ctx, "context.message.empty")
            return await ctx.next()
        ids = [key for key in ORDER if key in segments]
        text = "\n\n".join(segments[key] for key in ids)
        digest = hashlib.sha256(text.encode()).hexdigest()
        if _present(ctx.conversation_state.next_messages, digest, text):
            _record(ctx, "context.message.duplicate", promptHash=digest)
            return await ctx.next()
        message = Message(
            id=f"context-{secrets.token_hex(6)}",
            role="system",
            content=text,
            metadata={MARKER: {"promptHash": digest, "segmentIds": ids}, "extension": NAME},
        )
        ctx.emit_message_event(AppendMessage(message))
        _record(ctx, "context.message.appended", promptHash=digest, segmentIds=ids)
        return await ctx.next()

    api.pipeline.register("turn", context_message)


def _present(messages: Any, digest: str, text: str) -> bool:
    """Whether the conversation already holds this context message."""
    for message in messages:
        marker = message.metadata.get(MARKER) if message.metadata else None
        if isinstance(marker, dict) and marker.get("promptHash") == digest:
            return True
        if (
            message.role == "system"
            and message.content == text
            and message.metadata.get("extension") == NAME
        ):
            return True
    return False


def _record(ctx: TurnMiddlewareContext, name: str, **data: Any) -> None:
    entry: dict[str, Any] = {
        "name": name,
        "actor": NAME,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if data:
        entry["data"] = data
    events = ctx.metadata.get(EVENTS)
    ctx.metadata[EVENTS] = [*events, entry] if isinstance(events, list) else [entry]


def _catalog(ctx: TurnMiddlewareContext, instruction: str) -> str:
    swarm = ctx.runtime.swarm
    return "\n".join(
        [
            "[runtime_catalog]",
            f"swarm={swarm.swarm_name}",
            f"entryAgent={swarm.entry_agent}",
            f"selfAgent={swarm.self_agent}",
            f"availableAgents={', '.join(swarm.available_agents)}",
            f"callableAgents={', '.join(swarm.callable_agents)}",
            "[/runtime_catalog]",
            instruction,
        ]
    )


def _inbound(ctx: TurnMiddlewareContext) -> str:
    inbound = ctx.runtime.inbound
    lines = [
        "[runtime_inbound]",
        f"eventId={inbound.event_id}",
        f"eventType={inbound.event_type}",
        f"sourceKind={inbound.source_kind}",
        f"sourceName={inbound.source_name}",
        f"createdAt={inbound.created_at}",
    ]
    if inbound.instance_key:
        lines.append(f"instanceKey={inbound.instance_key}")
    if inbound.event_metadata:
        lines.append(f"eventMetadata={json.dumps(inbound.event_metadata, ensure_ascii=False)}")
    lines.append("[/runtime_inbound]")
    return "\n".join(lines)


def _call(ctx: TurnMiddlewareContext) -> str | None:
    call = ctx.runtime.call
    if call is None:
        return None
    lines = ["[runtime_call]", f"callerAgent={call.caller_agent}"]
    if call.caller_instance_key:
        lines.append(f"callerInstanceKey={call.caller_instance_key}")
    if call.caller_turn_id:
        lines.append(f"callerTurnId={call.caller_turn_id}")
    if call.call_source:
        lines.append(f"callSource={call.call_source}")
    if call.call_stack:
        lines.append(f"callStack={' -> '.join(call.call_stack)}")
    if call.reply_to is not None:
        lines.append(f"replyTo.target={call.reply_to.target}")
        lines.append(f"replyTo.correlationId={call.reply_to.correlation_id}")
    lines.append("[/runtime_call]")
    return "\n".join(lines)


def _route(ctx: TurnMiddlewareContext) -> str:
    inbound, call = ctx.runtime.inbound, ctx.runtime.call
    lines = [
        "[runtime_route]",
        "precedence=call>inbound",
        f"senderKind={'agent' if call is not None else inbound.source_kind}",
        f"senderName={call.caller_agent if call is not None else inbound.source_name}",
        f"eventType={inbound.event_type}",
        f"eventId={inbound.event_id}",
    ]
    sender_key = (call.caller_instance_key if call is not None else None) or inbound.instance_key
    if sender_key:
        lines.append(f"senderInstanceKey={sender_key}")
    if call is not None and call.caller_turn_id:
        lines.append(f"senderTurnId={call.caller_turn_id}")
    if call is not None and call.call_source:
        lines.append(f"senderSource={call.call_source}")
    lines.append("[/runtime_route]")
    return "\n".join(lines)
