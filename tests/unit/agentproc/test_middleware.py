"""The turn / step / toolCall onions: order, next() rules, what each layer may change."""

import asyncio
from typing import Any

import msgspec
import pytest

from agentproc.middleware import Pipeline
from goondan import ToolCatalogItem, ToolErrorInfo, ToolResult
from tests.unit.agentproc.loop_kit import (
    ScriptedModel,
    agent,
    call,
    reply,
    tool,
    tool_results,
    turn,
)


def recorder(log, name):
    async def mw(ctx):
        log.append(f"{name}>")
        result = await ctx.next()
        log.append(f"<{name}")
        return result

    mw.__qualname__ = name
    return mw


async def test_order_is_priority_then_registration(tmp_path):
    log: list[str] = []
    model = ScriptedModel(reply(None, call("t__a")), reply("done"))
    definition = agent(model, tool("t__a", lambda c, a: log.append("handler")))
    pipeline = definition.pipeline
    pipeline.register("toolCall", recorder(log, "A"))  # priority 0, first
    pipeline.register("toolCall", recorder(log, "B"), priority=-5)  # outermost
    pipeline.register("toolCall", recorder(log, "C"))  # priority 0, second
    pipeline.register("toolCall", recorder(log, "D"), priority=5)  # innermost
    await turn(definition, tmp_path)
    assert log == ["B>", "A>", "C>", "D>", "handler", "<D", "<C", "<A", "<B"]


async def test_turn_wraps_steps_which_wrap_tool_calls(tmp_path):
    log: list[str] = []
    model = ScriptedModel(reply(None, call("t__a")), reply("done"))
    definition = agent(model, tool("t__a", lambda c, a: None))
    for kind in ("toolCall", "step", "turn"):
        definition.pipeline.register(kind, recorder(log, kind))
    await turn(definition, tmp_path)
    assert log == ["turn>", "step>", "toolCall>", "<toolCall", "<step", "step>", "<step", "<turn"]


async def test_next_may_be_called_at_most_once(tmp_path):
    async def twice(ctx):
        await ctx.next()
        return await ctx.next()

    model = ScriptedModel(reply(None, call("t__a")), reply("done"))
    definition = agent(model, tool("t__a", lambda c, a: 1))
    definition.pipeline.register("toolCall", twice)
    outcome = await turn(definition, tmp_path)
    [result] = tool_results(model)
    assert result["error"]["code"] == "E_TOOL_MIDDLEWARE"
    assert "called ctx.next() more than once" in result["error"]["message"]
    assert outcome.finish_reason == "text_response"  # the turn goes on


async def test_a_second_next_is_refused_after_an_inner_layer_short_circuits(tmp_path):
    ran: list[str] = []

    async def twice(ctx):
        await ctx.next()
        return await ctx.next()  # the inner layer answered without calling next()

    async def answers(ctx):
        ran.append("answers")
        return ToolResult.ok("from middleware")

    model = ScriptedModel(reply(None, call("t__a")), reply("done"))
    definition = agent(model, tool("t__a", lambda c, a: ran.append("handler")))
    definition.pipeline.register("toolCall", twice)
    definition.pipeline.register("toolCall", answers)
    await turn(definition, tmp_path)
    [result] = tool_results(model)
    assert result["error"]["code"] == "E_TOOL_MIDDLEWARE"
    refused = f"middleware {twice.__qualname__} called ctx.next() more than once"
    assert refused in result["error"]["message"]
    assert ran == ["answers"]  # neither the inner layer again nor the handler


async def test_next_may_be_called_from_a_task_the_layer_awaits(tmp_path):
    async def call_next(ctx):
        return await ctx.next()

    async def in_a_task(ctx):
        return await asyncio.create_task(call_next(ctx))

    async def in_two_tasks(ctx):
        await asyncio.create_task(call_next(ctx))
        return await asyncio.create_task(call_next(ctx))

    results = []
    for layer in (in_a_task, in_two_tasks):
        model = ScriptedModel(reply(None, call("t__a", {"n": 4})), reply("done"))
        definition = agent(model, tool("t__a", lambda c, a: a["n"] * 2))
        definition.pipeline.register("toolCall", layer)
        await turn(definition, tmp_path / layer.__name__)
        results.extend(tool_results(model))
    assert results[0] == {"status": "ok", "output": 8}
    assert results[1]["error"]["code"] == "E_TOOL_MIDDLEWARE"
    refused = f"middleware {in_two_tasks.__qualname__} called ctx.next() more than once"
    assert refused in results[1]["error"]["message"]


async def test_tool_call_middleware_rewrites_args_and_short_circuits(tmp_path):
    seen: list[object] = []

    async def rewrite(ctx):
        if ctx.tool_name == "t__blocked":
            return ToolResult.fail(ToolErrorInfo("not today", code="E_POLICY_X"))
        ctx.args = {**ctx.args, "n": ctx.args["n"] * 10}
        return await ctx.next()

    def t_a(c: object, a: dict[str, Any]) -> Any:
        seen.append(a)
        return a["n"]

    model = ScriptedModel(reply(None, call("t__a", {"n": 2}), call("t__blocked")), reply("ok"))
    definition = agent(
        model,
        tool("t__a", t_a),
        tool("t__blocked", lambda c, a: seen.append("blocked ran")),
    )
    definition.pipeline.register("toolCall", rewrite)
    await turn(definition, tmp_path)
    assert seen == [{"n": 20}]
    assert tool_results(model) == [
        {"status": "ok", "output": 20},
        {"status": "error", "error": {"message": "not today", "code": "E_POLICY_X"}},
    ]


async def test_step_middleware_changes_the_catalog(tmp_path):
    async def catalog(ctx):
        ctx.tool_catalog = [t for t in ctx.tool_catalog if t.name != "t__hidden"]
        ctx.tool_catalog.append(
            ToolCatalogItem("t__extra", "added by middleware", {"type": "object"}, "extension")
        )
        ctx.tool_catalog.reverse()
        return await ctx.next()

    model = ScriptedModel(reply(None, call("t__hidden")), reply("ok"))
    definition = agent(
        model, tool("t__a", lambda c, a: 1), tool("t__hidden", lambda c, a: "secret")
    )
    definition.pipeline.register("step", catalog)
    await turn(definition, tmp_path)
    offered = [t.name for t in model.requests[0].tools]
    assert offered == ["t__extra", "t__a"]  # reordered, one removed, one added
    [result] = tool_results(model)
    assert result["error"]["code"] == "E_TOOL_NOT_IN_CATALOG"  # the hidden tool is refused


async def test_a_catalog_entry_without_a_handler_is_not_found(tmp_path):
    async def add(ctx):
        ctx.tool_catalog.append(ToolCatalogItem("ghost__run", "no handler anywhere"))
        return await ctx.next()

    model = ScriptedModel(reply(None, call("ghost__run")), reply("ok"))
    definition = agent(model)
    definition.pipeline.register("step", add)
    await turn(definition, tmp_path)
    assert tool_results(model)[0]["error"]["code"] == "E_TOOL_NOT_FOUND"


async def test_step_middleware_decides_whether_the_loop_continues(tmp_path):
    async def one_more(ctx):
        result = await ctx.next()
        if ctx.step_index == 0:
            result.should_continue = True  # the model answered, but we want another step
        return result

    model = ScriptedModel(reply("first"), reply("second"))
    definition = agent(model)
    definition.pipeline.register("step", one_more)
    outcome = await turn(definition, tmp_path)
    assert (outcome.text, outcome.steps) == ("second", 2)


async def test_turn_middleware_may_change_the_result(tmp_path):
    async def shout(ctx):
        result = await ctx.next()
        return msgspec.structs.replace(result, text=result.text.upper())

    definition = agent(ScriptedModel(reply("quiet")))
    definition.pipeline.register("turn", shout)
    assert (await turn(definition, tmp_path)).text == "QUIET"


async def test_a_failing_turn_middleware_fails_the_turn_not_the_process(tmp_path):
    async def broken(ctx):
        raise RuntimeError("bug in extension")

    definition = agent(ScriptedModel(reply("x")))
    definition.pipeline.register("turn", broken)
    outcome = await turn(definition, tmp_path)
    assert outcome.finish_reason == "error" and outcome.error_code == "E_TURN_FAILED"
    assert "bug in extension" in outcome.text


def test_chains_are_composed_once_and_rebuilt_on_change():
    pipeline = Pipeline()

    async def core(ctx):
        return None

    async def mw(ctx):
        return await ctx.next()

    pipeline.register("step", mw)
    first = pipeline.chain("step", core)
    assert pipeline.chain("step", core) is first and first == (mw, core)
    pipeline.register("step", mw, priority=1)
    assert pipeline.chain("step", core) is not first


def test_registration_is_checked():
    pipeline = Pipeline()

    async def mw(ctx):
        return await ctx.next()

    with pytest.raises(ValueError, match="unknown middleware type"):
        pipeline.register("tool", mw)
    with pytest.raises(ValueError, match="must be an async function"):
        pipeline.register("step", lambda ctx: ctx.next())
    with pytest.raises(ValueError, match="priority"):
        pipeline.register("step", mw, priority="high")  # type: ignore[arg-type]  # on purpose
