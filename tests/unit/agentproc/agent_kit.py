"""A real AgentProcess in the test's event loop, behind a real ZeroMQ ROUTER standing in for the
orchestrator:

    async with running_agent(tmp_path) as orchestrator:
        answer = await orchestrator.ask("k1")        # a delegate to instance k1, its result
        await orchestrator.listen(1.0)               # record what else the agent sends
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import zmq

from agentproc.process import AgentProcess
from agentproc.providers import make_provider
from agentproc.tool_registry import ToolRegistry
from agentproc.turn import AgentDefinition
from goondan.bundle.model import ModelSpec
from goondan.paths import StatePaths
from ipc import wire
from ipc.endpoints import bind_router

AGENT = "a"
SWARM = "s"
OTHERS_EVENTS = b'{"op":"append","message":{"id":"1","role":"user","content":"theirs"}}\n'


def key_another_agent_uses(paths: StatePaths, key: str) -> Path:
    """The directory of instance key `key`, made with another agent's conversation in it
    (`other+events.jsonl`, holding OTHERS_EVENTS)."""
    key_dir = paths.instance_dir(SWARM, key)
    key_dir.mkdir(parents=True)
    (key_dir / "other+events.jsonl").write_bytes(OTHERS_EVENTS)
    return key_dir


class Orchestrator:
    """The orchestrator's side of one agent: a real ROUTER, recording what the agent sends."""

    def __init__(self, router: zmq.Socket[bytes]) -> None:
        self.router = router
        self.received: list[str] = []  # frame types, in order
        self._asked = 0

    async def listen(self, seconds: float, until: str | None = None) -> wire.Envelope | None:
        """Record what arrives for `seconds`; the first frame of type `until` as soon as it
        does."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                _, frame = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                await asyncio.sleep(0.001)
                continue
            env = wire.decode(frame)
            self.received.append(env.type)
            if env.type == until:
                return env
        return None

    async def take(self, kind: str, timeout_s: float = 10.0) -> wire.Envelope:
        env = await self.listen(timeout_s, until=kind)
        if env is None:
            raise AssertionError(f"no {kind} from the agent within {timeout_s}s")
        return env

    async def ask(
        self, key: str = "k", text: str = "ping", request_id: str | None = None
    ) -> wire.DelegateResult:
        """A request, under a new id each time unless `request_id` names one (a redelivery)."""
        self._asked += 1
        cid = request_id or f"c{self._asked}"
        request = wire.Delegate(text, key, wire.Source("agent", "peer"))
        frame = wire.encode(wire.DELEGATE, "peer", AGENT, request, correlation_id=cid)
        self.router.send_multipart([AGENT.encode(), frame])
        env = await self.take(wire.DELEGATE_RESULT)
        return wire.decode_payload(env, wire.DelegateResult)


@asynccontextmanager
async def running_agent(
    tmp_path: Path, reply: str = "pong", **options: Any
) -> AsyncIterator[Orchestrator]:
    """Agent `a` of swarm `s` (state under `tmp_path / "state"`), answering every input with
    the scripted `reply` (placeholders allowed), until the block ends. `options` go to
    AgentProcess."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    endpoint = f"ipc://{tmp_path / 'o.sock'}"
    router = bind_router(ctx, endpoint)
    spec = ModelSpec(provider="scripted", model="m", options={"default": reply})
    definition = AgentDefinition(
        name=AGENT,
        provider=make_provider(spec, None),
        registry=ToolRegistry([]),
        system_prompt=None,
        params={},
        max_steps=2,
    )
    agent = AgentProcess(
        definition,
        swarm=SWARM,
        catalog={},
        paths=StatePaths.at(tmp_path / "state"),
        endpoint=endpoint,
        **options,
    )
    running = asyncio.get_running_loop().create_task(agent.run())
    orchestrator = Orchestrator(router)
    try:
        await orchestrator.take(wire.READY)
        yield orchestrator
    finally:
        agent.request_stop()
        await asyncio.wait_for(running, 10)
        router.close(linger=0)
        ctx.term()
