"""Loop detection judges the call as executed, and catches calls that ping-pong."""

import json
import textwrap
from pathlib import Path
from typing import Any

from agentproc.extensions import load_extensions, plan_extensions
from goondan.bundle import load_bundle
from goondan.bundle.model import LoopDetectionPolicy, PingPongPolicy
from tests.unit.agentproc.loop_kit import ScriptedModel, agent, call, instance, reply, tool, turn

# An extension of the kind users write: it stamps every call's arguments in place.
STAMP = """\
def register(api, config):
    async def stamp(ctx):
        ctx.args["requestId"] = "r-1"
        ctx.args.setdefault("options", {})["verbose"] = True
        return await ctx.next()

    api.pipeline.register("toolCall", stamp)
"""

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: stamp}
spec: {entry: ./stamp.py}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: Model/m}
  extensions: [{ref: Extension/stamp}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/a
  agents: [{ref: Agent/a}]
"""


async def stamped_agent(tmp_path: Path, model: ScriptedModel, *tools, **kw):
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "goondan.yaml").write_text(BUNDLE)
    (root / "stamp.py").write_text(textwrap.dedent(STAMP))
    bundle = load_bundle(root)
    definition = agent(model, *tools, **kw)
    resource = bundle.local("Agent", "a")
    assert resource is not None and definition.bus is not None
    await load_extensions(
        plan_extensions(bundle, resource),
        agent_name="a",
        pipeline=definition.pipeline,
        registry=definition.registry,
        bus=definition.bus,
    )
    return definition


def results(inst):
    return [json.loads(m.content or "") for m in inst.conversation.messages if m.role == "tool"]


def warnings(inst):
    return [m for m in inst.conversation.messages if m.metadata.get("__goondanLoopDetection")]


async def test_a_middleware_that_edits_args_in_place_does_not_switch_detection_off(tmp_path):
    seen: list[dict[str, Any]] = []

    def poll(c: object, a: dict[str, Any]) -> str:
        seen.append(dict(a))
        return "same"

    model = ScriptedModel(*[reply(None, call("t__poll", {"id": 7}, f"c{i}")) for i in range(32)])
    definition = await stamped_agent(tmp_path, model, tool("t__poll", poll))
    inst = instance(tmp_path)
    outcome = await turn(definition, inst)
    assert seen[0] == {"id": 7, "requestId": "r-1", "options": {"verbose": True}}
    assert (outcome.finish_reason, outcome.error_code) == ("error", "E_TOOL_LOOP_DETECTED")
    assert len(model.requests) == 8  # stopped at stopAt, not 32 calls later
    assert len(seen) == 4
    assert [r["status"] for r in results(inst)] == ["ok"] * 4 + ["error"] * 4
    assert len(warnings(inst)) == 2


async def test_calls_the_middleware_makes_different_are_not_a_loop(tmp_path):
    # The model repeats itself, but the middleware gives each call a new argument: the calls
    # actually run differ, so nothing is refused.
    async def number(ctx):
        ctx.args["n"] = len(model.requests)
        return await ctx.next()

    model = ScriptedModel(*[reply(None, call("t__poll", {"id": 7}, f"c{i}")) for i in range(9)])
    definition = agent(model, tool("t__poll", lambda c, a: "same"), max_steps=9)
    definition.pipeline.register("toolCall", number)
    inst = instance(tmp_path)
    outcome = await turn(definition, inst)
    assert outcome.finish_reason == "max_steps"
    assert all(r["status"] == "ok" for r in results(inst)) and not warnings(inst)


def record(log: list[str], name: str, result: str) -> str:
    log.append(name)
    return result


def ping_pong_model(rounds: int) -> ScriptedModel:
    replies = []
    for i in range(rounds):
        replies.append(reply(None, call("t__read", {"path": "a.txt"}, f"r{i}")))
        replies.append(reply(None, call("t__write", {"path": "a.txt"}, f"w{i}")))
    return ScriptedModel(*replies)


async def test_ping_pong_warns_then_blocks_then_ends_the_turn(tmp_path):
    ran: list[str] = []
    model = ping_pong_model(10)
    definition = agent(
        model,
        tool("t__read", lambda c, a: record(ran, "read", "old text")),
        tool("t__write", lambda c, a: record(ran, "write", "written")),
    )
    inst = instance(tmp_path)
    outcome = await turn(definition, inst)
    # Defaults: warn at the 6th call of the alternation, refuse from the 8th, stop at the 12th.
    assert (outcome.finish_reason, outcome.error_code) == ("error", "E_TOOL_LOOP_DETECTED")
    assert len(model.requests) == 12
    assert ran == ["read", "write"] * 3 + ["read"]
    statuses = [r["status"] for r in results(inst)]
    assert statuses == ["ok"] * 7 + ["error"] * 5
    assert results(inst)[7]["error"]["code"] == "E_TOOL_LOOP_DETECTED"
    texts = [m.content or "" for m in warnings(inst)]
    assert any("last 6 tool calls alternated between the same two calls" in t for t in texts)


async def test_ping_pong_with_progress_only_warns(tmp_path):
    counter = iter(range(100))
    model = ping_pong_model(4)
    definition = agent(
        model,
        tool("t__read", lambda c, a: f"version {next(counter)}"),
        tool("t__write", lambda c, a: "written"),
        max_steps=8,
    )
    inst = instance(tmp_path)
    outcome = await turn(definition, inst)
    assert outcome.finish_reason == "max_steps"
    assert all(r["status"] == "ok" for r in results(inst))
    # Still told that it goes back and forth (the 8th call reaches blockAt, but runs).
    assert any("alternated" in (m.content or "") for m in warnings(inst))


async def test_ping_pong_thresholds_and_switch(tmp_path):
    model = ping_pong_model(3)
    policy = LoopDetectionPolicy(ping_pong=PingPongPolicy(warn_at=3, block_at=4, stop_at=5))
    definition = agent(
        model,
        tool("t__read", lambda c, a: "x"),
        tool("t__write", lambda c, a: "y"),
        loop_detection=policy,
    )
    outcome = await turn(definition, instance(tmp_path / "on"))
    assert (outcome.error_code, len(model.requests)) == ("E_TOOL_LOOP_DETECTED", 5)

    model = ping_pong_model(6)
    policy = LoopDetectionPolicy(ping_pong=PingPongPolicy(enabled=False))
    definition = agent(
        model,
        tool("t__read", lambda c, a: "x"),
        tool("t__write", lambda c, a: "y"),
        loop_detection=policy,
        max_steps=8,
    )
    inst = instance(tmp_path / "off")
    outcome = await turn(definition, inst)
    # Without ping-pong, each side counts as a plain repeat: warned from its 3rd call, no stop
    # before the 5th call of a side.
    assert outcome.finish_reason == "max_steps"
    assert all("alternated" not in (m.content or "") for m in warnings(inst))
