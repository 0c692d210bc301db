"""An agent keeps a bounded number of conversations loaded: a burst of new conversations, faster
than they go quiet, must not run the process out of file descriptors (each loaded conversation
holds its event log and runtime-event log open)."""

from __future__ import annotations

import asyncio
import os
import resource
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zmq

from agentproc.conversation import read_messages
from agentproc.process import AgentProcess
from agentproc.providers import make_provider
from agentproc.tool_registry import ToolRegistry
from agentproc.turn import AgentDefinition
from goondan.bundle.model import ModelSpec
from goondan.paths import StatePaths
from ipc import messages as wire
from ipc.endpoints import bind_router, connect_dealer

LOADED = 8
CONVERSATIONS = 120


class Orchestrator:
    """The orchestrator's side of one agent: a real ROUTER."""

    def __init__(self, router: zmq.Socket[bytes]) -> None:
        self.router = router
        self.asked = 0

    async def take(self, kind: str, timeout_s: float = 10.0) -> wire.Envelope:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                _, frame = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                await asyncio.sleep(0.001)
                continue
            env = wire.decode(frame)
            if env.type == kind:
                return env
        raise AssertionError(f"no {kind} from the agent within {timeout_s}s")

    async def ask(self, key: str) -> wire.DelegateResult:
        request = wire.Delegate(f"hello {key}", key, wire.Source("agent", "peer"))
        self.asked += 1  # a new request each time: a repeated id is a redelivery
        frame = wire.encode(wire.DELEGATE, "peer", "a", request, correlation_id=f"c{self.asked}")
        self.router.send_multipart([b"a", frame])
        env = await self.take(wire.DELEGATE_RESULT)
        return wire.decode_payload(env, wire.DelegateResult)


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[tuple[AgentProcess, Orchestrator]]:
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    endpoint = f"ipc://{tmp_path / 'o.sock'}"
    router = bind_router(ctx, endpoint)
    spec = ModelSpec(provider="scripted", model="m", options={"default": "You said: {{input}}"})
    definition = AgentDefinition(
        name="a",
        provider=make_provider(spec, None),
        registry=ToolRegistry([]),
        system_prompt=None,
        params={},
        max_steps=2,
    )
    process = AgentProcess(
        definition,
        swarm="s",
        catalog={},
        paths=StatePaths.at(tmp_path / "state"),
        sock=connect_dealer(ctx, endpoint, "a"),
        max_loaded_instances=LOADED,
    )
    running = asyncio.get_running_loop().create_task(process.run())
    orchestrator = Orchestrator(router)
    try:
        await orchestrator.take(wire.READY)
        yield process, orchestrator
    finally:
        process.request_stop()
        await asyncio.wait_for(running, 10)
        router.close(linger=0)
        ctx.term()


async def test_a_burst_of_new_conversations_stays_within_the_open_files_limit(
    agent: tuple[AgentProcess, Orchestrator], tmp_path: Path
) -> None:
    _, orchestrator = agent
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd"))
    # Room for the bounded conversations (two files each) and some slack, far less than
    # CONVERSATIONS would need if every one stayed open until it went quiet (seconds).
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + 4 * LOADED + 16, hard))
    try:
        answers = [await orchestrator.ask(f"k{i}") for i in range(CONVERSATIONS)]
        opened = len(os.listdir("/proc/self/fd")) - in_use
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert [a.status for a in answers] == ["ok"] * CONVERSATIONS
    assert answers[-1].response == f"You said: hello k{CONVERSATIONS - 1}"
    assert opened <= 2 * LOADED + 8
    # Unloaded, not lost: every conversation is on disk, and a later turn picks it up.
    paths = StatePaths.at(tmp_path / "state")
    for key in ("k0", f"k{CONVERSATIONS // 2}"):
        stored = read_messages(paths.conversation_dir("s", key, "a"))
        assert [m.role for m in stored] == ["user", "assistant"]
    again = await orchestrator.ask("k0")
    assert again.status == "ok"
    stored = read_messages(paths.conversation_dir("s", "k0", "a"))
    assert [m.content for m in stored] == ["hello k0", "You said: hello k0"] * 2
