"""The agent's side of approvals, in process: the call waits for a decision; denied, expired
or with nobody to ask it does not run; parked at a stop, it runs when the turn resumes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from agentproc.approvals import ApprovalWaits
from goondan.bundle.model import ToolPolicySpec
from ipc import wire
from tests.unit.agentproc.loop_kit import (
    ScriptedModel,
    agent,
    call,
    instance,
    reply,
    tool,
    tool_results,
    turn,
)
from tests.waiting import until

POLICY = ToolPolicySpec(require_approval=("act__*",))


def acting(ran: list[Any]) -> Any:
    async def act(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
        ran.append(args)
        return {"did": args.get("what")}

    return tool("act__run", act)


class Orchestrator:
    """What the agent sends about approvals, and a way to answer."""

    def __init__(self) -> None:
        self.requests: list[wire.ApprovalRequest] = []

    def send(self, frame: bytes) -> None:
        env = wire.decode(frame)
        assert env.type == wire.APPROVAL_REQUEST
        self.requests.append(wire.decode_payload(env, wire.ApprovalRequest))


async def test_approved_runs_denied_does_not(tmp_path: Path) -> None:
    ran: list[Any] = []
    model = ScriptedModel(
        reply(None, call("act__run", {"what": "a"}, "c1")),
        reply("ok"),
        reply(None, call("act__run", {"what": "b"}, "c2")),
        reply("ok"),
    )
    definition = agent(model, acting(ran), policy=POLICY)
    orchestrator = Orchestrator()
    waits = definition.approvals = ApprovalWaits("tester", orchestrator.send)
    inst = instance(tmp_path)

    running = asyncio.create_task(turn(definition, inst, "first"))
    await until(lambda: len(orchestrator.requests) == 1)
    asked = orchestrator.requests[0]
    assert (asked.tool, asked.args, asked.tool_call_id) == ("act__run", '{"what":"a"}', "c1")
    assert asked.timeout_s == 3600.0 and ran == []
    assert waits.on_decision(wire.ApprovalDecision(asked.id, "approved", decided_by="ann"))
    assert (await running).text == "ok"
    assert ran == [{"what": "a"}]

    running = asyncio.create_task(turn(definition, inst, "second"))
    await until(lambda: len(orchestrator.requests) == 2)
    asked = orchestrator.requests[1]
    waits.on_decision(wire.ApprovalDecision(asked.id, "denied", "too risky", "ann"))
    await running
    result = tool_results(model)[-1]  # the model's next step read the denial and its reason
    assert result["error"]["code"] == "E_TOOL_DENIED" and "too risky" in result["error"]["message"]
    assert ran == [{"what": "a"}]


async def test_without_an_orchestrator_the_call_is_refused(tmp_path: Path) -> None:
    ran: list[Any] = []
    model = ScriptedModel(reply(None, call("act__run", {"what": "a"})), reply("ok"))
    await turn(agent(model, acting(ran), policy=POLICY), tmp_path)
    [result] = tool_results(model)
    assert result["error"]["code"] == "E_TOOL_DENIED" and ran == []


async def test_a_call_parked_at_a_stop_runs_when_the_turn_resumes(tmp_path: Path) -> None:
    ran: list[Any] = []
    model = ScriptedModel(reply(None, call("act__run", {"what": "a"}, "c1")), reply("after"))
    definition = agent(model, acting(ran), policy=POLICY)
    orchestrator = Orchestrator()
    waits = definition.approvals = ApprovalWaits("tester", orchestrator.send)
    inst = instance(tmp_path)
    running = asyncio.create_task(turn(definition, inst, "go"))
    await until(lambda: len(orchestrator.requests) == 1)
    waits.park_all()  # the agent stops
    try:
        await running
    except asyncio.CancelledError:
        pass
    assert len(orchestrator.requests) == 1  # parked, not withdrawn
    [standing] = [m for m in inst.conversation.messages if m.role == "tool"]
    assert "ApprovalParked" in (standing.content or "")

    again = definition.approvals = ApprovalWaits("tester", orchestrator.send)  # a new process
    resumed = asyncio.create_task(turn(definition, instance(tmp_path), "go", resume=True))
    await until(lambda: len(orchestrator.requests) == 2)
    assert orchestrator.requests[1].id == orchestrator.requests[0].id  # the same approval
    again.on_decision(wire.ApprovalDecision(orchestrator.requests[1].id, "approved"))
    assert (await resumed).text == "after"
    assert ran == [{"what": "a"}]
    tools = [m for m in instance(tmp_path).conversation.messages if m.role == "tool"]
    assert len(tools) == 1 and '"did":"a"' in (tools[0].content or "")


async def test_a_cancelled_wait_withdraws_its_request(tmp_path: Path) -> None:
    model = ScriptedModel(reply(None, call("act__run", {"what": "a"}, "c1")))
    definition = agent(model, acting([]), policy=POLICY)
    orchestrator = Orchestrator()
    definition.approvals = ApprovalWaits("tester", orchestrator.send)
    running = asyncio.create_task(turn(definition, tmp_path, "go"))
    await until(lambda: len(orchestrator.requests) == 1)
    running.cancel()
    try:
        await running
    except asyncio.CancelledError:
        pass
    assert [r.withdrawn for r in orchestrator.requests] == [False, True]
