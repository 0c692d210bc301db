"""The executor's rules: errors are data, in the order of the spec."""

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import fastjsonschema
import msgspec
import pytest
import structlog

from agentproc.catalog import ToolPolicy
from agentproc.messages import ToolCall
from agentproc.tool_executor import ToolExecutor, execute_tool_call, truncate_error_message
from agentproc.tool_registry import ToolEntry, ToolRegistry, make_entry
from goondan import Pending, ToolContext, ToolError, ToolErrorInfo, ToolResult
from goondan.bundle.model import ToolPolicySpec

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
        runtime=None,  # type: ignore[arg-type]  # these tools never reach the runtime
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
        ({}, "args.x: required property is missing"),
        ({"x": "one"}, "args.x: must be an integer, got string"),
        ({"x": 1, "extra": 2}, "args.extra: unexpected property"),
        ({"x": 1, "mode": "c"}, "args.mode: must be one of a, b"),
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


# -- the executor with its options ---------------------------------------------------------------


def make(name, handler, **options):
    return make_entry(name, "d", SCHEMA, handler, **options)


async def invoke(executor, name, args, catalog=None, **kw):
    call = ToolCall("c1", name, json.dumps(args))
    return await executor.invoke(
        name, args, lambda: context(call), catalog=catalog or executor.registry.names(), **kw
    )


async def test_invalid_arguments_list_up_to_five_problems():
    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["a", "b", "c"],
        "properties": {
            "a": {"type": "string"},
            "b": {"type": "integer", "minimum": 1},
            "c": {"enum": ["x", "y"]},
            "d": {"type": "array", "items": {"type": "string"}},
        },
    }
    registry = ToolRegistry([make_entry("m__a", "d", schema, lambda c, a: 1)])
    args = {"b": 0, "c": "z", "d": [1, "ok", 2], "e": 1}
    result = await invoke(ToolExecutor(registry), "m__a", args)
    message = result.error.message
    assert result.error.code == "E_TOOL_INVALID_ARGS"
    assert message == (
        "Invalid arguments for tool 'm__a': args.a: required property is missing; "
        "args.b: must be >= 1, got 0; args.c: must be one of x, y; "
        "args.d[0]: must be a string, got integer; args.d[2]: must be a string, got integer; "
        "+1 more issue"
    )
    assert "required=['a', 'b', 'c']" in result.error.suggestion


async def test_handler_never_runs_with_invalid_arguments():
    ran = []
    registry = ToolRegistry([make("m__a", lambda c, a: ran.append(a))])
    result = await invoke(ToolExecutor(registry), "m__a", {"x": "no"})
    assert result.error.code == "E_TOOL_INVALID_ARGS" and ran == []


async def test_error_copies_suggestion_and_help_url_and_own_code():
    class QuotaError(Exception):
        code = "E_QUOTA"
        suggestion = "wait a minute"
        help_url = "https://example.test/quota"

    def boom(ctx, args):
        raise QuotaError("over quota")

    result = await invoke(ToolExecutor(ToolRegistry([make("m__a", boom)])), "m__a", {"x": 1})
    assert result.error == ToolErrorInfo(
        message="over quota",
        code="E_QUOTA",
        name="QuotaError",
        suggestion="wait a minute",
        help_url="https://example.test/quota",
    )
    wire = json.loads(msgspec.json.encode(result))
    assert wire["error"]["helpUrl"] == "https://example.test/quota"


async def test_an_error_without_a_message_is_unknown_tool_execution_error():
    def boom(ctx, args):
        raise ValueError()

    result = await invoke(ToolExecutor(ToolRegistry([make("m__a", boom)])), "m__a", {"x": 1})
    assert (result.error.code, result.error.name, result.error.message) == (
        "E_TOOL",
        "ValueError",
        "Unknown tool execution error",
    )


async def test_a_tool_exiting_the_interpreter_is_an_error_not_an_exit():
    def boom(ctx, args):
        raise SystemExit(3)

    result = await invoke(ToolExecutor(ToolRegistry([make("m__a", boom)])), "m__a", {"x": 1})
    assert result.status == "error" and result.error.name == "SystemExit"


@pytest.mark.parametrize("limit, length", [(20, 20), (16, 16), (15, 15), (5, 5), (2000, 1500)])
async def test_the_per_tool_limit_applies(limit, length):
    def boom(ctx, args):
        raise RuntimeError("e" * 1500)

    registry = ToolRegistry([make("m__a", boom, error_message_limit=limit)])
    message = (await invoke(ToolExecutor(registry), "m__a", {"x": 1})).error.message
    assert len(message) == length
    assert message.endswith("... (truncated)") is (1500 > limit > 15)


async def test_async_handler_timeout() -> None:
    cancelled: list[bool] = []

    async def slow(ctx: ToolContext, args: dict[str, Any]) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    registry = ToolRegistry([make("m__a", slow, timeout_ms=50)])
    result = await invoke(ToolExecutor(registry), "m__a", {"x": 1})
    assert result.error is not None
    assert result.error.code == "E_TOOL_TIMEOUT" and "50 ms" in result.error.message
    assert cancelled == [True]  # stopped at its limit, not waited for


async def test_each_call_times_out_on_its_own_limit_and_an_outside_cancel_stays_a_cancel():
    async def slow(ctx, args):
        await asyncio.sleep(args["x"] / 1000)
        return "done"

    registry = ToolRegistry(
        [make("m__short", slow, timeout_ms=30), make("m__long", slow, timeout_ms=2_000)]
    )
    executor = ToolExecutor(registry)
    short, long = await asyncio.gather(
        invoke(executor, "m__short", {"x": 5_000}), invoke(executor, "m__long", {"x": 100})
    )
    assert short.error.code == "E_TOOL_TIMEOUT" and long.output == "done"
    cancelled = asyncio.ensure_future(invoke(executor, "m__long", {"x": 5_000}))
    await asyncio.sleep(0.02)
    cancelled.cancel()  # the turn was stopped: not the tool's timeout
    with pytest.raises(asyncio.CancelledError):
        await cancelled


async def test_sync_handler_timeout_uses_the_agent_default():
    import time as _time

    registry = ToolRegistry([make("m__a", lambda c, a: _time.sleep(0.5))])
    result = await invoke(ToolExecutor(registry, default_timeout_ms=50), "m__a", {"x": 1})
    assert result.error.code == "E_TOOL_TIMEOUT"
    assert result.details["timeoutMs"] == 50


async def test_a_timed_out_sync_call_blocks_its_tool_until_it_returns():
    import threading

    release = threading.Event()
    registry = ToolRegistry(
        [
            make("m__stuck", lambda c, a: release.wait(30), timeout_ms=50),
            make("m__other", lambda c, a: "fine", timeout_ms=50),
        ]
    )
    executor = ToolExecutor(registry)
    try:
        assert (await invoke(executor, "m__stuck", {"x": 1})).error.code == "E_TOOL_TIMEOUT"
        refused = (await invoke(executor, "m__stuck", {"x": 1})).error
        assert refused.code == "E_TOOL_STILL_RUNNING"
        assert "'m__stuck'" in refused.message and "timed out" in refused.message
        assert (await invoke(executor, "m__other", {"x": 1})).output == "fine"
    finally:
        release.set()
    while executor.abandoned:  # the thread returns, and its count goes with it
        await asyncio.sleep(0.01)
    assert (await invoke(executor, "m__other", {"x": 1})).output == "fine"
    executor.close()


async def test_a_cancelled_sync_call_is_told_through_ctx_cancelled():
    import threading

    seen: list[bool] = []
    started = threading.Event()
    release = threading.Event()

    def slow(ctx, args):
        started.set()
        while not ctx.cancelled and not release.is_set():
            release.wait(0.01)
        seen.append(ctx.cancelled)
        release.wait(30)  # it heard, but takes its time to return
        return {}

    registry = ToolRegistry([make("m__slow", slow, timeout_ms=60_000)])
    executor = ToolExecutor(registry)
    task = asyncio.ensure_future(invoke(executor, "m__slow", {"x": 1}))
    await asyncio.to_thread(started.wait, 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):
        if seen:
            break
        await asyncio.sleep(0.01)
    assert seen == [True]
    # Until its thread returns, the tool is refused, as for a timed-out call.
    refused = (await invoke(executor, "m__slow", {"x": 1})).error
    assert refused.code == "E_TOOL_STILL_RUNNING" and "cancelled" in refused.message
    release.set()
    while executor.abandoned:
        await asyncio.sleep(0.01)
    executor.close()


async def test_past_the_cap_of_timed_out_threads_every_sync_tool_is_refused():
    import threading

    release = threading.Event()
    names = ["m__a", "m__b", "m__c"]
    registry = ToolRegistry(
        [make(n, lambda c, a: release.wait(30), timeout_ms=50) for n in names]
        + [make("m__ok", lambda c, a: "ok")]
    )
    executor = ToolExecutor(registry, max_abandoned=2)
    try:
        for name in names[:2]:
            assert (await invoke(executor, name, {"x": 1})).error.code == "E_TOOL_TIMEOUT"
        for name in ["m__c", "m__ok"]:
            refused = (await invoke(executor, name, {"x": 1})).error
            assert refused.code == "E_TOOL_STILL_RUNNING"
            assert "2 timed-out calls of sync tools (m__a, m__b)" in refused.message
    finally:
        release.set()
    while executor.abandoned:
        await asyncio.sleep(0.01)
    assert (await invoke(executor, "m__ok", {"x": 1})).output == "ok"
    executor.close()


async def test_tool_policy_denies_with_a_structured_error():
    policy = ToolPolicy(ToolPolicySpec(allow=("m__*",), deny=("m__secret",)))
    registry = ToolRegistry([make("m__a", lambda c, a: 1), make("m__secret", lambda c, a: 2)])
    executor = ToolExecutor(registry)
    assert (await invoke(executor, "m__a", {"x": 1}, denied=policy.refusal)).output == 1
    denied = await invoke(executor, "m__secret", {"x": 1}, denied=policy.refusal)
    assert denied.error.code == "E_TOOL_POLICY_DENIED"
    assert policy.unmatched(["m__a", "m__secret"]) == []
    assert ToolPolicy(ToolPolicySpec(deny=("nope__*",))).unmatched(["m__a"]) == ["nope__*"]


async def test_registry_calls_outside_the_catalog_need_a_declared_policy():
    registry = ToolRegistry([make("m__hidden", lambda c, a: "ran")])
    executor = ToolExecutor(registry)
    refused = await invoke(executor, "m__hidden", {"x": 1}, catalog={"m__other"})
    assert refused.error.code == "E_TOOL_NOT_IN_CATALOG"
    allowed = await invoke(
        executor, "m__hidden", {"x": 1}, catalog={"m__other"}, allow_registry_calls=True
    )
    assert allowed.output == "ran"
    unknown = await invoke(
        executor, "m__nothing", {"x": 1}, catalog={"m__other"}, allow_registry_calls=True
    )
    assert unknown.error.code == "E_TOOL_NOT_IN_CATALOG"


async def test_a_handler_may_return_a_tool_result_with_details():
    def fine(ctx, args):
        return ToolResult.ok({"rows": 2}, details={"sql": "select 1"})

    def soft_error(ctx, args):
        return ToolResult.fail(ToolErrorInfo("x" * 50, code="E_SOFT"))

    registry = ToolRegistry([make("m__a", fine), make("m__b", soft_error, error_message_limit=20)])
    executor = ToolExecutor(registry)
    result = await invoke(executor, "m__a", {"x": 1})
    assert result.output == {"rows": 2} and result.details == {"sql": "select 1"}
    soft = await invoke(executor, "m__b", {"x": 1})
    assert soft.error.code == "E_SOFT" and len(soft.error.message) == 20


async def test_pending_without_a_job_manager_is_an_error():
    async def later():
        return 1

    def submit(ctx, args):
        work = later()
        work.close()
        return Pending(lambda: 1)

    result = await invoke(ToolExecutor(ToolRegistry([make("m__a", submit)])), "m__a", {"x": 1})
    assert result.error.code == "E_TOOL_PENDING_UNSUPPORTED"


def test_tool_names_are_checked_when_registered():
    for bad in ("nosep", "a__b__c", "__b", "a__", "a b__c", "x" * 70 + "__y"):
        with pytest.raises(ValueError):
            make_entry(bad, "d", SCHEMA, lambda c, a: 1)
    with pytest.raises(ValueError, match="invalid parameters schema"):
        make_entry("a__b", "d", {"type": "object", "properties": 3}, lambda c, a: 1)


# -- the quick paths: the same answers as the general ones ------------------------------------

FLAT = {
    "type": "object",
    "additionalProperties": False,
    "required": ["n", "s"],
    "properties": {
        "n": {"type": "integer", "description": "a count"},
        "s": {"type": "string"},
        "x": {"type": "number"},
        "b": {"type": "boolean"},
        "z": {"type": ["string", "null"]},
        "o": {"type": "object"},
        "a": {"type": "array"},
    },
}
OPEN = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
EXACT = {  # closed, every property required
    "type": "object",
    "additionalProperties": False,
    "required": ["s", "n"],
    "properties": {"n": {"type": "integer"}, "s": {"type": "string"}},
}
EXACT_NULLABLE = {  # a missing property must not pass for one that may be null
    **EXACT,
    "properties": {"n": {"type": "integer"}, "s": {"type": ["string", "null"]}},
}
VALUES = [
    {"n": 1, "s": "a"},
    {"n": 1, "s": "a", "x": 1.5, "b": True, "z": None, "o": {"k": 1}, "a": [1, "2"]},
    {"n": 1, "s": "a", "x": 2, "z": "z"},
    {"n": 3.0, "s": "a"},  # a whole float is an integer to JSON Schema
    {"n": True, "s": "a"},  # a bool is not
    {"n": "1", "s": "a"},
    {"n": 1},
    {},
    {"n": 1, "s": "a", "extra": 1},
    {"n": 1, "extra": "a"},
    {"n": 1, "extra": None},
    {"n": 1, "s": None},
    {"n": 1, "s": "a", "b": 0},
    {"n": 1, "s": "a", "z": 1},
    {"n": 1, "s": "a", "a": (1, 2)},
    [1],
    "text",
    None,
]


def outcome(validate, value):
    data = copy.deepcopy(value)
    try:
        returned = validate(data)
    except fastjsonschema.JsonSchemaValueException as exc:
        return ("error", exc.message, exc.rule, data)
    return ("ok", returned is data, data)


@pytest.mark.parametrize(
    "schema",
    [FLAT, OPEN, EXACT, EXACT_NULLABLE, SCHEMA, {**OPEN, "additionalProperties": True}],
)
@pytest.mark.parametrize("value", VALUES)
def test_the_quick_validator_answers_as_the_compiled_one(schema, value):
    from agentproc.tool_registry import quick_validator

    compiled = fastjsonschema.compile(schema)
    assert outcome(quick_validator(schema, compiled), value) == outcome(compiled, value)


@pytest.mark.parametrize(
    "schema",
    [
        SCHEMA,  # an enum
        {**OPEN, "properties": {"n": {"type": "integer", "default": 3}}},  # fills in data
        {**OPEN, "properties": {"n": {"type": "integer", "minimum": 0}}},
        {**OPEN, "additionalProperties": {"type": "string"}},
        {**OPEN, "$schema": "http://json-schema.org/draft-04/schema#"},
        {"type": "object", "properties": {"n": {}}},
        {"properties": {"n": {"type": "integer"}}},
    ],
)
def test_schemas_saying_more_keep_the_compiled_validator_alone(schema):
    from agentproc.tool_registry import quick_validator

    compiled = fastjsonschema.compile(schema)
    assert quick_validator(schema, compiled) is compiled


async def test_a_handler_that_waits_on_the_loop_runs_to_its_end():
    seen: list[str] = []

    async def waits(ctx, args):
        for step in range(3):
            await asyncio.sleep(0)
            seen.append(f"step {step}")
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.01, fut.set_result, "late")
        return {"got": await fut, "x": args["x"]}

    async def fails_later(ctx, args):
        await asyncio.sleep(0.005)
        raise ToolError("broke after waiting")

    executor = ToolExecutor(ToolRegistry([make("m__w", waits), make("m__f", fails_later)]))
    result = await invoke(executor, "m__w", {"x": 7})
    assert result.status == "ok" and result.output == {"got": "late", "x": 7}
    assert seen == ["step 0", "step 1", "step 2"]
    failed = await invoke(executor, "m__f", {"x": 1})
    assert failed.error.code == "E_TOOL" and failed.error.message == "broke after waiting"
    assert len(executor._deadlines) == 0  # every watched call ended


async def test_the_deadline_counts_from_the_call_start_not_from_the_first_wait():
    import time as _time

    async def busy_then_waits(ctx, args):
        _time.sleep(0.08)  # past its 30 ms before it first waits on the loop
        await asyncio.sleep(2)
        return "late"

    async def busy_only(ctx, args):
        _time.sleep(0.08)  # no wait on the loop: no timer can fire, as with `await`
        return "done"

    registry = ToolRegistry(
        [make("m__w", busy_then_waits, timeout_ms=30), make("m__b", busy_only, timeout_ms=30)]
    )
    executor = ToolExecutor(registry)
    started = _time.monotonic()
    result = await invoke(executor, "m__w", {"x": 1})
    assert result.error.code == "E_TOOL_TIMEOUT"
    assert _time.monotonic() - started < 1.5 and result.details["elapsedMs"] >= 80
    assert (await invoke(executor, "m__b", {"x": 1})).output == "done"


async def test_a_cancel_reaches_a_waiting_handler_which_may_answer_anyway():
    entered = asyncio.Event()
    told: list[bool] = []

    async def stubborn(ctx, args):
        entered.set()
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            told.append(ctx.cancelled)
            await asyncio.sleep(0)  # still allowed to wait while winding down
            return "wound down"
        return "slept"

    executor = ToolExecutor(ToolRegistry([make("m__s", stubborn)]))
    call = asyncio.ensure_future(invoke(executor, "m__s", {"x": 1}))
    await entered.wait()
    call.cancel()
    result = await call  # the handler swallowed the cancel: its answer stands, as with await
    assert result.output == "wound down" and told == [False]


async def test_a_cancelled_error_raised_before_any_wait_marks_the_context():
    contexts: list[ToolContext] = []

    async def gives_up(ctx, args):
        contexts.append(ctx)
        raise asyncio.CancelledError

    executor = ToolExecutor(ToolRegistry([make("m__g", gives_up)]))
    with pytest.raises(asyncio.CancelledError):
        await invoke(executor, "m__g", {"x": 1})
    assert contexts[0].cancelled


def test_registry_lookup_follows_registrations_and_replaced_groups():
    async def one(ctx, args):
        return 1

    async def two(ctx, args):
        return 2

    config = make("m__a", one)
    registry = ToolRegistry([config])
    extension = msgspec.structs.replace(make("m__a", two), source="extension")
    assert registry.register(extension) is False and registry.get("m__a") is config
    added = msgspec.structs.replace(make("e__b", two), source="extension")
    assert registry.register(added) and registry.get("e__b") is added
    replaced = make("m__c", two)
    registry.replace_group("m", [replaced])
    assert registry.get("m__a") is None and registry.get("m__c") is replaced
    assert registry.get("e__b") is added and registry.names() == ["m__c", "e__b"]


async def test_calls_that_raise_return_wait_and_nest_each_get_their_own_answer():
    executor: ToolExecutor

    async def fine(ctx, args):
        return {"x": args["x"]}

    async def raises(ctx, args):
        raise ToolError(f"no {args['x']}")

    async def waits(ctx, args):
        await asyncio.sleep(0.01)
        return {"waited": args["x"]}

    async def nests(ctx, args):  # a tool calling tools from its first stretch
        inner = await invoke(executor, "m__fine", {"x": args["x"] + 1})
        later = await invoke(executor, "m__waits", {"x": args["x"] + 2})
        failed = await invoke(executor, "m__raises", {"x": args["x"] + 3})
        return [inner.output, later.output, failed.error.message]

    executor = ToolExecutor(
        ToolRegistry([make(f"m__{f.__name__}", f) for f in (fine, raises, waits, nests)])
    )
    for _ in range(2):
        assert (await invoke(executor, "m__raises", {"x": 1})).error.message == "no 1"
        assert (await invoke(executor, "m__fine", {"x": 2})).output == {"x": 2}
    both = await asyncio.gather(
        invoke(executor, "m__waits", {"x": 3}),
        invoke(executor, "m__nests", {"x": 10}),
        invoke(executor, "m__fine", {"x": 4}),
        invoke(executor, "m__waits", {"x": 5}),
    )
    assert [r.output for r in both] == [
        {"waited": 3},
        [{"x": 11}, {"waited": 12}, "no 13"],
        {"x": 4},
        {"waited": 5},
    ]
    assert (await invoke(executor, "m__nests", {"x": 0})).output[2] == "no 3"


async def test_the_executor_keeps_no_reference_to_a_result():
    import gc
    import weakref

    class Output(dict[str, Any]):
        pass

    async def returns(ctx, args):
        return Output(x=args["x"])

    executor = ToolExecutor(ToolRegistry([make("m__r", returns)]))
    result = await invoke(executor, "m__r", {"x": 1})
    assert result.output == {"x": 1}
    gone = weakref.ref(result.output)
    del result
    gc.collect()
    assert gone() is None
