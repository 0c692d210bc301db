"""Figure 6: in-process tool dispatch overhead.

Product: the path a tool call takes in the agent loop — a `toolCall` middleware context through
3 pass-through middleware layers (composed once, as the loop does) into `ToolExecutor.invoke`
(catalog check, schema validation, handler call, JSON check of the output, `ToolResult`) — on a
trivial async handler loaded the product's way: a generated bundle with one Tool resource,
through `load_bundle` and `ToolRegistry.from_resources`. Baseline: `await handler(ctx, args)`
on the same handler with a parsed dict.
Both run on uvloop in this process, alternating in repetitions; the figure is the median
repetition's time per call. Goal: at most 3 us per call over the direct await (issue 31; it
was 20 us).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.harness import Row, log
from bench.procs import short_tmpdir

NAME = "dispatch"
GOAL_US = 3.0

TOOL = """
async def noop(ctx, args):
    return {"n": args["n"]}

handlers = {"noop": noop}
"""

BUNDLE = """apiVersion: goondan.ai/v1
kind: Model
metadata: {name: m}
spec: {provider: scripted, model: scripted-v1}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: t}
spec:
  entry: ./t.py
  exports:
    - name: noop
      description: Return n.
      parameters:
        type: object
        additionalProperties: false
        required: [n]
        properties: {n: {type: integer}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: a}
spec:
  modelConfig: {modelRef: "Model/m"}
  tools:
    - ref: "Tool/t"
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: "Agent/a"
  agents:
    - ref: "Agent/a"
"""


def setup(directory: Path) -> tuple[Any, Any, Any, Any]:
    import structlog

    from agentproc.messages import ToolCall
    from agentproc.tool_registry import ToolRegistry
    from goondan.bundle import load_bundle
    from goondan.tools import ToolContext

    (directory / "t.py").write_text(TOOL)
    (directory / "goondan.yaml").write_text(BUNDLE)
    bundle = load_bundle(directory)
    swarm = bundle.select_swarm(None)
    agent = bundle.swarm_agents(swarm)["a"]
    registry = ToolRegistry.from_resources(bundle.agent_tools(agent))
    call = ToolCall(id="call_1", name="t__noop", arguments='{"n": 1}')
    ctx = ToolContext(
        agent_name="a",
        instance_key="bench",
        turn_id="t1",
        trace_id="0" * 32,
        tool_call_id="call_1",
        message=None,
        workdir=directory / "work",
        logger=structlog.get_logger(),
        runtime=None,  # type: ignore[arg-type]
    )
    entry = registry.get("t__noop")
    if entry is None:
        raise RuntimeError("the registry has no t__noop")
    return registry, call, ctx, entry.handler


def dispatcher(registry: Any, call: Any, ctx: Any) -> Callable[[], Awaitable[Any]]:
    """The product's path (`setup`'s parts): one call through 3 pass-through middleware
    layers into `ToolExecutor.invoke`, per await of what this returns."""
    from agentproc.middleware import Pipeline
    from agentproc.tool_executor import ToolExecutor
    from goondan import ToolCallMiddlewareContext

    executor = ToolExecutor(registry)
    catalog = frozenset(registry.names())
    pipeline = Pipeline()
    for _ in range(3):

        async def layer(mw_ctx: Any) -> Any:
            return await mw_ctx.next()

        pipeline.register("toolCall", layer)

    async def core(mw_call: Any) -> Any:
        return await executor.invoke(mw_call.tool_name, mw_call.args, lambda: ctx, catalog=catalog)

    layers = pipeline.chain("toolCall", core)

    async def dispatch() -> Any:
        # Positional, as the loop builds it (`agentproc.tool_calls._call_ctx`).
        mw_call = ToolCallMiddlewareContext(
            layers, "a", "bench", "t1", "0" * 32, 0, call.name, call.id, {"n": 1}
        )
        return await mw_call._start()

    return dispatch


async def _measure(registry: Any, call: Any, ctx: Any, handler: Any, n: int, reps: int) -> Any:
    dispatch = dispatcher(registry, call, ctx)
    first = await dispatch()
    if first.status != "ok":
        raise RuntimeError(f"the tool call failed: {first}")
    args = {"n": 1}
    for _ in range(1000):  # warm up both paths
        await dispatch()
        await handler(ctx, args)
    product, direct = [], []
    for _ in range(reps):
        started = time.perf_counter()
        for _ in range(n):
            await dispatch()
        product.append((time.perf_counter() - started) / n * 1e6)
        started = time.perf_counter()
        for _ in range(n):
            await handler(ctx, args)
        direct.append((time.perf_counter() - started) / n * 1e6)
    return product, direct


def run(quick: bool) -> list[Row]:
    import uvloop

    n, reps = (5_000, 3) if quick else (20_000, 7)
    with short_tmpdir() as tmp:
        registry, call, ctx, handler = setup(tmp)
        log(f"dispatch: {reps} x {n} calls each way")
        product, direct = uvloop.run(_measure(registry, call, ctx, handler, n, reps))
    p, d = statistics.median(product), statistics.median(direct)
    return [
        Row(
            "6 tool dispatch (3 middleware layers), per call",
            "us",
            p,
            d,
            "direct await",
            goal=f"overhead <= {GOAL_US:g} us",
            judge=lambda prod, base, r: base is not None and prod - base <= GOAL_US,
            note=f"overhead {p - d:.2f} us per call",
            details={"productUs": product, "directUs": direct, "callsPerRep": n},
        )
    ]
