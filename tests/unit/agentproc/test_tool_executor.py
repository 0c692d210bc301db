"""The executor's rules: errors are data, in the order of the spec."""

import asyncio
import json
from pathlib import Path

import fastjsonschema
import pytest
import structlog

from agentproc.messages import ToolCall
from agentproc.tool_executor import execute_tool_call, truncate_error_message
from agentproc.tool_registry import ToolEntry, ToolRegistry
from goondan import ToolContext, ToolError

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["x"],
    "properties": {"x": {"type": "integer"}, "mode": {"enum": ["a", "b"]}},
}


def entry(name: str, handler, limit: int = 1000) -> ToolEntry:
    return ToolEntry(
        name=name,
        resource=name.split("__")[0],
        export=name.split("__")[1],
        description="d",
        parameters=SCHEMA,
        handler=handler,
        is_async=asyncio.iscoroutinefunction(handler),
        validate=fastjsonschema.compile(SCHEMA),
        error_message_limit=limit,
    )


def context(call: ToolCall) -> ToolContext:
    return ToolContext(
        agent_name="a",
        instance_key="k",
        turn_id="t",
        trace_id="tr",
        tool_call_id=call.id,
        message=None,
        workdir=Path("/tmp"),
        logger=structlog.get_logger(),
        runtime=None,
    )


async def run(registry, name, args, catalog=None):
    call = ToolCall("c1", name, args if isinstance(args, str) else json.dumps(args))
    return await execute_tool_call(registry, catalog or registry.names(), call, context)


async def test_sync_and_async_handlers_return_output():
    async def double(ctx, args):
        return {"y": args["x"] * 2}

    registry = ToolRegistry(
        [entry("m__sync", lambda ctx, a: a["x"] + 1), entry("m__async", double)]
    )
    assert (await run(registry, "m__sync", {"x": 1})).output == 2
    assert (await run(registry, "m__async", {"x": 4})).output == {"y": 8}


async def test_sync_handler_runs_off_the_event_loop():
    import threading

    loop_thread = threading.get_ident()
    registry = ToolRegistry([entry("m__t", lambda ctx, a: threading.get_ident())])
    assert (await run(registry, "m__t", {"x": 1})).output != loop_thread


async def test_call_outside_the_catalog():
    registry = ToolRegistry([entry("m__a", lambda c, a: 1)])
    result = await run(registry, "m__a", {"x": 1}, catalog={"other__x"})
    assert result.error.code == "E_TOOL_NOT_IN_CATALOG"
    assert "other__x" in result.error.suggestion


async def test_missing_handler():
    result = await run(ToolRegistry([]), "m__gone", {"x": 1}, catalog={"m__gone"})
    assert result.error.code == "E_TOOL_NOT_FOUND"


@pytest.mark.parametrize(
    "args, problem",
    [
        ({}, "must contain ['x'] properties"),
        ({"x": "one"}, "must be integer"),
        ({"x": 1, "extra": 2}, "must not contain"),
        ({"x": 1, "mode": "c"}, "must be one of"),
        ("{not json", "not valid JSON"),
        ("[1]", "must be a JSON object"),
    ],
)
async def test_invalid_arguments(args, problem):
    registry = ToolRegistry([entry("m__a", lambda c, a: 1)])
    result = await run(registry, "m__a", args)
    assert result.error.code == "E_TOOL_INVALID_ARGS"
    assert problem in result.error.message
    assert result.error.message.startswith("Invalid arguments for tool 'm__a'")


async def test_handler_exception_becomes_structured_error():
    def boom(ctx, args):
        raise ToolError("no such file", code="E_NOPE", suggestion="create it")

    registry = ToolRegistry([entry("m__a", boom)])
    result = await run(registry, "m__a", {"x": 1})
    assert result.status == "error"
    assert (result.error.code, result.error.name, result.error.message) == (
        "E_NOPE",
        "ToolError",
        "no such file",
    )
    assert result.error.suggestion == "create it"


async def test_error_message_is_truncated_to_the_tool_limit():
    def boom(ctx, args):
        raise RuntimeError("x" * 5000)

    registry = ToolRegistry([entry("m__a", boom, limit=300)])
    result = await run(registry, "m__a", {"x": 1})
    assert result.error.code == "E_TOOL"
    assert len(result.error.message) == 300
    assert result.error.message.endswith("... (truncated)")


async def test_output_that_is_not_json_is_an_error():
    registry = ToolRegistry([entry("m__a", lambda c, a: object())])
    result = await run(registry, "m__a", {"x": 1})
    assert result.error.code == "E_TOOL_BAD_OUTPUT"


@pytest.mark.parametrize(
    "length, limit, expected_length, suffix",
    [
        (1000, 1000, 1000, False),
        (1001, 1000, 1000, True),
        (50, 10, 10, False),
        (20, 15, 15, False),
        (20, 16, 16, True),
    ],
)
def test_truncation_boundaries(length, limit, expected_length, suffix):
    out = truncate_error_message("y" * length, limit)
    assert len(out) == expected_length
    assert out.endswith("... (truncated)") is suffix
