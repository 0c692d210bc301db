"""A rehearsal in the template process: turns of a scripted agent, so forked agents start warm.

CPython 3.11 rewrites a function's bytecode the first times it runs (quickening, then
specialising each instruction to the types it meets) and gives dicts and types version tags on
first use. Done in every agent, that is work on each agent's first turns and a write, so a
private copy, on every page it touches; done once here, the children inherit the result. The
rehearsal goes through a real AgentProcess and a real ZeroMQ ROUTER (ipc, in a temporary
directory, removed after), so the same code runs as in an agent's turn; every other turn calls
a tool, so the tool-call path is warm too. It leaves no event loop, thread or ZeroMQ context
behind, as the template's forks require. The template runs it while no launch waits
(`agentproc/zygote.py`, `Warming`): it stops after any turn when one comes in and goes on later
from that turn. A failure only costs the head start: it is reported on stderr and the template
goes on.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import uvloop
import zmq

from agentproc.process import AgentProcess
from agentproc.providers import make_provider
from agentproc.tool_registry import ToolEntry, ToolRegistry, make_entry
from agentproc.turn import AgentDefinition
from goondan.bundle.model import ModelSpec
from goondan.paths import StatePaths
from goondan.tools import ToolContext
from ipc import wire
from ipc.endpoints import bind_router

AGENT = "rehearsal"
TURNS = 24  # more than the runs CPython needs before it quickens and specialises
# A new conversation is its own path (objects, directory, files): each of the first turns opens
# one, as many as CPython needs to quicken that path too; the rest go on in the last one.
CONVERSATIONS = 12
TIMEOUT_S = 10.0
TOOL = "rehearsal__echo"
# A turn whose input starts with "tool" calls the tool, then answers with its result.
SCRIPT = {"rules": [{"when": "^tool", "steps": [{"call": TOOL, "args": {"text": "{{input}}"}}]}]}


def rehearse(turns: int = TURNS) -> bool:
    """Run `turns` delegated turns; True when every one was answered."""
    answered = rehearse_turns(0, turns)
    if answered != turns:
        print(f"goondan template: rehearsal answered {answered} of {turns} turns", file=sys.stderr)
    return answered == turns


def rehearse_turns(first: int, turns: int, should_stop: Callable[[], bool] | None = None) -> int:
    """Run turns `first` to `turns - 1`, or fewer: after each turn, stop when `should_stop()`
    (the template has a launch waiting). Returns how many were answered (0 on a failure), so
    the template can go on later from where it stopped: quickening counts across runs."""
    threads = threading.active_count()
    try:
        with tempfile.TemporaryDirectory(prefix="goondan-rehearsal-") as tmp:
            answered = uvloop.run(_rehearse(Path(tmp), first, turns, should_stop))
    except Exception as exc:  # noqa: BLE001 - never stop the template over a head start
        print(f"goondan template: rehearsal failed: {exc!r}", file=sys.stderr)
        return 0
    if threading.active_count() > threads:  # a fork with threads alive would be unsafe
        raise RuntimeError("the rehearsal left a thread running")
    return answered


async def _rehearse(
    tmp: Path, first: int, turns: int, should_stop: Callable[[], bool] | None
) -> int:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    endpoint = f"ipc://{tmp / 'r.sock'}"
    router = bind_router(ctx, endpoint)
    spec = ModelSpec(provider="scripted", model=AGENT, options=SCRIPT)
    definition = AgentDefinition(
        name=AGENT,
        provider=make_provider(spec, None),
        registry=ToolRegistry([_echo_tool()]),
        system_prompt="Rehearse.",
        params={},
        max_steps=4,
    )
    process = AgentProcess(
        definition,
        swarm=AGENT,
        catalog={},
        paths=StatePaths.at(tmp / "state"),
        endpoint=endpoint,
    )
    running = asyncio.get_running_loop().create_task(process.run())
    try:
        return await _drive(router, first, turns, should_stop)
    finally:
        if not running.done():
            running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        process.channel.close()
        router.close(linger=0)
        ctx.term()


async def _drive(
    router: zmq.Socket[bytes], first: int, turns: int, should_stop: Callable[[], bool] | None
) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    if not await _receive(router, wire.READY, deadline):
        return 0
    source = wire.Source("orchestrator", "rehearsal")
    answered = 0
    for turn in range(first, turns):
        if answered and should_stop is not None and should_stop():
            break
        text = "tool ping" if turn % 2 else "ping"
        request = wire.Delegate(text, f"r{min(turn, CONVERSATIONS - 1)}", source)
        frame = wire.encode(
            wire.DELEGATE, wire.ORCHESTRATOR, AGENT, request, correlation_id=f"c{turn}"
        )
        router.send_multipart([AGENT.encode(), frame])
        if not await _receive(router, wire.DELEGATE_RESULT, deadline):
            break
        answered += 1
    stop = wire.encode(wire.SHUTDOWN, wire.ORCHESTRATOR, AGENT, wire.Shutdown("rehearsal", 1000))
    router.send_multipart([AGENT.encode(), stop])
    await _receive(router, wire.SHUTDOWN_ACK, deadline)
    return answered


def _echo_tool() -> ToolEntry:
    async def echo(ctx: ToolContext, args: dict[str, str]) -> dict[str, str]:
        return {"text": args["text"]}  # async: a sync tool would start a worker thread

    schema = {
        "type": "object",
        "additionalProperties": False,
        "required": ["text"],
        "properties": {"text": {"type": "string"}},
    }
    return make_entry(TOOL, "Echoes its text.", schema, echo)


async def _receive(router: zmq.Socket[bytes], kind: str, deadline: float) -> bool:
    """Wait for a frame of `kind` from the agent (others, like heartbeats, are skipped)."""
    while time.monotonic() < deadline:
        try:
            _, frame = router.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            await asyncio.sleep(0.0005)
            continue
        if wire.decode(frame).type == kind:
            return True
    return False
