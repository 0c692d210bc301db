"""The turn owns its state: steps and tool-call batches report outcomes, the turn applies them."""

import asyncio
from pathlib import Path

from agentproc.messages import Message, ModelReply, Usage
from agentproc.step import run_step
from agentproc.tool_calls import run_tool_calls
from agentproc.turn import TurnInput, TurnRun
from agentproc.turn_state import (
    MAX_CORRECTIONS,
    Correction,
    StepCtx,
    StepOutcome,
    ToolBatchOutcome,
    TurnState,
    TurnStop,
)
from goondan.bundle.model import BudgetPolicy, LoopDetectionPolicy
from goondan.extensions import ErrorDetail, TokenUsage
from goondan.tools import ToolResult
from tests.unit.agentproc.loop_kit import (
    NoRuntime,
    ScriptedModel,
    agent,
    call,
    instance,
    reply,
    tool,
    turn,
)

EMPTY = Correction("empty", "say something", TurnStop("E_MODEL_EMPTY_OUTPUT", "gave up"))
LOOP_STOP = TurnStop("E_TOOL_LOOP_DETECTED", "looping")


def _run(tmp_path: Path, *tools, **options) -> TurnRun:
    inst = instance(tmp_path)
    definition = agent(ScriptedModel(), *tools, **options)
    turn_input = TurnInput("hello", inst.key, "t" * 32, "cli:test")
    return TurnRun(definition, inst, turn_input, NoRuntime(), inst.directory / "work")  # type: ignore[arg-type]


def _step_ctx(run: TurnRun) -> StepCtx:
    ctx = StepCtx(
        run.agent.pipeline.chain("step", run_step),
        agent_name=run.agent.name,
        instance_key=run.input.instance_key,
        turn_id=run.turn_id,
        trace_id=run.input.trace_id,
        step_index=0,
        conversation_state=run.view,
        agents=run.runtime,
        tool_catalog=[],
        turn_metadata=run.metadata,
        emit=run.emit,
    )
    ctx.run, ctx.span = run, "step-span"
    return ctx


def _last(run: TurnRun) -> Message:
    return run.conversation.messages[-1]


# -- the state -------------------------------------------------------------------------------


def test_corrections_count_in_a_row_per_kind():
    state = TurnState()
    assert [state.corrected("empty") for _ in range(MAX_CORRECTIONS + 1)] == [True, True, False]
    assert state.corrected("malformed")  # another kind starts its own run ...
    assert state.corrected("empty")  # ... and ends the first one's
    state.steady()
    assert (state.malformed, state.empty) == (0, 0)


def test_the_first_stop_wins():
    state = TurnState()
    state.halt(LOOP_STOP)
    state.halt(EMPTY.stop)
    assert state.stop == LOOP_STOP


# -- a step's outcome, applied ---------------------------------------------------------------------


def test_a_step_with_tool_calls_continues_and_gives_the_model_the_loop_warnings(tmp_path):
    run = _run(tmp_path)
    ok = ToolResult.ok(1)
    result = run.apply(
        StepOutcome(
            continues=True,
            text="checking",
            usage=TokenUsage(3, 2),
            tool_calls=[call("t__a", {}, "c1")],
            tools=ToolBatchOutcome([ok], warnings=["[loop-detection] stop it"]),
        )
    )
    assert (result.status, result.should_continue, result.text) == ("completed", True, "checking")
    assert (result.tool_results, result.usage) == ([ok], TokenUsage(3, 2))
    assert _last(run).content == "[loop-detection] stop it"
    assert _last(run).metadata == {"__goondanLoopDetection": True}
    assert run.state.stop is None


def test_corrections_are_sent_until_the_limit_then_the_turn_stops(tmp_path):
    run = _run(tmp_path)
    outcome = StepOutcome(continues=True, correction=EMPTY)
    for _ in range(MAX_CORRECTIONS):
        assert run.apply(outcome).should_continue
        assert (_last(run).content, _last(run).metadata) == (
            "say something",
            {"__goondanCorrection": "empty"},
        )
    written = len(run.conversation.messages)
    assert not run.apply(outcome).should_continue
    assert run.state.stop == EMPTY.stop
    assert len(run.conversation.messages) == written  # no third correction


def test_a_usable_reply_ends_the_run_of_corrections(tmp_path):
    run = _run(tmp_path)
    run.apply(StepOutcome(continues=True, correction=EMPTY))
    run.apply(StepOutcome(text="fine"))
    assert (run.state.empty, run.state.malformed) == (0, 0)


def test_a_loop_stop_comes_before_a_correction_stop(tmp_path):
    run = _run(tmp_path)
    for _ in range(MAX_CORRECTIONS):
        run.apply(StepOutcome(continues=True, correction=EMPTY))
    tools = ToolBatchOutcome([], malformed=True, stop=LOOP_STOP)
    result = run.apply(StepOutcome(continues=True, tools=tools, correction=EMPTY))
    assert not result.should_continue
    assert run.state.stop == LOOP_STOP


def test_a_failed_model_call_changes_nothing(tmp_path):
    run = _run(tmp_path)
    run.apply(StepOutcome(continues=True, correction=EMPTY))
    written = len(run.conversation.messages)
    result = run.apply(StepOutcome(error=ErrorDetail("E_MODEL_RATE_LIMIT", "slow down")))
    assert (result.status, result.should_continue) == ("failed", False)
    assert result.error == ErrorDetail("E_MODEL_RATE_LIMIT", "slow down")
    assert (run.state.empty, len(run.conversation.messages)) == (1, written)


def test_a_reply_counts_at_once_and_blank_text_is_not_the_latest(tmp_path):
    run = _run(tmp_path)
    assert run.replied(ModelReply("first", (), Usage(10, 5))) == TokenUsage(10, 5)
    run.replied(ModelReply("  \n", (), Usage(1, 1)))
    assert run.state.last_text == "first"
    assert run.meter.total() == TokenUsage(11, 6)


def test_writing_a_result_notes_a_restart_request(tmp_path):
    run = _run(tmp_path)
    asked = {"restartRequested": True, "restartReason": "config"}
    run.write_result(call("t__r", {}, "c1"), ToolResult.ok({"restartRequested": "yes"}))
    assert run.state.restart_reason is None  # only `true` asks
    run.write_result(call("t__r", {}, "c2"), ToolResult.ok(asked))
    run.write_result(call("t__r", {}, "c3"), ToolResult.ok(1))
    assert run.state.restart_reason == "config"
    assert (_last(run).role, _last(run).tool_call_id) == ("tool", "c3")


# -- a batch of tool calls ---------------------------------------------------------------------


async def test_a_batch_reports_results_in_order_malformed_calls_and_warnings(tmp_path):
    run = _run(
        tmp_path,
        tool("t__same", lambda c, a: "same"),
        loop_detection=LoopDetectionPolicy(warn_at=2, block_at=9, stop_at=10),
    )
    calls = [
        call("t__same", {"id": 1}, "c1"),
        call("t__same", "not json", "c2"),
        call("t__same", {"id": 1}, "c3"),
    ]
    assistant = Message(id="a", role="assistant", tool_calls=tuple(calls))
    outcome = await run_tool_calls(_step_ctx(run), assistant, calls, frozenset({"t__same"}))
    assert [r.status for r in outcome.results] == ["ok", "error", "ok"]
    assert outcome.malformed
    assert len(outcome.warnings) == 1 and "same arguments 2 times" in outcome.warnings[0]
    assert outcome.stop is None
    written = [m.tool_call_id for m in run.conversation.messages if m.role == "tool"]
    assert written == ["c1", "c2", "c3"]
    assert run.state == TurnState()  # the batch reports; it does not change the turn


async def test_a_batch_reports_the_loop_stop_without_ending_the_turn_itself(tmp_path):
    run = _run(
        tmp_path,
        tool("t__same", lambda c, a: "same"),
        loop_detection=LoopDetectionPolicy(warn_at=1, block_at=2, stop_at=2),
    )
    calls = [call("t__same", {}, "c1")]
    assistant = Message(id="a", role="assistant", tool_calls=tuple(calls))
    ctx = _step_ctx(run)
    first = await run_tool_calls(ctx, assistant, calls, frozenset({"t__same"}))
    assert first.stop is None
    second = await run_tool_calls(ctx, assistant, calls, frozenset({"t__same"}))
    assert second.stop is not None and second.stop.code == "E_TOOL_LOOP_DETECTED"
    assert second.results[0].error is not None
    assert run.state.stop is None


# -- what cannot wait for the step's end ---------------------------------------------------------


async def test_a_turn_out_of_time_mid_step_keeps_the_reply_and_a_restart_request(tmp_path):
    async def slow(ctx, args):
        await asyncio.sleep(30)

    def restart(ctx, args):
        return {"restartRequested": True, "restartReason": "config"}

    model = ScriptedModel(
        reply("Restarting once the check is done.", call("t__restart", {}, "c1"), call("t__slow"))
    )
    definition = agent(
        model,
        tool("t__restart", restart),
        tool("t__slow", slow),
        budget=BudgetPolicy(max_turn_seconds=0.3),
    )
    outcome = await turn(definition, tmp_path)
    assert (outcome.finish_reason, outcome.restart_reason) == ("budget", "config")
    assert outcome.text.startswith("Restarting once the check is done.\n\n")
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (10, 5)
