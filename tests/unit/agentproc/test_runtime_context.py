"""`ctx.runtime` in turn, step and toolCall middleware: agent, swarm, inbound and caller."""

from typing import Any

from agentproc.turn import TurnInput
from goondan import RuntimeContext, RuntimeReplyTo
from tests.unit.agentproc.loop_kit import ScriptedModel, agent, call, instance, reply, tool, turn


def recording(definition: Any) -> dict[str, list[RuntimeContext]]:
    seen: dict[str, list[RuntimeContext]] = {"turn": [], "step": [], "toolCall": []}
    for kind in seen:

        async def mw(ctx: Any, kind: str = kind) -> Any:
            seen[kind].append(ctx.runtime)
            return await ctx.next()

        definition.pipeline.register(kind, mw)
    return seen


async def test_every_middleware_sees_the_same_runtime_context(tmp_path):
    model = ScriptedModel(reply(None, call("echo__it", {})), reply("done"))
    definition = agent(model, tool("echo__it", lambda ctx, args: {"ok": True}))
    definition.bundle_root = "/bundles/b"
    seen = recording(definition)
    await turn(definition, tmp_path, "hi")

    [runtime] = seen["turn"]
    assert seen["step"] == [runtime, runtime] and seen["toolCall"] == [runtime]
    assert runtime.agent.name == "tester" and runtime.agent.bundle_root == "/bundles/b"
    assert runtime.agent.prompt is not None and runtime.agent.prompt.system == "be brief"
    assert runtime.swarm.swarm_name == "default" and runtime.swarm.self_agent == "tester"
    assert runtime.swarm.callable_agents == ("helper",)
    inbound = runtime.inbound
    assert (inbound.source_kind, inbound.source_name) == ("cli", "test")
    assert inbound.event_type == "cli.send" and inbound.instance_key == "k1"
    assert inbound.created_at.endswith("Z") and inbound.event_id
    assert runtime.call is None  # nobody called: a person did


async def test_a_delegated_turn_knows_its_caller_and_event(tmp_path):
    model = ScriptedModel(reply("done"))
    definition = agent(model)
    seen = recording(definition)
    inst = instance(tmp_path)
    metadata = {
        "eventId": "agent_event_1",
        "event": "review.requested",
        "eventMetadata": {"priority": 2},
        "callerInstanceKey": "boss-1",
    }
    request = TurnInput(
        "review this",
        inst.key,
        "t" * 32,
        "agent:boss",
        "req-7",
        metadata=metadata,
        call_chain=("entry", "boss"),
    )
    await turn(definition, inst, turn_input=request)

    [runtime] = seen["turn"]
    assert runtime.inbound.event_id == "agent_event_1"
    assert runtime.inbound.event_type == "review.requested"
    assert runtime.inbound.event_metadata == {"priority": 2}
    call_ = runtime.call
    assert call_ is not None and call_.caller_agent == "boss"
    assert call_.caller_instance_key == "boss-1" and call_.call_source == "request"
    assert call_.call_stack == ("entry", "boss")
    assert call_.reply_to == RuntimeReplyTo("boss", "req-7")


async def test_a_connector_event_brings_its_name_and_properties(tmp_path):
    model = ScriptedModel(reply("done"))
    definition = agent(model)
    seen = recording(definition)
    inst = instance(tmp_path)
    metadata = {"event": "telegram_message", "properties": {"chat_id": "42"}}
    event = TurnInput("hi", inst.key, "t" * 32, "connector:telegram", metadata=metadata)
    await turn(definition, inst, turn_input=event)

    [runtime] = seen["turn"]
    assert runtime.inbound.event_type == "telegram_message"
    assert runtime.inbound.properties == {"chat_id": "42"}
    assert runtime.inbound.source_kind == "connector" and runtime.call is None
