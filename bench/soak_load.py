"""The soak's clients: each sends `req <id>` requests to the entry agent one after another over
the control socket, framed as `goondan send` frames them but with the request id as the
correlation id and one socket kept per daemon incarnation, so a second answer to one request
is seen (a duplicate) instead of being lost with a closed socket.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path

import msgspec
import zmq

from bench.soak_bundle import expected_answer
from bench.soak_daemon import Generation
from ipc import wire
from ipc.endpoints import ipc_endpoint
from ipc.error_codes import ErrorCode

REFUSAL_CODES = frozenset({ErrorCode.E_STORAGE, ErrorCode.MESSAGE_TOO_LARGE})


class Request(msgspec.Struct):
    request_id: str
    client: int
    sent_at: float  # time.time()
    generation: int
    # "pending" -> "ok" | "forged" | "wrong" | "error" | "interrupted" | "no_answer"
    outcome: str = "pending"
    code: str = ""  # the error code of an "error" answer
    answers: int = 0
    answered_at: float = 0.0


class Clients:
    """`count` client threads sharing one list of requests."""

    def __init__(
        self,
        count: int,
        control_socket: Path,
        generation: Generation,
        timeout_s: float,
        think_s: float = 0.0,
    ) -> None:
        """`think_s`: each client's pause between an answer and its next request."""
        self.count = count
        self.endpoint = ipc_endpoint(control_socket)
        self.generation = generation
        self.timeout_s = timeout_s
        self.think_s = think_s
        self.requests: dict[str, Request] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._run = secrets.token_hex(2)
        self._threads = [
            threading.Thread(target=self._client, args=(i,), name=f"soak-client-{i}", daemon=True)
            for i in range(count)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout_s: float) -> None:
        """No new requests; wait (at most `timeout_s`) for the ones in flight."""
        self._stop.set()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.1, deadline - time.monotonic()))

    def _client(self, index: int) -> None:
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        try:
            seq = 0
            while not self._stop.is_set():
                if not self.generation.wait_up(0.5):
                    continue
                gen = self.generation.value
                sock = ctx.socket(zmq.DEALER)
                sock.setsockopt(zmq.LINGER, 0)
                sock.setsockopt(zmq.IDENTITY, f"soak-{self._run}-{index}-{gen}".encode())
                sock.connect(self.endpoint)
                try:
                    while not self._stop.is_set() and gen == self.generation.value:
                        seq += 1
                        self._one(sock, index, seq, gen)
                        if self.think_s:
                            self._stop.wait(self.think_s)
                finally:
                    sock.close(linger=0)
        finally:
            ctx.term()

    def _one(self, sock: zmq.Socket[bytes], index: int, seq: int, gen: int) -> None:
        rid = f"{self._run}-c{index}-{seq}"
        payload = wire.Delegate(
            input=f"req {rid}",
            instance_key=f"soak-c{index}-{seq // 200}",
            source=wire.Source("cli", "send"),
            timeout_ms=int(self.timeout_s * 1000),
        )
        frame = wire.encode(
            wire.DELEGATE, "cli", "", payload, correlation_id=rid, trace_id=secrets.token_hex(16)
        )
        request = Request(rid, index, time.time(), gen)
        with self._lock:
            self.requests[rid] = request
        sock.send(frame)
        deadline = time.monotonic() + self.timeout_s + 5
        while request.outcome == "pending":
            if gen != self.generation.value:
                request.outcome = "interrupted"  # the daemon died: the journal decides
                return
            if time.monotonic() > deadline:
                request.outcome = "no_answer"
                return
            if sock.poll(200):
                self._receive(sock.recv())
        # Catch a second answer to this one (or to an earlier one) that comes right after.
        while sock.poll(0):
            self._receive(sock.recv())

    def _receive(self, frame: bytes) -> None:
        try:
            env = wire.decode(frame)
            if env.type == wire.TURN_UPDATE:
                return
            result = wire.decode_payload(env, wire.DelegateResult)
        except wire.MalformedFrame:
            return
        with self._lock:
            request = self.requests.get(env.correlation_id or "")
        if request is None:
            return
        request.answers += 1
        if request.answers > 1:
            return
        request.answered_at = time.time()
        if result.status == "ok":
            text = result.response or ""
            if text == expected_answer(request.request_id):
                request.outcome = "ok"
            elif "FORGED" in text:
                request.outcome = "forged"
            else:
                request.outcome = "wrong"
                request.code = text[:120]
        else:
            request.outcome = "error"
            request.code = result.error.code if result.error else "?"
