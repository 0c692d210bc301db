"""An agent's heartbeat: sent while it is idle, left out while its answers show it alive (the
orchestrator takes any frame as a sign of life)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zmq

from agentproc import process as agent_process
from agentproc.process import AgentProcess
from agentproc.providers import make_provider
from agentproc.tool_registry import ToolRegistry
from agentproc.turn import AgentDefinition
from goondan.bundle.model import ModelSpec
from goondan.paths import StatePaths
from ipc import messages as wire
from ipc.endpoints import bind_router, connect_dealer

INTERVAL_S = 0.3


class Peer:
    """The orchestrator's side of one agent: a real ROUTER, counting what the agent sends."""

    def __init__(self, router: zmq.Socket[bytes]) -> None:
        self.router = router
        self.received: list[str] = []

    async def take(self, kind: str, timeout_s: float = 5.0) -> None:
        if not await self.listen(timeout_s, until=kind):
            raise AssertionError(f"no {kind} from the agent within {timeout_s}s")

    async def listen(self, seconds: float, until: str | None = None) -> bool:
        """Record what arrives for `seconds`; True as soon as a frame of type `until` does."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                _, frame = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                await asyncio.sleep(0.002)
                continue
            self.received.append(wire.decode(frame).type)
            if self.received[-1] == until:
                return True
        return False

    async def ask(self, n: int) -> None:
        request = wire.Delegate("ping", "k", wire.Source("agent", "peer"))
        frame = wire.encode(wire.DELEGATE, "peer", "a", request, correlation_id=f"c{n}")
        self.router.send_multipart([b"a", frame])
        await self.take(wire.DELEGATE_RESULT)


@pytest.fixture
async def peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Peer]:
    monkeypatch.setattr(agent_process, "HEARTBEAT_INTERVAL_S", INTERVAL_S)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    endpoint = f"ipc://{tmp_path / 'o.sock'}"
    router = bind_router(ctx, endpoint)
    spec = ModelSpec(provider="scripted", model="m", options={"default": "pong"})
    definition = AgentDefinition(
        name="a",
        provider=make_provider(spec, None),
        registry=ToolRegistry([]),
        system_prompt=None,
        params={},
        max_steps=2,
    )
    agent = AgentProcess(
        definition,
        swarm="s",
        catalog={},
        paths=StatePaths.at(tmp_path / "state"),
        sock=connect_dealer(ctx, endpoint, "a"),
    )
    running = asyncio.get_running_loop().create_task(agent.run())
    peer = Peer(router)
    try:
        await peer.take(wire.READY)
        yield peer
    finally:
        agent.request_stop()
        await asyncio.wait_for(running, 10)
        router.close(linger=0)
        ctx.term()


async def test_an_idle_agent_sends_heartbeats(peer: Peer) -> None:
    await peer.listen(INTERVAL_S * 4.5)
    assert peer.received.count(wire.HEARTBEAT) >= 3


async def test_an_agent_that_answers_sends_no_heartbeat_meanwhile(peer: Peer) -> None:
    started = time.monotonic()
    n = 0
    while time.monotonic() - started < INTERVAL_S * 4.5:  # 4 heartbeats if it were idle
        await peer.ask(n)
        n += 1
        await asyncio.sleep(INTERVAL_S / 6)
    assert peer.received.count(wire.DELEGATE_RESULT) == n
    # A stall of the test's own loop (a loaded machine) may let one through, not more.
    assert peer.received.count(wire.HEARTBEAT) <= 1
