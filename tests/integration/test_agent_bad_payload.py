"""A real agent process (`python -m agentproc`) behind a libzmq ROUTER standing in for the
orchestrator: a request whose payload it cannot decode is answered at once with
`E_BAD_REQUEST` under the request's correlation id; an undecodable event is dropped; the agent
serves on."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import zmq
import zmq.asyncio

from ipc import wire
from tests.fakes.fake_orchestrator import BUNDLE_HEAD

AGENT = "assistant"
TIMEOUT_S = 20.0  # only a failure waits this long


class Orchestrator:
    def __init__(self, sock: zmq.asyncio.Socket, proc: subprocess.Popen[bytes], log: Path):
        self.sock = sock
        self.proc = proc
        self.log = log

    async def send(self, type_: str, payload: bytes, correlation_id: str | None) -> None:
        frame = wire.encode(
            type_, "peer", AGENT, msgspec.Raw(payload), correlation_id=correlation_id
        )
        await self.sock.send_multipart([AGENT.encode(), frame])

    async def take(self, kind: str) -> wire.Envelope:
        """The next frame of `kind` from the agent (heartbeats and others are skipped)."""
        while True:
            if not await self.sock.poll(int(TIMEOUT_S * 1000)):
                raise AssertionError(f"no {kind} from the agent:\n{self.log.read_text()}")
            _, frame = await self.sock.recv_multipart()
            env = wire.decode(frame)
            if env.type == kind:
                return env


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "goondan.yaml").write_text(BUNDLE_HEAD)
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    endpoint = f"ipc://{tmp_path}/o.sock"
    sock.bind(endpoint)
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "agentproc", "--agent", AGENT, "--swarm", "default"),
                *("--bundle", str(bundle), "--endpoint", endpoint),
                *("--state-root", str(tmp_path / "state"), "--parent-pid", str(os.getpid())),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    orchestrator = Orchestrator(sock, proc, log)
    try:
        await orchestrator.take(wire.READY)
        yield orchestrator
    finally:
        proc.kill()
        proc.wait()
        sock.close(linger=0)
        ctx.term()


def delegate(**fields: object) -> bytes:
    request = {"input": "hi", "instanceKey": "k", "source": {"kind": "cli", "name": "t"}}
    return msgspec.msgpack.encode({**request, **fields})


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (delegate(input=123), "Expected `str`, got `int` - at `$.input`"),
        (msgspec.msgpack.encode("not a map"), "Expected `object`, got `str`"),
        (delegate(source="cli"), "Expected `object`, got `str` - at `$.source`"),
    ],
    ids=["input-not-a-string", "payload-not-a-map", "source-not-a-map"],
)
async def test_an_undecodable_delegate_is_answered_at_once(
    agent: Orchestrator, payload: bytes, problem: str
) -> None:
    await agent.send(wire.DELEGATE, payload, "c-bad")
    env = await agent.take(wire.DELEGATE_RESULT)
    assert env.correlation_id == "c-bad"
    assert env.to == "peer"
    result = wire.decode_payload(env, wire.DelegateResult)
    assert result.status == "error"
    assert result.error is not None
    assert result.error.code == "E_BAD_REQUEST"
    assert f"agent '{AGENT}' could not decode the request" in result.error.message
    assert problem in result.error.message

    await agent.send(wire.DELEGATE, delegate(input="again"), "c-good")  # still serving
    env = await agent.take(wire.DELEGATE_RESULT)
    assert env.correlation_id == "c-good"
    assert wire.decode_payload(env, wire.DelegateResult).status == "ok"


async def test_an_undecodable_event_is_dropped_and_logged_once(agent: Orchestrator) -> None:
    for _ in range(50):
        await agent.send(wire.EVENT, delegate(instanceKey=7), None)
    await agent.send(wire.DELEGATE, delegate(), "c-after")
    env = await agent.take(wire.DELEGATE_RESULT)  # nothing answered the events
    assert env.correlation_id == "c-after"
    assert wire.decode_payload(env, wire.DelegateResult).status == "ok"
    log = agent.log.read_text()
    assert log.count("dropped event with an undecodable payload") == 1, log
    assert "Expected `str`, got `int` - at `$.instanceKey`" in log


def control(command: str, args: object) -> bytes:
    return msgspec.msgpack.encode({"command": command, "args": args})


@pytest.mark.parametrize(
    ("payload", "code", "problem"),
    [
        (control("instance.drop", {}), "E_BAD_REQUEST", "bad args for command 'instance.drop'"),
        (control("instance.drop", {"instanceKey": 5}), "E_BAD_REQUEST", "`$.instanceKey`"),
        (control("instance.drop", {"instanceKey": ""}), "E_BAD_REQUEST", "`$.instanceKey`"),
        (control("explode", {}), "E_UNKNOWN_COMMAND", "agents do not know 'explode'"),
    ],
    ids=["no-key", "key-not-a-string", "empty-key", "unknown-command"],
)
async def test_a_bad_control_command_is_answered_with_an_error(
    agent: Orchestrator, payload: bytes, code: str, problem: str
) -> None:
    await agent.send(wire.CONTROL, payload, "call-1")
    env = await agent.take(wire.CONTROL_REPLY)
    assert env.correlation_id == "call-1"
    reply = wire.decode_payload(env, wire.ControlReply)
    assert not reply.ok and reply.error is not None
    assert reply.error.code == code and problem in reply.error.message

    drop = msgspec.msgpack.encode(wire.control("instance.drop", wire.InstanceDropArgs("k")))
    await agent.send(wire.CONTROL, drop, "call-2")  # a good one is still served
    env = await agent.take(wire.CONTROL_REPLY)
    assert env.correlation_id == "call-2"
    assert wire.decode_payload(env, wire.ControlReply) == wire.ControlReply(
        True, {"dropped": False}
    )


async def test_frames_of_unknown_type_are_dropped_and_logged_once(agent: Orchestrator) -> None:
    for _ in range(50):
        await agent.send("no_such_type", msgspec.msgpack.encode({}), None)
    await agent.send(wire.DELEGATE, delegate(), "c-after")
    env = await agent.take(wire.DELEGATE_RESULT)
    assert env.correlation_id == "c-after"
    log = agent.log.read_text()
    assert log.count("dropped frame of unknown type") == 1, log
    assert "no_such_type from peer" in log
