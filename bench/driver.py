"""The requester side of the round-trip, crash and scale figures: a sync DEALER in the bench
process. The same code drives the real orchestrator and the bare broker.

Against the product it connects to `agents.sock` under the name of a swarm agent that the
orchestrator never has to start (`driver`), presenting the operator's key (`run/peer.key`) so it
is admitted as an external agent: it says `ready` first, so the orchestrator treats it as a
running agent, and heartbeats while it waits, as an agent does.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import msgspec
import zmq

from bench import wire


@dataclass
class Reply:
    ok: bool
    code: str = ""  # the error code when not ok
    latency_s: float = 0.0


@dataclass
class WaveResult:
    latencies_s: list[float] = field(default_factory=list)  # of the ok answers
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    lost: int = 0  # never answered within the timeout
    wrong: list[str] = field(default_factory=list)  # the first few answers that were not right


class ResultBody(msgspec.Struct, rename="camel"):
    """What the bench checks of a `delegate_result` payload's content."""

    status: str = ""
    target: str = ""
    response: str | None = None
    instance_key: str | None = None


# An answer's expected content: (the agent that answers, or None for any; its text; the
# conversation, or None for any).
Expect = tuple[str | None, str, str | None]
WRONG_ANSWER = "WRONG_ANSWER"  # answered `ok`, but not with what the request asked for
_body_decoder = msgspec.msgpack.Decoder(ResultBody)


def _mismatch(payload: msgspec.Raw, expect: Expect) -> str:
    """'' when the answer says what `expect` says, else what differs."""
    try:
        body = _body_decoder.decode(payload)
    except msgspec.DecodeError as exc:
        return f"undecodable result: {exc}"
    target, text, key = expect
    if body.response != text:
        return f"response {body.response!r}, expected {text!r}"
    if target is not None and body.target != target:
        return f"target {body.target!r}, expected {target!r}"
    if key is not None and body.instance_key != key:
        return f"instance key {body.instance_key!r}, expected {key!r}"
    return ""


WAIT_S = 0.25  # the longest a receive blocks before the driver heartbeats and looks at the time


@contextlib.contextmanager
def _no_gc_pause() -> Iterator[None]:
    """timeit's rule: a collection in the bench process while it waits for answers would be
    timed as the product's latency (a full one here takes ~8 ms)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Driver:
    def __init__(
        self,
        endpoint: str,
        identity: str,
        *,
        hello: bytes | None = None,
        heartbeat: bytes | None = None,
        metadata: bytes | None = None,
    ) -> None:
        """`metadata`: a ZMTP READY property, `Name:value` (the product's admission key)."""
        self.identity = identity
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, identity.encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 200_000)
        self.sock.setsockopt(zmq.RCVHWM, 200_000)
        self.sock.setsockopt(zmq.RCVTIMEO, int(WAIT_S * 1000))
        if metadata is not None:
            self.sock.setsockopt(zmq.METADATA, metadata)
        self.sock.connect(endpoint)
        self._heartbeat = heartbeat
        self._last_beat = time.monotonic()
        self._ids = itertools.count(1)
        if hello is not None:
            self.sock.send(hello)

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()

    def __enter__(self) -> Driver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def beat(self) -> None:
        if self._heartbeat is not None and time.monotonic() - self._last_beat > 0.5:
            self.sock.send(self._heartbeat)
            self._last_beat = time.monotonic()

    def _recv(self, timeout_s: float) -> wire.Env | None:
        """The next delegate_result, or None after `timeout_s` (other frames are skipped).

        A blocking receive, which wakes once per frame: the driver's CPU is taken from the
        system it measures, and a poll plus a failed non-blocking try per answer cost it twice
        what the answer does (the scale figure's 200 answers a wave)."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining < WAIT_S:  # the last stretch: wait no longer than it
                if remaining <= 0 or not self.sock.poll(int(remaining * 1000) + 1):
                    return None
            try:
                frame = self.sock.recv()
            except zmq.Again:  # WAIT_S without a frame
                self.beat()
                continue
            env = wire.env_decoder.decode(frame)
            if env.type == "delegate_result":
                return env

    def ask(self, target: str, payload: bytes, timeout_s: float = 30.0) -> Reply:
        """One request, waited for. Answers to earlier requests are skipped."""
        cid = str(next(self._ids))
        started = time.perf_counter()
        self.sock.send(wire.delegate(self.identity, target, payload, cid))
        deadline = time.monotonic() + timeout_s
        while True:
            env = self._recv(max(0.0, deadline - time.monotonic()))
            if env is None:
                return Reply(False, "LOST", time.perf_counter() - started)
            if env.correlation_id == cid:
                elapsed = time.perf_counter() - started
                head = wire.result_decoder.decode(env.payload)
                if head.status == "ok":
                    return Reply(True, "", elapsed)
                return Reply(False, head.error.code if head.error else "?", elapsed)

    @_no_gc_pause()
    def round_trips(
        self, target: str, payload_for: Callable[[int], bytes], n: int, warmup: int
    ) -> tuple[list[float], int]:
        """`warmup` + `n` sequential round trips, one in flight; (latencies in s, failures)."""
        latencies: list[float] = []
        failures = 0
        for i in range(warmup + n):
            reply = self.ask(target, payload_for(i))
            if not reply.ok:
                failures += 1
            elif i >= warmup:
                latencies.append(reply.latency_s)
            self.beat()
        return latencies, failures

    @_no_gc_pause()
    def wave(
        self,
        requests: list[tuple[str, bytes]],
        timeout_s: float,
        expected: Sequence[Expect] | None = None,
    ) -> WaveResult:
        """Send every request at once, then collect the answers until all came or time is up.

        With `expected` (one per request), an `ok` answer counts only if its content is the
        expected one; otherwise it is an error answer, `WRONG_ANSWER`. The check runs after
        the answer's time is taken."""
        sent: dict[str, tuple[float, int]] = {}
        for index, (target, payload) in enumerate(requests):
            cid = str(next(self._ids))
            sent[cid] = (time.perf_counter(), index)
            self.sock.send(wire.delegate(self.identity, target, payload, cid))
        result = WaveResult()
        deadline = time.monotonic() + timeout_s
        while sent:
            env = self._recv(max(0.0, deadline - time.monotonic()))
            if env is None:
                break
            request = sent.pop(env.correlation_id or "", None)
            if request is None:
                continue
            started, index = request
            elapsed = time.perf_counter() - started
            head = wire.result_decoder.decode(env.payload)
            wrong = "" if expected is None else _mismatch(env.payload, expected[index])
            if head.status == "ok" and wrong:
                result.errors[WRONG_ANSWER] = result.errors.get(WRONG_ANSWER, 0) + 1
                if len(result.wrong) < 5:
                    result.wrong.append(f"{requests[index][0]}: {wrong}")
            elif head.status == "ok":
                result.ok += 1
                result.latencies_s.append(elapsed)
            else:
                code = head.error.code if head.error else "?"
                result.errors[code] = result.errors.get(code, 0) + 1
        result.lost = len(sent)
        return result
