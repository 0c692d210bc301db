"""`ctx.runtime` of the middleware contexts: agent, swarm, inbound message and caller.

Built from what the turn already has: the agent's definition, the swarm catalog, and the
request's source, call chain and metadata. An agent's `agents__request` / `agents__send` put
their event id, `eventType`, `metadata` and the caller's instance key in the request's metadata
(`agentproc.peers`); a connector puts its event name and properties there.
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Any

from goondan.extensions import (
    RuntimeAgent,
    RuntimeCall,
    RuntimeContext,
    RuntimeInbound,
    RuntimePrompt,
    RuntimeReplyTo,
    RuntimeSwarm,
)

if TYPE_CHECKING:
    from agentproc.turn import AgentDefinition, TurnInput

# Keys of a request's metadata that the runtime itself writes (the `agents` tool's and a
# connector's); the rest of the metadata is not the sender's to set.
EVENT_ID = "eventId"
EVENT_TYPE = "event"
EVENT_METADATA = "eventMetadata"
CALLER_INSTANCE_KEY = "callerInstanceKey"
CALLER_TURN_ID = "callerTurnId"


def new_event_id() -> str:
    return f"agent_event_{secrets.token_hex(8)}"


def runtime_context(
    agent: AgentDefinition, catalog: dict[str, Any], turn: TurnInput
) -> RuntimeContext:
    kind, _, name = turn.source.partition(":")
    metadata = turn.metadata
    requested = bool(turn.request_id)  # someone waits for the answer
    event_type = metadata.get(EVENT_TYPE)
    if not isinstance(event_type, str) or not event_type:
        event_type = f"{kind}.request" if requested else f"{kind}.send"
    properties = metadata.get("properties")
    event_metadata = metadata.get(EVENT_METADATA)
    inbound = RuntimeInbound(
        event_id=str(metadata.get(EVENT_ID) or turn.request_id or turn.trace_id),
        event_type=event_type,
        source_kind=kind,
        source_name=name,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        instance_key=turn.instance_key,
        properties=properties if isinstance(properties, dict) else {},
        event_metadata=event_metadata if isinstance(event_metadata, dict) else {},
    )
    call = None
    if kind == "agent":
        call = RuntimeCall(
            caller_agent=name,
            caller_instance_key=_text(metadata.get(CALLER_INSTANCE_KEY)),
            caller_turn_id=_text(metadata.get(CALLER_TURN_ID)),
            call_source="request" if requested else "send",
            call_stack=turn.call_chain or (name,),
            reply_to=RuntimeReplyTo(name, turn.request_id) if requested else None,
        )
    system = agent.system_prompt
    return RuntimeContext(
        agent=RuntimeAgent(
            agent.name, agent.bundle_root, RuntimePrompt(system) if system else None
        ),
        swarm=RuntimeSwarm(
            swarm_name=catalog.get("swarmName", ""),
            entry_agent=catalog.get("entryAgent", ""),
            self_agent=catalog.get("selfAgent", agent.name),
            available_agents=tuple(catalog.get("availableAgents", ())),
            callable_agents=tuple(catalog.get("callableAgents", ())),
        ),
        inbound=inbound,
        call=call,
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None
