"""Long-running tools: a handle now, the result later, nothing lost across a restart."""

import asyncio
import json

from agentproc.instance import Instance
from agentproc.tool_jobs import COMPLETION_KEY, PENDING_FILE, POLL_TOOL
from goondan import Pending
from tests.unit.agentproc.loop_kit import (
    ScriptedModel,
    agent,
    call,
    reply,
    tool,
    tool_results,
    turn,
)


def completions(request):
    return [
        json.loads(m.content)
        for m in request.messages
        if m.role == "user" and COMPLETION_KEY in m.metadata
    ]


async def test_the_model_gets_a_handle_and_later_the_result_before_a_step(tmp_path):
    release = asyncio.Event()

    async def build(ctx, args):
        async def work():
            await release.wait()
            return {"artifact": "app.tar.gz"}

        return Pending(work(), handle="build-1")

    async def other(ctx, args):
        release.set()
        await asyncio.sleep(0.05)  # the build finishes meanwhile
        return "other done"

    model = ScriptedModel(
        reply(None, call("ci__build", {}, "c1")),
        reply(None, call("ci__other", {}, "c2")),
        reply("all done"),
    )
    inst = Instance("k", tmp_path / "k").load()
    definition = agent(model, tool("ci__build", build), tool("ci__other", other))
    await turn(definition, inst)
    [pending] = tool_results(model, 1)
    assert pending["status"] == "pending" and pending["handle"] == "build-1"
    assert "build-1" in pending["output"]
    assert POLL_TOOL in [t.name for t in model.requests[1].tools]  # while the job is open
    [done] = completions(model.requests[2])
    assert done == {
        "type": "tool_completion",
        "handle": "build-1",
        "toolName": "ci__build",
        "toolCallId": "c1",
        "status": "ok",
        "output": {"artifact": "app.tar.gz"},
    }
    assert not (inst.directory / PENDING_FILE).exists()  # delivered: nothing left to keep


async def test_a_result_after_the_turn_joins_the_next_turn(tmp_path):
    release = asyncio.Event()

    def build(ctx, args):
        async def work():
            await release.wait()
            raise RuntimeError("compiler crashed")

        return Pending(work())

    model = ScriptedModel(reply(None, call("ci__build", {}, "c1")), reply("started it"))
    inst = Instance("k", tmp_path / "k").load()
    definition = agent(model, tool("ci__build", build))
    await turn(definition, inst)
    records = json.loads((inst.directory / PENDING_FILE).read_text())
    assert [r["status"] for r in records] == ["running"]
    release.set()
    await asyncio.sleep(0.05)
    model.queue(reply("it failed"))
    await turn(definition, inst, "what happened?")
    [done] = completions(model.requests[-1])
    assert done["status"] == "error" and done["error"]["message"] == "compiler crashed"
    assert done["error"]["code"] == "E_TOOL" and done["error"]["name"] == "RuntimeError"


async def test_a_job_cut_short_by_a_restart_is_answered_after_it(tmp_path):
    def build(ctx, args):
        return Pending(asyncio.sleep(3600), handle="long")

    model = ScriptedModel(reply(None, call("ci__build", {}, "c1")), reply("started"))
    inst = Instance("k", tmp_path / "k").load()
    await turn(agent(model, tool("ci__build", build)), inst)
    inst.close()  # the process stops; the job is cancelled

    again = Instance("k", tmp_path / "k").load()  # the respawned process
    model.queue(reply("sorry"))
    await turn(agent(model, tool("ci__build", build)), again, "status?")
    [done] = completions(model.requests[-1])
    assert done["handle"] == "long" and done["error"]["code"] == "E_TOOL_INTERRUPTED"
    assert not (again.directory / PENDING_FILE).exists()


async def test_a_finished_result_not_yet_delivered_survives_a_restart(tmp_path):
    def build(ctx, args):
        return Pending(lambda: {"ok": True}, handle="quick")  # a sync callable: a thread

    model = ScriptedModel(reply(None, call("ci__build", {}, "c1")), reply("started"))
    inst = Instance("k", tmp_path / "k").load()
    await turn(agent(model, tool("ci__build", build)), inst)
    await asyncio.sleep(0.1)  # done, in the inbox, not yet in the conversation
    records = json.loads((inst.directory / PENDING_FILE).read_text())
    assert records[0]["status"] == "ok"
    again = Instance("k", tmp_path / "k").load()
    model.queue(reply("great"))
    await turn(agent(model, tool("ci__build", build)), again, "and?")
    [done] = completions(model.requests[-1])
    assert done["output"] == {"ok": True}


async def test_poll_reports_a_running_job(tmp_path):
    def build(ctx, args):
        return Pending(asyncio.sleep(3600), handle="slow-1")

    model = ScriptedModel(
        reply(None, call("ci__build", {}, "c1")),
        reply(
            None,
            call(POLL_TOOL, {"handle": "slow-1"}, "c2"),
            call(POLL_TOOL, {"handle": "x"}, "c3"),
        ),
        reply("still going"),
    )
    inst = Instance("k", tmp_path / "k").load()
    await turn(agent(model, tool("ci__build", build)), inst)
    status, missing = tool_results(model, 2)[1:]
    assert status["output"]["status"] == "running" and status["output"]["handle"] == "slow-1"
    assert missing["error"]["code"] == "E_TOOL_JOB_NOT_FOUND"
    assert POLL_TOOL not in [t.name for t in model.requests[0].tools]
    inst.close()
