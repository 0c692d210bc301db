"""A plain turn (no middleware, the model answering in text) stores, reports and answers what
the general turn does; any other first reply is taken over by the general turn from the model
call, without asking the model twice.

Each script runs twice on the same scripted model: once on an agent that may take the plain
path, once on the same agent with a step middleware that only passes through (so the general
turn runs every step). The two must leave the same conversation, the same runtime events and
the same answer.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from agentproc.messages import ModelError, ModelReply, ModelRequest, Usage
from agentproc.plain_turn import can_run_plain
from agentproc.turn import AgentDefinition, TurnCancel, TurnInput, run_turn
from goondan.bundle.model import BudgetPolicy, ModelPricing
from goondan.extensions import StepMiddlewareContext, StepResult
from goondan.logs import log_context
from tests.unit.agentproc.loop_kit import (
    NoRuntime,
    ScriptedModel,
    agent,
    call,
    events,
    instance,
    reply,
    tool,
    turn,
)


async def _pass_through(ctx: StepMiddlewareContext) -> StepResult:
    return await ctx.next()


def _conversation(messages: list[Any]) -> list[tuple[Any, ...]]:
    """What a reader of the conversation sees, without the turn's random id and the clock."""
    return [
        (
            re.sub(r"^[0-9a-f]{12}-", "", m.id),
            m.role,
            m.content,
            [(c.name, c.arguments) for c in m.tool_calls],
            {k: v for k, v in m.metadata.items() if k != "receivedAt"},
        )
        for m in messages
    ]


def _events(log: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    turn_id = log[0].turn_id
    out = []
    for event in log:
        assert event.turn_id == turn_id
        data = {k: v for k, v in event.data.items() if k != "duration"}
        if "stepId" in data:
            data["stepId"] = data["stepId"].replace(turn_id, "<turn>")
        out.append((event.type, data))
    return out


async def _both(
    tmp_path: Path, replies: Sequence[ModelReply | ModelError], **options: Any
) -> list[tuple[Any, ...]]:
    """The script's turn on a plain agent and on the same agent with a step middleware."""
    seen = []
    for path in ("plain", "general"):
        model = ScriptedModel(*replies)
        definition = agent(model, tool("t__a", lambda c, a: {"got": a}), **options)
        if path == "general":
            definition.pipeline.register("step", _pass_through)
        inst = instance(tmp_path / path)
        turn_input = TurnInput("hello", inst.key, "t" * 32, "cli:test")
        assert can_run_plain(definition, inst, turn_input, False) == (path == "plain")
        outcome = await turn(definition, inst, turn_input=turn_input)
        seen.append(
            (
                outcome,
                _conversation(inst.conversation.messages),
                _events(events(inst)),
                [len(r.messages) for r in model.requests],
            )
        )
    return seen


SCRIPTS: dict[str, list[ModelReply | ModelError]] = {
    "text": [reply("hi there", usage=(12, 3))],
    "tool call, then text": [reply(None, call("t__a", {"x": 1}, "c1")), reply("done")],
    "text and a tool call": [reply("let me look", call("t__a", {}, "c1")), reply("found")],
    "empty, then text": [reply(None), reply("now an answer")],
    "blank text": [reply("   "), reply("an answer")],
    "malformed arguments": [reply(None, call("t__a", "{not json", "c1")), reply("sorry")],
    "cut off by the output limit": [reply("partial", call("t__a", {}, "c1"), finish="length")],
    "model error": [ModelError("the provider is down", code="E_MODEL_UNAVAILABLE")],
    "context overflow, then compacted": [
        ModelError("maximum context length is 100 tokens", code="E_CONTEXT_OVERFLOW"),
        reply("after compaction"),
    ],
}


@pytest.mark.parametrize("script", list(SCRIPTS))
async def test_a_plain_turn_and_the_general_turn_leave_the_same_record(
    tmp_path: Path, script: str
) -> None:
    plain, general = await _both(tmp_path, SCRIPTS[script])
    assert plain[0] == general[0]  # the answer: text, finish reason, steps, usage, error code
    assert plain[1] == general[1]  # the conversation
    assert plain[2] == general[2]  # the runtime events, in order
    assert plain[3] == general[3]  # the model was asked as often, with as much


async def test_a_text_answer_is_one_call_and_four_events(tmp_path: Path) -> None:
    [(outcome, conversation, log, requests), _] = await _both(
        tmp_path, [reply("hi there", usage=(12, 3))], pricing=ModelPricing(input=2.0, output=8.0)
    )
    assert (outcome.text, outcome.finish_reason, outcome.steps) == ("hi there", "text_response", 1)
    assert (outcome.usage.input_tokens, outcome.usage.output_tokens) == (12, 3)
    assert outcome.cost_usd == 0.000048
    assert [(m[0], m[1], m[2]) for m in conversation] == [
        ("1", "user", "hello"),
        ("2", "assistant", "hi there"),
    ]
    assert [t for t, _ in log] == [
        "turn.started",
        "step.started",
        "step.completed",
        "turn.completed",
    ]
    assert log[-1][1]["tokenUsage"] == {
        "inputTokens": 12,
        "outputTokens": 3,
        "totalTokens": 15,
        "costUsd": 0.000048,
    }
    assert requests == [2]  # the system prompt and the input


async def test_a_tool_call_is_taken_over_without_asking_the_model_again(tmp_path: Path) -> None:
    [(outcome, conversation, log, requests), _] = await _both(
        tmp_path, [reply(None, call("t__a", {"x": 1}, "c1")), reply("done")]
    )
    assert outcome.text == "done" and outcome.steps == 2
    assert requests == [2, 4]  # once per step: the input, then the call and its result too
    assert [m[0] for m in conversation] == ["1", "2", "3", "4"]  # each id once, in order
    assert [t for t, _ in log] == [
        "turn.started",
        "step.started",
        "tool.called",
        "tool.completed",
        "step.completed",
        "step.started",
        "step.completed",
        "turn.completed",
    ]
    assert json.loads(conversation[2][2])["output"] == {"got": {"x": 1}}


async def test_a_turn_over_budget_after_its_first_step_stops_the_same(tmp_path: Path) -> None:
    script = [reply(None, call("t__a", {}, "c1"), usage=(900, 200)), reply("never")]
    plain, general = await _both(tmp_path, script, budget=BudgetPolicy(max_turn_tokens=1000))
    assert plain[0].error_code == "E_TURN_BUDGET" and plain[0].steps == 1
    assert plain[1:] == general[1:]


class SlowModel:
    """Answers after `seconds`, so a cancel or a deadline meets the turn in its model call."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.called = asyncio.Event()

    async def complete(self, request: ModelRequest, *, on_text: Any = None) -> ModelReply:
        self.called.set()
        await asyncio.sleep(self.seconds)
        return ModelReply("late", (), Usage(1, 1))

    async def aclose(self) -> None:
        return None


def _slow_agent(seconds: float, **options: Any) -> tuple[SlowModel, AgentDefinition]:
    model = SlowModel(seconds)
    definition = agent(ScriptedModel(), **options)
    definition.provider = model
    return model, definition


async def test_the_time_budget_stops_a_slow_first_call(tmp_path: Path) -> None:
    _, definition = _slow_agent(30, budget=BudgetPolicy(max_turn_seconds=0.1))
    inst = instance(tmp_path)
    outcome = await turn(definition, inst)
    assert (outcome.finish_reason, outcome.error_code) == ("budget", "E_TURN_BUDGET")
    assert "ran out of time" in outcome.text
    assert inst.conversation.messages[-1].content == outcome.text
    assert [e.type for e in events(inst)] == [
        "turn.started",
        "step.started",
        "step.failed",
        "turn.failed",
    ]
    assert len(definition.deadlines) == 0  # nothing left watched


async def test_goondan_cancel_during_the_first_call_ends_the_turn_cancelled(
    tmp_path: Path,
) -> None:
    model, definition = _slow_agent(30)
    inst = instance(tmp_path)

    async def run() -> Any:
        task = asyncio.current_task()
        assert task is not None
        handle.append(TurnCancel(task))
        turn_input = TurnInput("hello", inst.key, "t" * 32, "cli:test")
        return await run_turn(
            definition,
            inst,
            turn_input,
            NoRuntime(),  # type: ignore[arg-type]
            inst.directory / "work",
            cancel=handle[0],
        )

    handle: list[TurnCancel] = []
    running = asyncio.ensure_future(run())
    await model.called.wait()
    handle[0].cancel()
    outcome = await running
    assert (outcome.finish_reason, outcome.error_code) == ("aborted", "E_TURN_CANCELLED")
    assert [m.role for m in inst.conversation.messages] == ["user", "assistant"]
    assert [e.type for e in events(inst)][-1] == "turn.failed"


async def test_a_shutdown_during_the_first_call_still_cancels_the_turn(tmp_path: Path) -> None:
    model, definition = _slow_agent(30)
    inst = instance(tmp_path)
    running = asyncio.ensure_future(turn(definition, inst))
    await model.called.wait()
    running.cancel()  # not a `goondan cancel`: the cancel goes on up
    with pytest.raises(asyncio.CancelledError):
        await running
    assert [e.type for e in events(inst)][-2:] == ["step.failed", "turn.failed"]


class StreamingModel:
    async def complete(self, request: ModelRequest, *, on_text: Any = None) -> ModelReply:
        for chunk in ("hi ", "there"):
            if on_text is not None:
                on_text(chunk)
        return ModelReply("hi there", (), Usage(1, 1))

    async def aclose(self) -> None:
        return None


async def test_a_streaming_model_s_text_goes_to_the_requester_as_it_comes(
    tmp_path: Path,
) -> None:
    sent = []
    for path in ("plain", "general"):
        updates: list[tuple[str, str | None, dict[str, Any]]] = []

        def sink(
            kind: str, text: str | None, data: dict[str, Any], to: list[Any] = updates
        ) -> None:
            to.append((kind, text, data))

        definition = agent(ScriptedModel())
        definition.provider = StreamingModel()
        if path == "general":
            definition.pipeline.register("step", _pass_through)
        inst = instance(tmp_path / path)
        outcome = await run_turn(
            definition,
            inst,
            TurnInput("hello", inst.key, "t" * 32, "cli:test"),
            NoRuntime(),  # type: ignore[arg-type]
            inst.directory / "work",
            updates=sink,
        )
        assert outcome.text == "hi there"
        sent.append(updates)
    assert sent[0] == sent[1] == [("text", "hi ", {}), ("text", "there", {})]


class LoggingModel:
    """Keeps the fields every log line of the turn gets (`goondan.logs`) while it answers."""

    def __init__(self) -> None:
        self.fields: list[dict[str, Any]] = []

    async def complete(self, request: ModelRequest, *, on_text: Any = None) -> ModelReply:
        self.fields.append(dict(log_context.get() or {}))
        return ModelReply("hi", (), Usage(1, 1))

    async def aclose(self) -> None:
        return None


async def test_log_lines_during_the_model_call_name_the_turn(tmp_path: Path) -> None:
    for path in ("plain", "general"):
        model = LoggingModel()
        definition = agent(ScriptedModel())
        definition.provider = model
        if path == "general":
            definition.pipeline.register("step", _pass_through)
        inst = instance(tmp_path / path)
        await turn(definition, inst, trace_id="a" * 32)
        assert model.fields == [
            {"instanceKey": inst.key, "traceId": "a" * 32, "turnId": events(inst)[0].turn_id}
        ]
        assert log_context.get() is None  # and no longer once it is over


async def test_an_extension_listening_to_events_gets_the_general_turn(tmp_path: Path) -> None:
    heard: list[str] = []
    model = ScriptedModel(reply("hi"))
    definition = agent(model)
    assert definition.bus is not None
    definition.bus.on("turn.completed", lambda payload: heard.append(payload["turnId"]))
    inst = instance(tmp_path)
    turn_input = TurnInput("hello", inst.key, "t" * 32, "cli:test")
    assert not can_run_plain(definition, inst, turn_input, False)
    await turn(definition, inst, turn_input=turn_input)
    assert heard == [events(inst)[-1].turn_id]
