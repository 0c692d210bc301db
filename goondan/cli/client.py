"""A thin synchronous client of the daemon's control socket (what `send`, `status`, `stop` use)."""

from __future__ import annotations

import fcntl
import os
import secrets
import sys
import time
from collections.abc import Callable
from types import TracebackType

import zmq

from goondan.paths import StatePaths
from ipc import wire, zmtp
from ipc.endpoints import ipc_endpoint


class NotRunning(Exception):
    pass


EXIT_FAILED = 1  # the daemon did not answer in time
EXIT_NOT_RUNNING = 2


def with_daemon(paths: StatePaths, work: Callable[[ControlClient], int]) -> int:
    """`work(client)`'s exit code, or the CLI's when no daemon runs on `paths` (2) or it
    does not answer in time (1), with the reason on stderr."""
    try:
        with ControlClient(paths) as client:
            return work(client)
    except NotRunning as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return EXIT_NOT_RUNNING
    except TimeoutError as exc:
        print(f"goondan: {exc}", file=sys.stderr)
        return EXIT_FAILED


def daemon_running(paths: StatePaths) -> bool:
    """True while some process holds the state root's lock (the kernel keeps this honest)."""
    try:
        fd = os.open(paths.lock_file, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class ControlClient:
    def __init__(self, paths: StatePaths) -> None:
        if not daemon_running(paths):
            raise NotRunning(
                f"no orchestrator is running on state root {paths.root} "
                "(start one with `goondan run`, or pass --state-root)"
            )
        self.paths = paths
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.IDENTITY, f"cli-{os.getpid()}-{secrets.token_hex(3)}".encode())
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(ipc_endpoint(paths.control_socket))

    def __enter__(self) -> ControlClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._sock.close(linger=0)
        self._ctx.term()

    def call(
        self,
        frame: bytes,
        timeout_s: float,
        on_update: Callable[[wire.TurnUpdate], None] | None = None,
    ) -> wire.Envelope:
        """Send one message and wait for its answer, noticing if the daemon dies meanwhile.
        `turn_update`s that come first go to `on_update`. A message over the size limit
        raises `zmtp.MessageTooLarge` before it is sent: the daemon would drop it unanswered."""
        self._sock.send(zmtp.check_size(frame))
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer from the orchestrator within {timeout_s:g}s")
            if self._sock.poll(int(min(remaining, 0.5) * 1000)):
                env = wire.decode(self._sock.recv())
                if env.type != wire.TURN_UPDATE:
                    return env
                if on_update is not None:
                    on_update(wire.decode_payload(env, wire.TurnUpdate))
                continue
            if not daemon_running(self.paths):
                raise NotRunning("the orchestrator stopped before answering")

    def command(
        self, name: str, args: wire.ControlArgs | None = None, timeout_s: float = 10.0
    ) -> wire.ControlReply:
        """Run control command `name` (`wire.CLI_COMMANDS` declares its args)."""
        control = wire.control(name, args)
        frame = wire.encode(wire.CONTROL, "cli", wire.ORCHESTRATOR, control, correlation_id="1")
        return wire.decode_payload(self.call(frame, timeout_s), wire.ControlReply)

    def send(
        self,
        text: str,
        *,
        agent: str | None,
        instance_key: str,
        timeout_s: float,
        on_update: Callable[[wire.TurnUpdate], None] | None = None,
        trace_id: str | None = None,
    ) -> wire.DelegateResult:
        payload = wire.Delegate(
            input=text,
            instance_key=instance_key,
            source=wire.Source("cli", "send"),
            timeout_ms=int(timeout_s * 1000),
        )
        frame = wire.encode(
            wire.DELEGATE,
            "cli",
            agent or "",
            payload,
            correlation_id="1",
            trace_id=trace_id or secrets.token_hex(16),
        )
        # Our own deadline is a little later than the request's, so the daemon's
        # AGENT_REQUEST_TIMEOUT answer arrives first.
        answer = self.call(frame, timeout_s + 2, on_update)
        return wire.decode_payload(answer, wire.DelegateResult)

    def cancel_request(self, trace_id: str, timeout_s: float) -> wire.Cancelled | None:
        """Cancel the turns of the request sent under `trace_id` (Ctrl-C on `send`); None
        when the daemon did not confirm within `timeout_s`. The answer to the request itself,
        if it comes first, is skipped."""
        control = wire.control("cancel", wire.CancelArgs(trace_id=trace_id))
        frame = wire.encode(wire.CONTROL, "cli", wire.ORCHESTRATOR, control, correlation_id="2")
        self._sock.send(frame)
        deadline = time.monotonic() + timeout_s
        while (remaining := deadline - time.monotonic()) > 0:
            if not self._sock.poll(int(remaining * 1000)):
                return None
            env = wire.decode(self._sock.recv())
            if env.type == wire.CONTROL_REPLY and env.correlation_id == "2":
                reply = wire.decode_payload(env, wire.ControlReply)
                return wire.decode_result(reply, wire.Cancelled) if reply.ok else None
        return None
