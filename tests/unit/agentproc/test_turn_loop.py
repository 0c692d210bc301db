"""The loop's rules: parallel calls, retries, loop detection, budgets, cancellation, usage."""

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from agentproc.messages import Message, ModelError
from goondan import ToolContext
from goondan.bundle.model import BudgetPolicy, LoopDetectionPolicy, ModelPricing
from tests.unit.agentproc.loop_kit import (
    ScriptedModel,
    agent,
    call,
    events,
    instance,
    reply,
    tool,
    tool_results,
    turn,
)


def roles(model, index=-1):
    return [m.role for m in model.requests[index].messages]


# -- steps -------------------------------------------------------------------------------------


async def test_text_reply_ends_the_turn(tmp_path):
    model = ScriptedModel(reply("hi there"))
    outcome = await turn(agent(model), tmp_path)
    assert (outcome.text, outcome.finish_reason, outcome.steps) == ("hi there", "text_response", 1)
    assert roles(model) == ["system", "user"]


async def test_max_steps_returns_the_last_text(tmp_path):
    model = ScriptedModel(*[reply(f"thinking {i}", call("t__a", {"i": i})) for i in range(5)])
    outcome = await turn(agent(model, tool("t__a", lambda c, a: 1), max_steps=3), tmp_path)
    assert (outcome.finish_reason, outcome.steps, outcome.text) == ("max_steps", 3, "thinking 2")


async def test_model_errors_end_the_turn_with_their_code(tmp_path):
    model = ScriptedModel(ModelError("rate limited for good", code="E_MODEL_RATE_LIMIT"))
    inst = instance(tmp_path)
    outcome = await turn(agent(model), inst)
    assert (outcome.finish_reason, outcome.error_code) == ("error", "E_MODEL_RATE_LIMIT")
    # The code goes beside the text to the requester, so the text does not repeat it.
    assert outcome.text == "The model call failed: rate limited for good"
    assert inst.conversation.messages[-1].content == outcome.text
    assert [e.type for e in events(inst)][-2:] == ["step.failed", "turn.failed"]


# -- parallel calls --------------------------------------------------------------------------------


async def test_calls_of_one_reply_run_concurrently_and_answer_in_order(tmp_path: Path) -> None:
    # Each call waits for one after it, so only calls that run concurrently can finish (run
    # one by one, the first would wait for the others forever): "third" ends first, then the
    # blocking "sync" (on its thread), then "first".
    finished: list[str] = []
    loop = asyncio.get_running_loop()
    third_done = threading.Event()
    sync_done = asyncio.Event()

    async def first(ctx: ToolContext, args: dict[str, Any]) -> str:
        await asyncio.wait_for(sync_done.wait(), 10)
        finished.append("first")
        return "first"

    def blocking(ctx: ToolContext, args: dict[str, Any]) -> str:
        assert third_done.wait(10), "the third call never ran beside this one"
        finished.append("sync")
        loop.call_soon_threadsafe(sync_done.set)
        return "sync"

    async def third(ctx: ToolContext, args: dict[str, Any]) -> str:
        finished.append("third")
        third_done.set()
        return "third"

    calls = [call("t__first", {}, "c1"), call("t__sync", {}, "c2"), call("t__third", {}, "c3")]
    model = ScriptedModel(reply(None, *calls), reply("done"))
    definition = agent(
        model, tool("t__first", first), tool("t__sync", blocking), tool("t__third", third)
    )
    await turn(definition, tmp_path)
    assert finished == ["third", "sync", "first"]
    assert [r["output"] for r in tool_results(model)] == ["first", "sync", "third"]
    tool_ids = [m.tool_call_id for m in model.requests[-1].messages if m.role == "tool"]
    assert tool_ids == ["c1", "c2", "c3"]


async def test_a_sequential_tool_runs_alone(tmp_path):
    running = 0
    peak: dict[str, int] = {}

    def make(name):
        async def handler(ctx, args):
            nonlocal running
            running += 1
            peak[f"{name}{args['i']}"] = running
            await asyncio.sleep(0.05)
            running -= 1
            return name

        return handler

    calls = [
        call("t__par", {"i": 1}),
        call("t__par", {"i": 2}),
        call("t__seq", {"i": 3}),
        call("t__par", {"i": 4}),
        call("t__par", {"i": 5}),
    ]
    model = ScriptedModel(reply(None, *calls), reply("done"))
    definition = agent(
        model, tool("t__par", make("par")), tool("t__seq", make("seq"), sequential=True)
    )
    await turn(definition, tmp_path)
    assert peak["seq3"] == 1  # nothing ran beside it
    assert max(peak["par1"], peak["par2"]) == 2 and max(peak["par4"], peak["par5"]) == 2
    assert [r["output"] for r in tool_results(model)] == ["par", "par", "seq", "par", "par"]


async def test_each_result_is_written_once_the_calls_before_it_are_done(tmp_path):
    gate = asyncio.Event()
    inst = instance(tmp_path)

    async def fast(ctx, args):
        return "fast"

    async def slow(ctx, args):
        await gate.wait()
        return "slow"

    model = ScriptedModel(
        reply(
            None,
            call("t__fast", {}, "c1"),
            call("t__slow", {}, "c2"),
            call("t__fast", {"x": 1}, "c3"),
        ),
        reply("done"),
    )
    task = asyncio.create_task(
        turn(agent(model, tool("t__fast", fast), tool("t__slow", slow)), inst)
    )
    for _ in range(100):
        await asyncio.sleep(0.01)
        if inst.conversation.messages[-1].role == "tool":
            break
    # c1 is durable already; c3 finished too but waits for c2 to keep the model's order
    assert [m.tool_call_id for m in inst.conversation.messages if m.role == "tool"] == ["c1"]
    gate.set()
    await task
    assert [m.tool_call_id for m in inst.conversation.messages if m.role == "tool"] == [
        "c1",
        "c2",
        "c3",
    ]


async def test_cancelling_a_turn_cancels_its_tool_calls(tmp_path):
    cancelled = asyncio.Event()

    async def forever(ctx, args):
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    inst = instance(tmp_path)
    model = ScriptedModel(reply(None, call("t__wait", {}, "c1"), call("t__quick", {}, "c2")))
    definition = agent(model, tool("t__wait", forever), tool("t__quick", lambda c, a: "ok"))
    task = asyncio.create_task(turn(definition, inst))
    await asyncio.sleep(0.1)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert cancelled.is_set()
    results = {
        m.tool_call_id: json.loads(m.content or "")
        for m in inst.conversation.messages
        if m.role == "tool"
    }
    assert results["c1"]["error"]["code"] == "E_TOOL_CANCELLED"
    assert results["c2"] == {"status": "ok", "output": "ok"}
    last = events(inst)[-1]
    assert (last.type, last.data["finishReason"]) == ("turn.failed", "aborted")


# -- corrective retries ----------------------------------------------------------------------


async def test_malformed_arguments_get_a_correction_then_the_turn_goes_on(tmp_path):
    model = ScriptedModel(
        reply(None, call("t__a", "{broken", "c1")),
        reply(None, call("t__a", {"n": 1}, "c2")),
        reply("fixed"),
    )
    outcome = await turn(agent(model, tool("t__a", lambda c, a: a["n"])), tmp_path)
    assert outcome.text == "fixed"
    second = model.requests[1].messages
    assert second[-2].role == "tool" and "not valid JSON" in (second[-2].content or "")
    assert second[-1].role == "user" and second[-1].metadata["__goondanCorrection"] == "malformed"


async def test_malformed_output_three_times_in_a_row_ends_the_turn(tmp_path):
    model = ScriptedModel(*[reply(None, call("agents__request", "[1]", f"c{i}")) for i in range(3)])
    inst = instance(tmp_path)
    outcome = await turn(agent(model), inst)
    assert (outcome.finish_reason, outcome.error_code) == ("error", "E_MODEL_MALFORMED_OUTPUT")
    assert len(model.requests) == 3
    corrections = [m for m in inst.conversation.messages if "__goondanCorrection" in m.metadata]
    assert len(corrections) == 2 and '"target"' in (corrections[0].content or "")  # agents example
    assert inst.conversation.messages[-1].role == "assistant"


async def test_calls_cut_off_by_the_output_limit_are_not_run(tmp_path):
    ran = []
    model = ScriptedModel(reply(None, call("t__a", {"n": 1}), finish="length"), reply("ok"))
    await turn(agent(model, tool("t__a", lambda c, a: ran.append(1))), tmp_path)
    assert ran == []
    assert tool_results(model, 1)[0]["error"]["code"] == "E_TOOL_CALL_TRUNCATED"


async def test_tool_calls_finish_without_calls_is_malformed(tmp_path):
    model = ScriptedModel(reply(None, finish="tool_calls"), reply("answer"))
    outcome = await turn(agent(model), tmp_path)
    assert outcome.text == "answer"
    assert model.requests[1].messages[-1].metadata["__goondanCorrection"] == "malformed"


async def test_empty_output_is_corrected_at_most_twice(tmp_path):
    model = ScriptedModel(reply(""), reply("  "), reply(None))
    outcome = await turn(agent(model), tmp_path)
    assert (outcome.finish_reason, outcome.error_code) == ("error", "E_MODEL_EMPTY_OUTPUT")
    assert len(model.requests) == 3

    recovered = ScriptedModel(reply(""), reply("here"))
    assert (await turn(agent(recovered), tmp_path / "b")).text == "here"


async def test_empty_output_after_tool_results_just_ends_the_turn(tmp_path):
    model = ScriptedModel(reply("sending", call("t__send")), reply(None))
    outcome = await turn(agent(model, tool("t__send", lambda c, a: "sent")), tmp_path)
    assert (outcome.finish_reason, outcome.text, len(model.requests)) == (
        "text_response",
        "sending",
        2,
    )


# -- loop detection --------------------------------------------------------------------------------


async def test_repeated_identical_calls_warn_then_block_then_end_the_turn(tmp_path):
    ran = []

    def poll(c: object, a: object) -> str:
        ran.append(1)
        return "same"

    model = ScriptedModel(*[reply(None, call("t__poll", {"id": 7}, f"c{i}")) for i in range(10)])
    inst = instance(tmp_path)
    outcome = await turn(agent(model, tool("t__poll", poll)), inst)
    assert (outcome.finish_reason, outcome.error_code) == ("error", "E_TOOL_LOOP_DETECTED")
    assert len(ran) == 4  # calls 5, 6, 7 are refused, the 8th ends the turn
    results = [json.loads(m.content or "") for m in inst.conversation.messages if m.role == "tool"]
    assert [r["status"] for r in results] == ["ok"] * 4 + ["error"] * 4
    assert results[4]["error"]["code"] == "E_TOOL_LOOP_DETECTED"
    warnings = [m for m in inst.conversation.messages if m.metadata.get("__goondanLoopDetection")]
    assert len(warnings) == 2 and "same arguments 3 times" in (warnings[0].content or "")


async def test_repeats_with_changing_results_are_progress(tmp_path):
    counter = iter(range(100))
    model = ScriptedModel(*[reply(None, call("t__poll", {"id": 7}, f"c{i}")) for i in range(9)])
    outcome = await turn(
        agent(model, tool("t__poll", lambda c, a: next(counter)), max_steps=9), tmp_path
    )
    assert outcome.finish_reason == "max_steps"


async def test_loop_detection_can_be_switched_off(tmp_path):
    model = ScriptedModel(*[reply(None, call("t__poll", {}, f"c{i}")) for i in range(9)])
    definition = agent(
        model,
        tool("t__poll", lambda c, a: 1),
        max_steps=9,
        loop_detection=LoopDetectionPolicy(enabled=False),
    )
    assert (await turn(definition, tmp_path)).finish_reason == "max_steps"


# -- budgets and usage -----------------------------------------------------------------------


async def test_token_budget_ends_the_turn_with_a_clear_message(tmp_path):
    model = ScriptedModel(
        *[reply(None, call("t__a", {"i": i}), usage=(400, 100)) for i in range(9)]
    )
    inst = instance(tmp_path)
    definition = agent(
        model, tool("t__a", lambda c, a: a["i"]), budget=BudgetPolicy(max_turn_tokens=1200)
    )
    outcome = await turn(definition, inst)
    assert (outcome.finish_reason, outcome.error_code, outcome.steps) == (
        "budget",
        "E_TURN_BUDGET",
        3,
    )
    assert "1,500 tokens" in outcome.text and "maxTurnTokens" in outcome.text
    assert inst.conversation.messages[-1].content == outcome.text


async def test_time_budget_stops_a_slow_tool(tmp_path: Path) -> None:
    cancelled: list[bool] = []

    async def slow(ctx: ToolContext, args: dict[str, Any]) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    inst = instance(tmp_path)
    model = ScriptedModel(reply(None, call("t__slow", {}, "c1")))
    definition = agent(model, tool("t__slow", slow), budget=BudgetPolicy(max_turn_seconds=0.2))
    outcome = await turn(definition, inst)
    assert cancelled == [True]  # stopped, not waited for
    assert (outcome.finish_reason, outcome.error_code) == ("budget", "E_TURN_BUDGET")
    assert "ran out of time" in outcome.text
    [result] = [json.loads(m.content or "") for m in inst.conversation.messages if m.role == "tool"]
    assert result["error"]["code"] == "E_TOOL_CANCELLED"


async def test_a_turn_cancelled_from_outside_is_not_a_budget_stop(tmp_path):
    started = asyncio.Event()

    async def slow(ctx, args):
        started.set()
        await asyncio.sleep(30)

    inst = instance(tmp_path)
    model = ScriptedModel(reply(None, call("t__slow", {}, "c1")))
    definition = agent(model, tool("t__slow", slow), budget=BudgetPolicy(max_turn_seconds=60))
    running = asyncio.ensure_future(turn(definition, inst))
    await started.wait()
    running.cancel()  # as a shutdown past its grace period does
    with pytest.raises(asyncio.CancelledError):
        await running
    assert [e.type for e in events(inst)][-1] == "turn.failed"


async def test_cost_is_counted_and_can_be_budgeted(tmp_path):
    model = ScriptedModel(
        *[reply(None, call("t__a", {"i": i}), usage=(100_000, 10_000)) for i in range(5)]
    )
    inst = instance(tmp_path)
    definition = agent(
        model,
        tool("t__a", lambda c, a: a["i"]),
        pricing=ModelPricing(input=2.5, output=10.0),  # USD per million tokens
        budget=BudgetPolicy(max_turn_cost_usd=1.0),
    )
    outcome = await turn(definition, inst)
    # 0.35 USD per step: over 1.0 after the third
    assert (outcome.finish_reason, outcome.steps, outcome.cost_usd) == ("budget", 3, 1.05)
    steps = [e for e in events(inst) if e.type == "step.completed"]
    assert steps[0].data["tokenUsage"] == {
        "inputTokens": 100_000,
        "outputTokens": 10_000,
        "totalTokens": 110_000,
        "costUsd": 0.35,
    }
    final = events(inst)[-1]
    assert final.type == "turn.failed" and final.data["tokenUsage"]["costUsd"] == 1.05


async def test_usage_per_step_and_per_turn(tmp_path):
    model = ScriptedModel(reply(None, call("t__a"), usage=(30, 5)), reply("ok", usage=(50, 7)))
    inst = instance(tmp_path)
    outcome = await turn(agent(model, tool("t__a", lambda c, a: 1)), inst)
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (80, 12)
    per_step = [
        e.data["tokenUsage"]["totalTokens"] for e in events(inst) if e.type == "step.completed"
    ]
    assert per_step == [35, 57]
    assert events(inst)[-1].data["tokenUsage"]["totalTokens"] == 92


# -- runtime events ------------------------------------------------------------------------------


async def test_events_form_turn_step_tool_spans(tmp_path):
    model = ScriptedModel(reply(None, call("t__a"), call("t__b")), reply("ok"))
    inst = instance(tmp_path)
    definition = agent(model, tool("t__a", lambda c, a: 1), tool("t__b", lambda c, a: 2))
    await turn(definition, inst, parent_span_id="caller0toolspan", trace_id="a" * 32)
    log = events(inst)
    types = [e.type for e in log]
    assert types[:2] == ["turn.started", "step.started"]
    assert sorted(types[2:6]) == ["tool.called"] * 2 + ["tool.completed"] * 2
    assert types[6:] == ["step.completed", "step.started", "step.completed", "turn.completed"]
    turn_span = log[0].span_id
    assert log[0].parent_span_id == "caller0toolspan"
    assert {e.trace_id for e in log} == {"a" * 32}
    steps = [e for e in log if e.type.startswith("step.")]
    assert {e.parent_span_id for e in steps} == {turn_span}
    step_span = steps[0].span_id
    tools = [e for e in log if e.type.startswith("tool.")]
    assert {e.parent_span_id for e in tools} == {step_span}
    called = {e.data["toolName"]: e.span_id for e in tools if e.type == "tool.called"}
    completed = {e.data["toolName"]: e.span_id for e in tools if e.type == "tool.completed"}
    assert called == completed and len(set(called.values())) == 2
    assert all(e.turn_id == log[0].turn_id for e in log)
    done = log[-1]
    assert done.data["stepCount"] == 2 and done.data["duration"] > 0


async def test_progress_updates_become_events_and_stop_after_the_call(tmp_path):
    kept = {}

    def sync_work(ctx, args):
        ctx.update("half way", progress=0.5)
        kept["ctx"] = ctx
        return "done"

    async def async_work(ctx, args):
        ctx.update(data={"files": 3})
        return "done"

    model = ScriptedModel(reply(None, call("t__sync"), call("t__async")), reply("ok"))
    inst = instance(tmp_path)
    await turn(agent(model, tool("t__sync", sync_work), tool("t__async", async_work)), inst)
    kept["ctx"].update("too late")
    await asyncio.sleep(0.05)
    progress = [e for e in events(inst) if e.type == "tool.progress"]
    by_tool = {e.data["toolName"]: e.data for e in progress}
    assert by_tool["t__sync"]["message"] == "half way" and by_tool["t__sync"]["progress"] == 0.5
    assert by_tool["t__async"]["data"] == {"files": 3}
    assert len(progress) == 2
    spans = {e.data["toolName"]: e.span_id for e in events(inst) if e.type == "tool.called"}
    assert {e.span_id for e in progress} == set(spans.values())


async def test_details_stay_out_of_the_llm_channel(tmp_path):
    from goondan import ToolResult

    model = ScriptedModel(reply(None, call("t__q")), reply("ok"))
    inst = instance(tmp_path)
    handler = lambda c, a: ToolResult.ok({"rows": 1}, details={"sql": "select 1"})  # noqa: E731
    await turn(agent(model, tool("t__q", handler)), inst)
    assert tool_results(model) == [{"status": "ok", "output": {"rows": 1}}]
    [done] = [e for e in events(inst) if e.type == "tool.completed"]
    assert done.data["details"] == {"sql": "select 1"}


async def test_the_tool_span_travels_with_a_request_to_another_agent(tmp_path):
    from agentproc.peers import PeerClient, TurnRuntime
    from agentproc.turn import TurnInput, run_turn
    from ipc import wire

    frames: list[bytes] = []
    peers = PeerClient("tester", frames.append)
    runtime = TurnRuntime(
        peers,
        instance_key="k1",
        trace_id="b" * 32,
        call_chain=(),
        catalog={},
        deliver_async=lambda m: None,
    )

    async def tell(ctx, args):
        await ctx.runtime.send("other", "hello")
        ctx.runtime.request_async("other", "question")
        await asyncio.sleep(0.01)
        return "sent"

    model = ScriptedModel(reply(None, call("t__tell")), reply("ok"))
    inst = instance(tmp_path)
    await run_turn(
        agent(model, tool("t__tell", tell)),
        inst,
        TurnInput("go", "k1", "b" * 32, "cli:test"),
        runtime,
        tmp_path / "w",
    )
    [span] = [e.span_id for e in events(inst) if e.type == "tool.called"]
    sent = [wire.decode(frame) for frame in frames]
    assert [(e.type, e.span_id, e.trace_id) for e in sent] == [
        ("event", span, "b" * 32),
        ("delegate", span, "b" * 32),
    ]


# -- inbox -----------------------------------------------------------------------------------------


async def test_inbox_messages_join_before_the_next_step(tmp_path):
    inst = instance(tmp_path)

    async def ask(ctx, args):
        inst.deliver(Message(id="late", role="user", content="an async answer"))
        return "asked"

    model = ScriptedModel(reply(None, call("t__ask")), reply("ok"))
    await turn(agent(model, tool("t__ask", ask)), inst)
    second = model.requests[1].messages
    assert [m.id for m in second][-1] == "late" and second[-2].role == "tool"


async def test_self_restart_convention(tmp_path):
    model = ScriptedModel(reply(None, call("self-restart__request")), reply("restarting"))
    handler = lambda c, a: {"restartRequested": True, "restartReason": "config"}  # noqa: E731
    outcome = await turn(agent(model, tool("self-restart__request", handler)), tmp_path)
    assert outcome.restart_reason == "config"
