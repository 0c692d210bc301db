"""A tiny orchestrator for connector-process tests: a real ZeroMQ ROUTER on an `ipc://` endpoint
that speaks the connector protocol, and a launcher for the real connector process.

    async with FakeOrchestrator() as orch:
        write_bundle(orch.dir / "b", CONNECTION_YAML)
        proc = await orch.spawn("my-connection", orch.dir / "b", env={"TOKEN": "..."})
        await orch.wait_ready()
        ...                                  # drive the connector (HTTP, a file, a fake API)
        event = (await orch.wait_events(1))[0]
        await orch.stop(proc)                # shutdown -> shutdown_ack -> exit 0

Every `connector_event` is acknowledged (`accepted`, agent `assistant`, unless `refuse` returns
an error) and, when the event asks for a reply, answered with a `delegate_result` whose text is
`answer(event)` (default `"echo: <text>"`; return an `ErrorInfo` for an error result).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import zmq
import zmq.asyncio

from goondan.settings import Settings
from ipc import wire
from ipc.credential import CREDENTIAL_PROPERTY
from tests.waiting import describe

BUNDLE_HEAD = """\
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: m
spec:
  provider: scripted
  model: scripted-v1
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: assistant
spec:
  modelConfig:
    modelRef: "Model/m"
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: "Agent/assistant"
  agents:
    - ref: "Agent/assistant"
"""


def write_bundle(
    directory: Path, connections_yaml: str, files: dict[str, str] | None = None
) -> Path:
    """A bundle with one scripted agent plus `connections_yaml` (Connection/Connector docs)."""
    directory.mkdir(parents=True, exist_ok=True)
    text = BUNDLE_HEAD + "---\n" + textwrap.dedent(connections_yaml).strip() + "\n"
    (directory / "goondan.yaml").write_text(text)
    for name, body in (files or {}).items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(textwrap.dedent(body))
    return directory


async def wait_listening(url: str, proc: ConnectorProc, timeout: float = 5.0) -> None:
    """Until the connector's HTTP server accepts connections (any answer will do)."""
    import httpx

    deadline = time.monotonic() + timeout
    async with httpx.AsyncClient() as client:
        while time.monotonic() < deadline:
            try:
                await client.get(url)
                return
            except httpx.TransportError:
                await asyncio.sleep(0.025)
    raise AssertionError(f"{url} never listened:\n{proc.logs()}")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _credential(message: zmq.Frame) -> str | None:
    """The credential property of the sender's ZMTP READY, if it presented one."""
    try:
        return str(message.get(CREDENTIAL_PROPERTY.decode()))
    except zmq.ZMQError:  # not among its properties
        return None


class ConnectorProc:
    def __init__(self, proc: asyncio.subprocess.Process, log_path: Path, log: IO[bytes]) -> None:
        self.proc = proc
        self.log_path = log_path
        self._log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def logs(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    async def wait(self, timeout: float = 10.0) -> int:
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise AssertionError(
                f"connector still running after {timeout}s:\n{self.logs()}"
            ) from None

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        self._log.close()


class FakeOrchestrator:
    def __init__(self, *, agent: str = "assistant") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="gc-"))  # short: unix socket paths <= 107 bytes
        self.endpoint = f"ipc://{self.dir}/o.sock"
        self.agent = agent
        self.envelopes: list[wire.Envelope] = []
        self.events: list[tuple[wire.Envelope, wire.ConnectorEvent]] = []
        self.heartbeats: dict[str, int] = {}
        self.ready: dict[str, wire.Ready] = {}
        self.credentials: dict[str, str | None] = {}  # what each READY presented
        self.start_errors: dict[str, wire.ErrorInfo] = {}
        self.shutdown_acks: set[str] = set()
        self.refuse: Callable[[wire.ConnectorEvent], wire.ErrorInfo | None] = lambda e: None
        self.answer: Callable[[wire.ConnectorEvent], str | wire.ErrorInfo] = lambda e: (
            f"echo: {e.message.text}"
        )
        self.answer_delay_s = 0.0
        self.ack_delay_s = 0.0
        self.ack_events = True
        self._procs: list[ConnectorProc] = []
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> FakeOrchestrator:
        self._zctx = zmq.asyncio.Context()
        self.sock = self._zctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(self.endpoint)
        self._recv = asyncio.create_task(self._receive())
        return self

    async def __aexit__(self, *exc: object) -> None:
        for proc in self._procs:
            await proc.kill()
        self._recv.cancel()
        for task in [self._recv, *self._tasks]:
            task.cancel()
        await asyncio.gather(self._recv, *self._tasks, return_exceptions=True)
        self.sock.close(linger=0)
        self._zctx.term()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the connector process ---------------------------------------------------------------

    async def spawn(
        self,
        connection: str,
        bundle: Path,
        env: dict[str, str] | None = None,
        credential: bytes | None = None,
        settings: Settings | None = None,
    ) -> ConnectorProc:
        """`credential` goes to the process as the orchestrator sends it: on a pipe it
        inherits (`--credential-fd`); `settings` as `--settings`."""
        log_path = self.dir / f"{connection}.{len(self._procs)}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed by ConnectorProc.kill
        fds: tuple[int, ...] = ()
        extra: list[str] = []
        if credential is not None:
            read_fd, write_fd = os.pipe()
            os.write(write_fd, credential)
            os.close(write_fd)
            fds, extra = (read_fd,), ["--credential-fd", str(read_fd)]
        if settings is not None:
            extra += settings.to_argv()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "orchestrator.connector_child",
            "--connection",
            connection,
            "--bundle",
            str(bundle),
            "--endpoint",
            self.endpoint,
            "--state-root",
            str(self.dir),
            "--parent-pid",
            str(os.getpid()),
            *extra,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env={**os.environ, "GOONDAN_LOG_LEVEL": "debug", **(env or {})},
            pass_fds=fds,
        )
        for fd in fds:
            os.close(fd)
        wrapped = ConnectorProc(proc, log_path, log)
        self._procs.append(wrapped)
        return wrapped

    async def wait_ready(
        self, connection: str, proc: ConnectorProc | None = None, timeout: float = 10.0
    ) -> wire.Ready:
        identity = f"connection:{connection}"
        await self._until(
            lambda: identity in self.ready or identity in self.start_errors, timeout, proc
        )
        if identity not in self.ready:
            raise AssertionError(
                f"start error: {self.start_errors[identity]}\n{proc.logs() if proc else ''}"
            )
        return self.ready[identity]

    async def wait_start_error(self, connection: str, timeout: float = 10.0) -> wire.ErrorInfo:
        identity = f"connection:{connection}"
        await self._until(lambda: identity in self.start_errors, timeout)
        return self.start_errors[identity]

    async def wait_events(
        self, count: int, timeout: float = 10.0, proc: ConnectorProc | None = None
    ) -> list[wire.ConnectorEvent]:
        await self._until(lambda: len(self.events) >= count, timeout, proc)
        return [event for _, event in self.events]

    async def shutdown(self, connection: str, grace_ms: int = 3000) -> None:
        frame = wire.encode(
            wire.SHUTDOWN,
            wire.ORCHESTRATOR,
            f"connection:{connection}",
            wire.Shutdown("orchestrator_shutdown", grace_ms),
        )
        await self.sock.send_multipart([f"connection:{connection}".encode(), frame])

    async def stop(self, connection: str, proc: ConnectorProc, grace_ms: int = 3000) -> int:
        """`shutdown`, then expect `shutdown_ack` and exit code 0."""
        await self.shutdown(connection, grace_ms)
        code = await proc.wait(grace_ms / 1000 + 5)
        assert f"connection:{connection}" in self.shutdown_acks, proc.logs()
        assert code == 0, proc.logs()
        return code

    async def _until(
        self, check: Callable[[], bool], timeout: float, proc: ConnectorProc | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {describe(check)}; "
                    f"got {[e.type for e in self.envelopes]}\n"
                    f"{proc.logs() if proc else ''}"
                )
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.2))
            except TimeoutError:
                pass

    # -- the wire ----------------------------------------------------------------------------

    async def _receive(self) -> None:
        while True:
            identity_frame, message = await self.sock.recv_multipart(copy=False)
            identity, frame = identity_frame.bytes, message.bytes
            env = wire.decode(frame)
            self.envelopes.append(env)
            sender = identity.decode()
            if env.type == wire.READY:
                self.ready[sender] = wire.decode_payload(env, wire.Ready)
                self.credentials[sender] = _credential(message)
            elif env.type == wire.START_ERROR:
                self.start_errors[sender] = wire.decode_payload(env, wire.ErrorInfo)
            elif env.type == wire.HEARTBEAT:
                self.heartbeats[sender] = self.heartbeats.get(sender, 0) + 1
            elif env.type == wire.SHUTDOWN_ACK:
                self.shutdown_acks.add(sender)
            elif env.type == wire.CONNECTOR_EVENT:
                event = wire.decode_payload(env, wire.ConnectorEvent)
                self.events.append((env, event))
                if self.ack_events:
                    task = asyncio.create_task(self._answer(identity, env, event))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
            self._changed.set()

    async def _answer(
        self, identity: bytes, env: wire.Envelope, event: wire.ConnectorEvent
    ) -> None:
        if self.ack_delay_s:
            await asyncio.sleep(self.ack_delay_s)
        error = self.refuse(event)
        ack = (
            wire.EventAck(False, error=error)
            if error is not None
            else wire.EventAck(True, agent=self.agent, instance_key=event.instance_key)
        )
        await self._send(identity, wire.EVENT_ACK, ack, env.correlation_id)
        if error is not None or not event.reply:
            return
        if self.answer_delay_s:
            await asyncio.sleep(self.answer_delay_s)
        answer = self.answer(event)
        result: Any
        if isinstance(answer, wire.ErrorInfo):
            result = wire.DelegateResult(
                "error", self.agent, error=answer, instance_key=event.instance_key
            )
        else:
            result = wire.DelegateResult("ok", self.agent, answer, instance_key=event.instance_key)
        await self._send(identity, wire.DELEGATE_RESULT, result, env.correlation_id)

    async def _send(self, identity: bytes, type_: str, payload: Any, cid: str | None) -> None:
        frame = wire.encode(
            type_, wire.ORCHESTRATOR, identity.decode(), payload, correlation_id=cid
        )
        await self.sock.send_multipart([identity, frame])
