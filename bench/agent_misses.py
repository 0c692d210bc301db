"""A diagnostic, not a figure: an agent's cache misses per delegate, its whole path counted by
valgrind's cachegrind.

    .venv/bin/python -m bench.agent_misses [--evict MIB]

`bench.turn_misses` counts a turn alone. This counts everything an agent process does for a
delegate: the frame read from its socket and decoded, the job handed to its instance's
worker, the instance found or made, the turn with its conversation's write and runtime
events, the answer encoded and sent, and the upkeep after it. An `AgentProcess` (the scripted
model answering `pong`, a new conversation every tenth delegate, its state on /dev/shm) runs
under cachegrind and connects to a ROUTER in this process, which sends it delegates one at a
time, checks each answer and stops it; twice, 20 and 60 delegates, with `MIB` MiB written by
`memset` before the agent reads each frame (default 64, twice the simulated last-level cache,
as at 1,000 agents where 199 others ran between two of an agent's turns). Prints per delegate
the difference of the two runs, `memset`'s own misses left out (see `bench.turn_misses`).
Then the same for figure 14's baseline, `bench.bare`'s agent (it answers every delegate with
a fixed result), driven and emptied the same way, and the product's count as a multiple of
the bare agent's: the part of figure 14's CPU ratio that is the agents' own work.

Counted, not timed: the same code gives the same counts to within ~1 % however busy the
machine is, so a change anywhere on the agent's path can be judged in one run where figure
14 needs many (docs/performance.md, figure 14, "Where an agent's CPU goes"). The driver runs
in this process, apart, so its own ZeroMQ work is not counted. Needs valgrind; takes about
a minute.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import uvloop
import zmq

from agentproc.process import AgentProcess
from bench import bare
from bench.turn_cold import scripted_agent
from bench.turn_misses import (
    FEW,
    MANY,
    Driver,
    count_per_unit,
    last_level,
    parse_arguments,
    print_counts,
)
from bench.wire import Env, encoder, env_decoder
from goondan.paths import StatePaths
from ipc import wire

AGENT = "counted"
ANSWER = "pong"
PER_CONVERSATION = 10  # delegates, as figures 7 and 14 move to a new conversation
WAIT_MS = 300_000  # for one frame: under cachegrind an agent runs ~50x slower
PRODUCT, BARE = "product", "bare"  # the agents counted
# The bare agent's one answer to every delegate: the product's for the first conversation.
BARE_RESULT = bytes(
    wire.encode_payload(wire.DelegateResult("ok", AGENT, ANSWER, instance_key="k0"))
)


class _Evictor:
    """Empties the caches: writes all of `mib` MiB, twice the simulated last level by default
    (nothing for 0)."""

    def __init__(self, mib: int) -> None:
        self._other = ctypes.create_string_buffer(mib * 1024 * 1024) if mib else None
        self._count = 0

    def __call__(self) -> None:
        if self._other is not None:
            self._count += 1
            ctypes.memset(self._other, self._count & 0xFF, len(self._other))


class _EvictedAgent(AgentProcess):
    """The product's agent, its caches emptied before it reads each batch of frames (`evict`,
    set once it is made)."""

    evict: Callable[[], None] | None = None

    def on_frames(self, frames: list[bytes]) -> None:
        if self.evict is not None:
            self.evict()
        super().on_frames(frames)


async def _serve(endpoint: str, state: Path, evict_mib: int) -> None:
    agent = _EvictedAgent(
        scripted_agent(AGENT, ANSWER),
        swarm="bench",
        catalog={},
        paths=StatePaths.at(state),
        endpoint=endpoint,
    )
    agent.evict = _Evictor(evict_mib)
    gc.collect()
    gc.freeze()  # as the template does before it forks an agent
    try:
        await agent.run()
    finally:
        agent.channel.close()


def _serve_bare(endpoint: str, evict_mib: int) -> None:
    """`bench.bare`'s agent, its caches emptied before it handles each message. It stops at
    EOF on its stdin, so that is a pipe it holds itself; the driver stops it with SIGTERM."""
    evict = _Evictor(evict_mib)

    def evicted_channel(
        loop: asyncio.AbstractEventLoop,
        sock: zmq.Socket[bytes],
        on_frames: Callable[[list[bytes]], None],
    ) -> bare.FdSocket:
        def handle(frames: list[bytes]) -> None:
            evict()
            on_frames(frames)

        return bare.FdSocket(loop, sock, handle)

    never_eof, _ = os.pipe()  # the write end stays open in this process
    os.dup2(never_eof, 0)
    command = ["agent", endpoint, AGENT, "--result", BARE_RESULT.hex()]
    uvloop.run(bare.agent(bare.arguments_parser().parse_args(command), evicted_channel))


def _next_frame(
    router: zmq.Socket[bytes], run: subprocess.Popen[bytes], what: str
) -> tuple[bytes, bytes]:
    """The agent's next frame, and its routing id. Raises once the agent has exited, or after
    WAIT_MS."""
    waited = 0
    while not router.poll(1000):
        waited += 1000
        _give_up_if_gone(run, waited, what)
    routing_id, frame = router.recv_multipart()
    return routing_id, frame


def _give_up_if_gone(run: subprocess.Popen[bytes], waited_ms: int, what: str) -> None:
    """Raises if the agent exited, or once `waited_ms` for its `what` reached WAIT_MS."""
    if run.poll() is not None:
        raise RuntimeError(f"the counted agent exited {run.returncode} before its {what}")
    if waited_ms >= WAIT_MS:
        raise TimeoutError(f"no {what} from the counted agent in {WAIT_MS} ms")


def _receive(
    router: zmq.Socket[bytes], run: subprocess.Popen[bytes], kind: str
) -> tuple[bytes, wire.Envelope]:
    """The product agent's next frame of `kind`, and its routing id (other frames, its
    heartbeats, are skipped)."""
    while True:
        routing_id, frame = _next_frame(router, run, kind)
        envelope = wire.decode(frame)
        if envelope.type == kind:
            return routing_id, envelope


def _delegate(n: int) -> tuple[str, wire.Delegate]:
    """The `n`th delegate's correlation id and payload: a new conversation every tenth."""
    source = wire.Source("orchestrator", "bench")
    return f"d{n}", wire.Delegate("ping", f"k{n // PER_CONVERSATION}", source)


def drive(router: zmq.Socket[bytes], run: subprocess.Popen[bytes], delegates: int) -> None:
    """Send the product's agent `delegates` one at a time, check every answer, then stop it."""
    agent, _ = _receive(router, run, wire.READY)
    for n in range(delegates):
        sent, request = _delegate(n)
        frame = wire.encode(wire.DELEGATE, wire.ORCHESTRATOR, AGENT, request, correlation_id=sent)
        router.send_multipart([agent, frame])
        _, envelope = _receive(router, run, wire.DELEGATE_RESULT)
        result = wire.decode_payload(envelope, wire.DelegateResult)
        if envelope.correlation_id != sent or result.status != "ok" or result.response != ANSWER:
            raise AssertionError(f"delegate {n}: {envelope.correlation_id} answered {result}")
    stop = wire.Shutdown("bench done", 10_000)
    router.send_multipart([agent, wire.encode(wire.SHUTDOWN, wire.ORCHESTRATOR, AGENT, stop)])
    _receive(router, run, wire.SHUTDOWN_ACK)


def drive_bare(router: zmq.Socket[bytes], run: subprocess.Popen[bytes], delegates: int) -> None:
    """As `drive`, for the bare agent, in the bench's own envelope: it says nothing until
    asked, so the first delegate waits until it can be routed; SIGTERM stops it."""
    for n in range(delegates):
        sent, request = _delegate(n)
        payload = msgspec.Raw(wire.encode_payload(request))
        frame = encoder.encode(Env(wire.DELEGATE, wire.ORCHESTRATOR, AGENT, payload, sent))
        _send_when_routable(router, run, [AGENT.encode(), frame])
        _, frame = _next_frame(router, run, wire.DELEGATE_RESULT)
        envelope = env_decoder.decode(frame)
        if envelope.correlation_id != sent or bytes(envelope.payload) != BARE_RESULT:
            raise AssertionError(f"delegate {n}: {envelope.correlation_id} answered {envelope}")
    run.terminate()


def _send_when_routable(
    router: zmq.Socket[bytes], run: subprocess.Popen[bytes], frames: list[bytes]
) -> None:
    waited = 0
    while True:
        try:
            router.send_multipart(frames)
            return
        except zmq.ZMQError as exc:  # ROUTER_MANDATORY: not connected yet
            if exc.errno != zmq.EHOSTUNREACH:
                raise
        _give_up_if_gone(run, waited, "connection")
        time.sleep(0.1)
        waited += 100


def counted_agent(
    directory: Path, evict_mib: int, kind: str = PRODUCT
) -> tuple[list[str], zmq.Socket[bytes]]:
    """The command of an agent to count (`kind`: PRODUCT or BARE), and the ROUTER it connects
    to (bound here)."""
    router: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
    router.linger = 0
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    endpoint = f"ipc://{directory / 'agents.sock'}"
    router.bind(endpoint)
    command = [sys.executable, "-m", "bench.agent_misses", "--evict", str(evict_mib)]
    return [*command, "--child", kind, endpoint, str(directory / "state")], router


def _count(kind: str, evict_mib: int) -> dict[str, float]:
    """Per delegate, the counts of the agent of `kind`."""
    drive_agent = drive if kind == PRODUCT else drive_bare
    shm = Path("/dev/shm")
    with (
        tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as few,
        tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as many,
    ):
        (few_command, few_router), (many_command, many_router) = (
            counted_agent(Path(few), evict_mib, kind),
            counted_agent(Path(many), evict_mib, kind),
        )
        drivers: tuple[Driver, Driver] = (
            lambda run: drive_agent(few_router, run, FEW),
            lambda run: drive_agent(many_router, run, MANY),
        )
        try:
            return count_per_unit((few_command, many_command), MANY - FEW, drivers)
        finally:
            few_router.close()
            many_router.close()


def main() -> None:
    args = parse_arguments(
        "python -m bench.agent_misses",
        __doc__,
        "delegate",
        nargs=3,
        metavar=("KIND", "ENDPOINT", "STATE"),
    )
    if args.child is not None:
        kind, endpoint, state = args.child
        if kind == BARE:
            _serve_bare(endpoint, args.evict)
        else:
            uvloop.run(_serve(endpoint, Path(state), args.evict))
        return
    product = _count(PRODUCT, args.evict)
    print_counts("delegate", args.evict, product)
    baseline = _count(BARE, args.evict)
    print_counts("delegate, the bare agent (figure 14's baseline)", args.evict, baseline)
    ratio = last_level(product) / last_level(baseline)
    print(f"the product's agent: {ratio:.2f}x the bare agent's last-level misses")


if __name__ == "__main__":
    main()
