"""Starting the raw baselines: the bare broker and agents (`bench/bare.py`), bare `python -c
"import zmq"` processes and plain `os.fork` children (`bench/forker.py`) that say hello."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import msgspec
import zmq

from bench.driver import Driver
from bench.procs import PYTHON, Procs, short_tmpdir

HELLO_PROGRAM = (
    "import os, sys, zmq\n"
    "ctx = zmq.Context()\n"
    "s = ctx.socket(zmq.DEALER)\n"
    "s.connect(sys.argv[1])\n"
    "s.send(str(os.getpid()).encode())\n"
    "sys.stdin.read()  # idle until the bench closes our stdin (or dies)\n"
)


def read_line(proc: subprocess.Popen[Any], timeout_s: float) -> str:
    """One line of a helper's stdout, or '' after `timeout_s`."""
    assert proc.stdout is not None
    poller = select.poll()  # not select.select: a figure's pipes go past fd 1024
    poller.register(proc.stdout.fileno(), select.POLLIN)
    if not poller.poll(timeout_s * 1000):
        return ""
    return str(proc.stdout.readline().decode(errors="replace").strip())


def start_broker(procs: Procs, endpoint: str) -> subprocess.Popen[Any]:
    proc = procs.spawn(
        [PYTHON, "-m", "bench.bare", "broker", endpoint],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    if read_line(proc, 20) != "up":
        raise RuntimeError("the bare broker did not start")
    return proc


def start_agents(
    procs: Procs, endpoint: str, names: list[str], result: bytes, *extra: str
) -> list[subprocess.Popen[Any]]:
    """Bare agents, all started at once; returns once every one said `up`."""
    agents = [
        procs.spawn(
            [PYTHON, "-m", "bench.bare", "agent", endpoint, name, "--result", result.hex(), *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for name in names
    ]
    for proc in agents:
        if read_line(proc, 120) != "up":
            raise RuntimeError("a bare agent did not start")
    return agents


def wait_routable(drv: Driver, names: list[str], payload: bytes, timeout_s: float = 30.0) -> None:
    """Ask each agent until it answers `ok`: an agent that printed `up` may not be connected
    yet, and a ROUTER_MANDATORY broker refuses a message for it until it is."""
    deadline = time.monotonic() + timeout_s
    for name in names:
        seen: dict[str, int] = {}
        while True:
            remaining = deadline - time.monotonic()
            reply = drv.ask(name, payload, timeout_s=max(0.1, min(5.0, remaining)))
            if reply.ok:
                break
            seen[reply.code] = seen.get(reply.code, 0) + 1
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not answer `ok` through {drv.identity}: {seen}")
            time.sleep(0.01)


def tell(proc: subprocess.Popen[Any], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line.encode() + b"\n")
    proc.stdin.flush()


class HelloSink:
    """A ROUTER in the bench process where bare processes say hello (their pid)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()

    def collect(self, count: int, timeout_s: float) -> list[tuple[float, bytes]]:
        """(time.monotonic() on arrival, hello body) for `count` hellos."""
        got: list[tuple[float, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while len(got) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self.sock.poll(int(remaining * 1000) + 1):
                break
            frames = self.sock.recv_multipart()
            got.append((time.monotonic(), frames[-1]))
        return got


class SubprocessSpawner:
    """`python -c "import zmq; connect; hello"`: the bare subprocess baseline."""

    def __init__(self, procs: Procs, sink: HelloSink) -> None:
        self.procs = procs
        self.sink = sink
        self.alive: list[subprocess.Popen[Any]] = []

    def spawn(self, count: int, timeout_s: float = 60.0) -> tuple[float, list[float], list[int]]:
        """Start `count` at once; (t0, seconds until each hello in arrival order, pids)."""
        t0 = time.monotonic()
        for _ in range(count):
            self.alive.append(
                self.procs.spawn(
                    [PYTHON, "-c", HELLO_PROGRAM, self.sink.endpoint],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                )
            )
        hellos = self.sink.collect(count, timeout_s)
        return t0, [t - t0 for t, _ in hellos], [int(body) for _, body in hellos]

    def close(self) -> None:
        for proc in self.alive:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self.alive:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.alive.clear()


class Forker:
    """A helper (`bench/forker.py`) that imported the agent runtime once and `os.fork`s
    children on request; each child connects a DEALER and says hello, then idles."""

    def __init__(self, procs: Procs, sink: HelloSink) -> None:
        self.sink = sink
        self.proc = procs.spawn(
            [PYTHON, "-m", "bench.forker", sink.endpoint],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        line = read_line(self.proc, 30)
        if not line.startswith("up"):
            raise RuntimeError("the forker did not start")
        self.preloaded = line.removeprefix("up").strip()

    def spawn(self, count: int, timeout_s: float = 60.0) -> tuple[list[float], list[int]]:
        """(seconds from the fork call until each hello, pids); the clock is shared."""
        tell(self.proc, f"fork {count}")
        hellos = self.sink.collect(count, timeout_s)
        latencies, pids = [], []
        for arrived, body in hellos:
            hello = msgspec.msgpack.decode(body)
            latencies.append(arrived - hello["t0"])
            pids.append(int(hello["pid"]))
        return latencies, pids

    def kill_children(self, pids: list[int]) -> None:
        import signal

        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@contextlib.contextmanager
def hello_baselines() -> Iterator[tuple[Procs, HelloSink, SubprocessSpawner]]:
    """The plumbing of the process baselines: processes killed at the end, the sink their
    hellos reach, and the `python -c` spawner (a `Forker(procs, sink)` joins when needed)."""
    with short_tmpdir() as tmp, Procs() as procs:
        sink = HelloSink(f"ipc://{tmp / 'hello.sock'}")
        spawner = SubprocessSpawner(procs, sink)
        try:
            yield procs, sink, spawner
        finally:
            spawner.close()
            sink.close()
