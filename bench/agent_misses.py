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

Counted, not timed: the same code gives the same counts to within ~1 % however busy the
machine is, so a change anywhere on the agent's path can be judged in one run where figure
14 needs many (docs/performance.md, figure 14, "Where an agent's CPU goes"). The driver runs
in this process, apart, so its own ZeroMQ work is not counted. Needs valgrind; takes about a
minute.
"""

from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import tempfile
from pathlib import Path

import uvloop
import zmq

from agentproc.process import AgentProcess
from bench.turn_cold import scripted_agent
from bench.turn_misses import FEW, MANY, count_per_unit, parse_arguments, print_counts
from goondan.paths import StatePaths
from ipc import wire

AGENT = "counted"
ANSWER = "pong"
PER_CONVERSATION = 10  # delegates, as figures 7 and 14 move to a new conversation
WAIT_MS = 300_000  # for one frame: under cachegrind an agent runs ~50x slower


class _EvictedAgent(AgentProcess):
    """The product's agent, its caches emptied before it reads each batch of frames (`other`:
    the memory written to, set once it is made)."""

    other: ctypes.Array[ctypes.c_char] | None = None
    evictions = 0

    def on_frames(self, frames: list[bytes]) -> None:
        if self.other is not None:
            self.evictions += 1
            ctypes.memset(self.other, self.evictions & 0xFF, len(self.other))
        super().on_frames(frames)


async def _serve(endpoint: str, state: Path, evict_mib: int) -> None:
    agent = _EvictedAgent(
        scripted_agent(AGENT, ANSWER),
        swarm="bench",
        catalog={},
        paths=StatePaths.at(state),
        endpoint=endpoint,
    )
    if evict_mib:
        agent.other = ctypes.create_string_buffer(evict_mib * 1024 * 1024)
    gc.collect()
    gc.freeze()  # as the template does before it forks an agent
    try:
        await agent.run()
    finally:
        agent.channel.close()


def _receive(
    router: zmq.Socket[bytes], run: subprocess.Popen[bytes], kind: str
) -> tuple[bytes, wire.Envelope]:
    """The next frame of `kind` from the agent, and its routing id (other frames, its
    heartbeats, are skipped). Raises once the agent has exited, or after WAIT_MS."""
    waited = 0
    while True:
        if not router.poll(1000):
            waited += 1000
            if run.poll() is not None:
                raise RuntimeError(f"the counted agent exited {run.returncode} before its {kind}")
            if waited >= WAIT_MS:
                raise TimeoutError(f"no {kind} from the counted agent in {WAIT_MS} ms")
            continue
        routing_id, frame = router.recv_multipart()
        envelope = wire.decode(frame)
        if envelope.type == kind:
            return routing_id, envelope


def drive(router: zmq.Socket[bytes], run: subprocess.Popen[bytes], delegates: int) -> None:
    """Send `delegates` one at a time, check every answer, then stop the agent."""
    agent, _ = _receive(router, run, wire.READY)
    source = wire.Source("orchestrator", "bench")
    for n in range(delegates):
        request = wire.Delegate("ping", f"k{n // PER_CONVERSATION}", source)
        sent = f"d{n}"
        frame = wire.encode(wire.DELEGATE, wire.ORCHESTRATOR, AGENT, request, correlation_id=sent)
        router.send_multipart([agent, frame])
        _, envelope = _receive(router, run, wire.DELEGATE_RESULT)
        result = wire.decode_payload(envelope, wire.DelegateResult)
        if envelope.correlation_id != sent or result.status != "ok" or result.response != ANSWER:
            raise AssertionError(f"delegate {n}: {envelope.correlation_id} answered {result}")
    stop = wire.Shutdown("bench done", 10_000)
    router.send_multipart([agent, wire.encode(wire.SHUTDOWN, wire.ORCHESTRATOR, AGENT, stop)])
    _receive(router, run, wire.SHUTDOWN_ACK)


def counted_agent(directory: Path, evict_mib: int) -> tuple[list[str], zmq.Socket[bytes]]:
    """The command of an agent to count, and the ROUTER it connects to (bound here)."""
    router: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.ROUTER)
    router.linger = 0
    endpoint = f"ipc://{directory / 'agents.sock'}"
    router.bind(endpoint)
    command = [sys.executable, "-m", "bench.agent_misses", "--evict", str(evict_mib)]
    return [*command, "--child", endpoint, str(directory / "state")], router


def main() -> None:
    args = parse_arguments(
        "python -m bench.agent_misses", __doc__, "delegate", nargs=2, metavar=("ENDPOINT", "STATE")
    )
    if args.child is not None:
        endpoint, state = args.child
        uvloop.run(_serve(endpoint, Path(state), args.evict))
        return
    shm = Path("/dev/shm")
    with (
        tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as few,
        tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as many,
    ):
        (few_command, few_router), (many_command, many_router) = (
            counted_agent(Path(few), args.evict),
            counted_agent(Path(many), args.evict),
        )
        try:
            counts = count_per_unit(
                (few_command, many_command),
                MANY - FEW,
                (
                    lambda run: drive(few_router, run, FEW),
                    lambda run: drive(many_router, run, MANY),
                ),
            )
        finally:
            few_router.close()
            many_router.close()
    print_counts("delegate", args.evict, counts)


if __name__ == "__main__":
    main()
