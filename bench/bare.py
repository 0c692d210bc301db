"""The raw baselines: a bare pyzmq ROUTER broker and bare DEALER agents.

    python -m bench.bare broker ENDPOINT
    python -m bench.bare agent ENDPOINT NAME --result HEX [--product]
                               [--targets a,b --window W --delegate HEX --warmup S --duration S]
    python -m bench.bare swarm ENDPOINT PREFIX COUNT --result HEX [--product]

Both do the least that the same job needs, in the pattern `reference/ipc-limits.md` measured as
the floor: uvloop, the ZeroMQ socket's fd watched with `loop.add_reader`, every waiting message
drained without blocking, `ZMQ_EVENTS` re-checked after sends (the fd is edge-triggered), only
the envelope header decoded, correlation ids from a counter.

The broker forwards a `delegate` to `to` under its own id and maps the `delegate_result` back
to the requester: the same four hops as the orchestrator, with nothing else (no timers, no
supervision, no inbox). An agent answers every `delegate` at once with a fixed result payload;
with `--targets` it is also a requester keeping `--window` delegates in flight, round robin.
With `--forward B` it is a coordinator instead: each delegate it gets is passed on to B (with
the `--delegate` payload) and answered once B's result is back, so a request takes 8 hops.

The agent talks to its parent over stdin/stdout, one line each: it prints `up` once connected;
`go` starts its requests; it prints `drained` once its measuring window is over and nothing of
its own is in flight; `stop` (or EOF) makes it print `stats {json}` and exit.

With `--product` an agent connects to the real orchestrator instead: it says the product's
`ready` first and heartbeats as a product agent does (each second, when it sent nothing else),
so the same bare agents measure the orchestrator's routing.

`swarm` is COUNT bare agents named PREFIX0, PREFIX1, ... forked from one bare template: the
template imports what an agent needs (uvloop, zmq, msgspec) and forks the agents, which run the
same `agent` code as above, their stdout discarded. It prints `up` once every agent is forked
(connecting is theirs: the bench asks each until it answers) and exits at EOF on its stdin;
the agents die with it. The 1,000-agent figure runs it beside its baseline (1,000 bare agents,
each its own interpreter, as every other figure starts them): forked agents share the
template's pages, and in the caches too, so they answer for about half the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import itertools
import json
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable

import msgspec
import zmq

from bench.wire import Env, encoder, env_decoder, result_decoder

HWM = 200_000
HEARTBEAT_S = 5.0  # the product agents' tick: `Settings.heartbeat_interval_s()` by default


def die_with_parent() -> None:
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class FdSocket:
    """One sync ZeroMQ socket driven from the loop through its fd (see the module doc)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: zmq.Socket[bytes],
        on_frames: Callable[[list[bytes]], None],
    ) -> None:
        self.loop = loop
        self.sock = sock
        self.on_frames = on_frames
        self.outbox: deque[list[bytes]] = deque()
        self.scheduled = False
        self.closed = False

    def start(self) -> None:
        self.loop.add_reader(self.sock.FD, self.drain)
        self.schedule()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.loop.remove_reader(self.sock.FD)
            self.sock.close(linger=0)

    def schedule(self) -> None:
        if not self.scheduled and not self.closed:
            self.scheduled = True
            self.loop.call_soon(self.drain)

    def send(self, frames: list[bytes]) -> None:
        if self.closed:
            return
        if self.outbox:
            self.outbox.append(frames)
        else:
            try:
                self.sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:
                self.outbox.append(frames)
        self.schedule()

    def drain(self) -> None:
        self.scheduled = False
        if self.closed:
            return
        sock = self.sock
        while True:
            events = int(sock.getsockopt(zmq.EVENTS))
            progressed = False
            if self.outbox and events & zmq.POLLOUT:
                while self.outbox:
                    try:
                        sock.send_multipart(self.outbox[0], zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    except zmq.ZMQError:
                        pass  # unroutable: dropped, as the product does
                    self.outbox.popleft()
                    progressed = True
            if events & zmq.POLLIN:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    frames = None
                if frames is not None:
                    self.on_frames(frames)
                    progressed = True
            if not progressed:
                break
        if self.outbox and not self.closed:
            self.loop.call_later(0.001, self.schedule)


def _options(sock: zmq.Socket[bytes]) -> None:
    sock.setsockopt(zmq.LINGER, 100)
    sock.setsockopt(zmq.SNDHWM, HWM)
    sock.setsockopt(zmq.RCVHWM, HWM)


# -- broker ------------------------------------------------------------------------------------


async def broker(endpoint: str) -> None:
    loop = asyncio.get_running_loop()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
    _options(sock)
    sock.bind(endpoint)
    ids = itertools.count(1)
    pending: dict[str, tuple[bytes, str | None]] = {}
    replace = msgspec.structs.replace
    encode = encoder.encode
    decode = env_decoder.decode
    unroutable = 0

    def on_frames(frames: list[bytes]) -> None:
        nonlocal unroutable
        identity, frame = frames
        env = decode(frame)
        if env.type == "delegate":
            oid = str(next(ids))
            pending[oid] = (identity, env.correlation_id)
            try:
                channel.send([env.to.encode(), encode(replace(env, correlation_id=oid))])
            except zmq.ZMQError:
                unroutable += 1
                del pending[oid]
                error = encode({"status": "error", "error": {"code": "UNROUTABLE"}})
                answer = Env(
                    "delegate_result", "broker", "", msgspec.Raw(error), env.correlation_id
                )
                channel.send([identity, encode(answer)])
        elif env.type == "delegate_result":
            requester = pending.pop(env.correlation_id or "", None)
            if requester is not None:
                identity, cid = requester
                answer = replace(env, to=identity.decode(), correlation_id=cid)
                channel.send([identity, encode(answer)])
        # ready / heartbeat / anything else: nothing to route

    channel = FdSocket(loop, sock, on_frames)
    channel.start()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_reader(0, lambda: stop.set() if not os.read(0, 4096) else None)
    print("up", flush=True)
    await stop.wait()
    channel.close()
    ctx.term()


# -- agent -------------------------------------------------------------------------------------


ChannelType = Callable[
    [asyncio.AbstractEventLoop, "zmq.Socket[bytes]", Callable[[list[bytes]], None]], FdSocket
]


async def agent(args: argparse.Namespace, make_channel: ChannelType = FdSocket) -> None:
    """`make_channel`: the socket's driver (`bench.agent_misses` passes one that empties the
    caches before each message)."""
    loop = asyncio.get_running_loop()
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, args.name.encode())
    _options(sock)
    if args.product:  # the real orchestrator admits the bench's agents with its operator key
        from bench.product import peer_key_metadata

        sock.setsockopt(zmq.METADATA, peer_key_metadata(args.endpoint))
    sock.connect(args.endpoint)
    name = args.name
    result_payload = msgspec.Raw(bytes.fromhex(args.result))
    delegate_payload = msgspec.Raw(bytes.fromhex(args.delegate)) if args.delegate else None
    targets = [t for t in (args.targets or "").split(",") if t]
    encode = encoder.encode
    decode = env_decoder.decode
    stats = {"answered": 0, "completed": 0, "inWindow": 0, "errors": 0, "sent": 0}
    state = {"outstanding": 0, "window_start": 0.0, "window_end": 0.0, "drained": False}
    rr = itertools.cycle(targets) if targets else None
    ids = itertools.count(1)
    stop = asyncio.Event()
    forward_to = args.forward
    if forward_to and delegate_payload is None:
        raise SystemExit("--forward needs --delegate")
    forward_payload = delegate_payload if delegate_payload is not None else result_payload
    forwarded: dict[str, tuple[str, str | None, str | None]] = {}  # our id -> the requester

    def send_next() -> None:
        assert rr is not None and delegate_payload is not None
        env = Env("delegate", name, next(rr), delegate_payload, str(next(ids)))
        channel.send([encode(env)])
        state["outstanding"] += 1
        stats["sent"] += 1

    def on_frames(frames: list[bytes]) -> None:
        env = decode(frames[-1])
        if env.type == "delegate" and forward_to:
            oid = str(next(ids))
            forwarded[oid] = (env.from_, env.correlation_id, env.trace_id)
            channel.send([encode(Env("delegate", name, forward_to, forward_payload, oid))])
        elif env.type == "delegate_result" and env.correlation_id in forwarded:
            requester, cid, trace = forwarded.pop(env.correlation_id)
            answer = Env("delegate_result", name, requester, result_payload, cid, trace_id=trace)
            channel.send([encode(answer)])
            stats["answered"] += 1
        elif env.type == "delegate":
            answer = Env(
                "delegate_result",
                name,
                env.from_,
                result_payload,
                env.correlation_id,
                trace_id=env.trace_id,
            )
            channel.send([encode(answer)])
            stats["answered"] += 1
        elif env.type == "delegate_result":
            state["outstanding"] -= 1
            stats["completed"] += 1
            if result_decoder.decode(env.payload).status != "ok":
                stats["errors"] += 1
            now = time.monotonic()
            if now < state["window_end"]:
                if now >= state["window_start"]:
                    stats["inWindow"] += 1
                send_next()
            elif state["outstanding"] == 0 and not state["drained"]:
                state["drained"] = True
                print("drained", flush=True)

    def on_stdin() -> None:
        data = os.read(0, 4096)
        if not data or b"stop" in data:
            stop.set()
            return
        if b"go" in data and rr is not None:
            now = time.monotonic()
            state["window_start"] = now + args.warmup
            state["window_end"] = now + args.warmup + args.duration
            for _ in range(args.window):
                send_next()

    channel = make_channel(loop, sock, on_frames)
    channel.start()
    if args.product:
        # The product's own frames (its codec), made here so `ready` carries this pid.
        from bench.product import heartbeat_frame, ready_frame

        beat = heartbeat_frame(name)
        sent_before = [-1]  # frames sent up to the last tick

        def heartbeat() -> None:
            # As a product agent does: a heartbeat only when nothing else was sent since the
            # last tick (any frame says the agent is alive), so 1,000 idle agents do not wake
            # the orchestrator 1,000 times a second for nothing.
            sent = stats["answered"] + stats["sent"]
            if sent == sent_before[0]:
                channel.send([beat])
            sent_before[0] = sent
            loop.call_later(HEARTBEAT_S, heartbeat)

        channel.send([ready_frame(name)])
        heartbeat()
    loop.add_reader(0, on_stdin)
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("up", flush=True)
    await stop.wait()
    print("stats " + json.dumps(stats), flush=True)
    loop.remove_reader(0)
    channel.close()
    ctx.term()


def swarm(args: argparse.Namespace) -> None:
    """Fork `args.count` agents (see the module doc); returns at EOF on stdin."""
    import uvloop

    if args.product:  # what `agent` imports for the product's frames, imported once here
        import bench.product  # noqa: F401
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps them
    hold_read, hold_write = os.pipe()  # the agents' stdin: EOF once this template is gone
    devnull = os.open(os.devnull, os.O_WRONLY)
    for i in range(args.count):
        if os.fork() == 0:
            try:
                die_with_parent()
                os.close(hold_write)
                os.dup2(hold_read, 0)
                os.dup2(devnull, 1)
                args.name = f"{args.prefix}{i}"
                uvloop.run(agent(args))
            finally:
                os._exit(0)
    os.close(hold_read)
    # Forked, not necessarily connected: the bench asks each agent until it answers.
    print("up", flush=True)
    sys.stdin.read()  # until the bench closes our stdin (or kills us): the agents die with us


def arguments_parser() -> argparse.ArgumentParser:
    """The command line of `python -m bench.bare` (its roles, their arguments and defaults)."""
    parser = argparse.ArgumentParser(prog="python -m bench.bare")
    sub = parser.add_subparsers(dest="role", required=True)
    p = sub.add_parser("broker")
    p.add_argument("endpoint")
    p = sub.add_parser("agent")
    p.add_argument("endpoint")
    p.add_argument("name")
    p.add_argument("--result", required=True, help="hex of the delegate_result payload")
    p.add_argument(
        "--product",
        action="store_true",
        help="talk to the real orchestrator: present its operator key (run/peer.key), say "
        "`ready` first, then heartbeat each second when it sent nothing else",
    )
    p.add_argument("--targets", help="comma-separated agents to send delegates to")
    p.add_argument("--delegate", help="hex of the delegate payload")
    p.add_argument("--forward", help="pass every delegate on to this agent, answer on its result")
    p.add_argument("--window", type=int, default=1)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--duration", type=float, default=3.0)
    p = sub.add_parser("swarm", help="COUNT agents PREFIX0.. forked from one template")
    p.add_argument("endpoint")
    p.add_argument("prefix")
    p.add_argument("count", type=int)
    p.add_argument("--result", required=True, help="hex of the delegate_result payload")
    p.add_argument("--product", action="store_true", help="as for `agent`")
    p.set_defaults(targets=None, delegate=None, forward=None, window=1, warmup=1.0, duration=3.0)
    return parser


def main() -> None:
    die_with_parent()
    args = arguments_parser().parse_args()
    import uvloop

    if args.role == "swarm":
        swarm(args)
    elif args.role == "broker":
        uvloop.run(broker(args.endpoint))
    else:
        uvloop.run(agent(args))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
