"""The orchestrator daemon: sockets, signals and the main loop, read top to bottom.

serve -> startup (lock, load, bind) -> main loop (until SIGTERM/SIGINT/`stop`) -> shutdown
(drain agents, answer what is left, close).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import signal
import time
from typing import Any

import msgspec
import structlog
import zmq

from goondan.bundle import Bundle
from goondan.paths import StatePaths
from ipc import messages as wire
from ipc.channel import Channel
from ipc.endpoints import bind_router, ensure_private_dir, ipc_endpoint
from orchestrator.journal import Journal
from orchestrator.launcher import Launcher, LauncherKind, LaunchSpec, make_launcher
from orchestrator.lock import StateLock
from orchestrator.router import Pending, Requester, Router
from orchestrator.supervisor import HANG_TIMEOUT_S, Supervisor

DEFAULT_INPUT_TIMEOUT_MS = 600_000  # a CLI input may run a long turn


class OrchestratorInfo(msgspec.Struct, frozen=True, rename="camel"):
    """`run/orchestrator.json`: how clients find the daemon."""

    pid: int
    swarm: str
    bundle: str
    started_at: float
    control_endpoint: str


class Daemon:
    def __init__(
        self,
        bundle: Bundle,
        swarm_name: str | None,
        paths: StatePaths,
        launcher: LauncherKind = "zygote",
        hang_timeout_s: float = HANG_TIMEOUT_S,
    ) -> None:
        self.bundle = bundle
        self.swarm = bundle.select_swarm(swarm_name)
        self.paths = paths
        self.agent_names = list(bundle.swarm_agents(self.swarm))
        self.entry_agent = bundle.entry_agent(self.swarm)
        self.grace_s = float(self.swarm.spec.policy.shutdown.grace_period_seconds)
        self._launcher_kind = launcher
        self._hang_timeout_s = hang_timeout_s
        self._stop = asyncio.Event()
        self._local_ids = itertools.count(1)
        self._local_waiters: dict[str, asyncio.Future[wire.DelegateResult]] = {}
        self._log = structlog.get_logger().bind(swarm=self.swarm.name)
        self.started_at = time.time()
        self.input_trace_id: str | None = None  # of `run --input`, for its transcript
        self._stopping = False

    # -- life cycle --------------------------------------------------------------------------

    async def serve(self, one_input: str | None = None) -> tuple[int, str | None]:
        """Run until stopped. With `one_input`, answer it and stop; returns (code, answer)."""
        ensure_private_dir(self.paths.run_dir)
        with StateLock(self.paths.lock_file):
            self._startup()
            try:
                answer = await self._main_loop(one_input)
            finally:
                await self._shutdown()
        return (0 if answer is None or answer.status == "ok" else 1), _answer_text(answer)

    def _startup(self) -> None:
        agents_endpoint = ipc_endpoint(self.paths.agents_socket)
        control_endpoint = ipc_endpoint(self.paths.control_socket)
        self._zmq: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.agents = Channel(bind_router(self._zmq, agents_endpoint), self._on_agent_frames)
        self.control = Channel(bind_router(self._zmq, control_endpoint), self._on_control_frames)
        self.launcher: Launcher = make_launcher(
            self._launcher_kind,
            LaunchSpec(self.bundle.root, self.swarm.name, agents_endpoint, self.paths.root),
        )
        self.supervisor = Supervisor(
            self.agent_names,
            self.launcher,
            on_ready=self._agent_ready,
            on_exit=self._agent_exited,
            hang_timeout_s=self._hang_timeout_s,
        )
        self.router = Router(
            set(self.agent_names),
            self.entry_agent,
            self,
            self.supervisor.ensure_running,
            on_settled=self._settled,
        )
        self.journal = Journal(self.paths.journal_file)
        self.agents.start()
        self.control.start()
        self._prepare = asyncio.ensure_future(self.launcher.start())
        self.supervisor.start_watchdog()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        info = OrchestratorInfo(
            os.getpid(), self.swarm.name, str(self.bundle.root), self.started_at, control_endpoint
        )
        self._redeliver_journal()
        self.paths.info_file.write_bytes(msgspec.json.encode(info))
        self._log.info(
            "orchestrator started",
            pid=os.getpid(),
            agents=self.agent_names,
            entryAgent=self.entry_agent,
            stateRoot=str(self.paths.root),
        )

    def _redeliver_journal(self) -> None:
        """Inputs accepted by an earlier run that never got their answer: deliver them again."""
        entries = self.journal.recover()
        if entries:
            self._log.warning("delivering unanswered inputs from the journal", count=len(entries))
        replay = Requester("replay", b"journal", None)
        for entry in entries:
            try:
                env = wire.decode(entry.frame)
            except wire.MalformedFrame:
                self.journal.done(entry.id)
                continue
            if self.router.delegate(replay, env, request_id=entry.id) is None:
                self.journal.done(entry.id)  # answered at once (e.g. the agent is gone)

    def _settled(self, pending: Pending) -> None:
        # At shutdown, unanswered inputs stay in the journal for the next run.
        if pending.requester.channel in ("control", "replay") and not self._stopping:
            self.journal.done(pending.oid)

    async def _main_loop(self, one_input: str | None) -> wire.DelegateResult | None:
        if one_input is None:
            await self._stop.wait()
            return None
        payload = wire.Delegate(
            input=one_input,
            instance_key="cli",
            source=wire.Source("cli", "run"),
            timeout_ms=DEFAULT_INPUT_TIMEOUT_MS,
        )
        self.input_trace_id = secrets.token_hex(16)
        ask = asyncio.ensure_future(self.ask(self.entry_agent, payload, self.input_trace_id))
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait([ask, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not ask.done():
            ask.cancel()
            return wire.DelegateResult(
                "error", self.entry_agent, error=wire.ErrorInfo("E_INTERRUPTED", "interrupted")
            )
        return ask.result()

    async def _shutdown(self) -> None:
        self._log.info("orchestrator stopping", graceSeconds=self.grace_s)
        shutdown = wire.Shutdown("orchestrator_shutdown", int(self.grace_s * 1000))

        def send_shutdown(name: str) -> bool:
            return self.to_agent(
                name, wire.encode(wire.SHUTDOWN, wire.ORCHESTRATOR, name, shutdown)
            )

        await self.supervisor.stop_all(send_shutdown, self.grace_s)
        await self.launcher.aclose()
        self._stopping = True
        self.router.fail_all(
            "E_SHUTTING_DOWN",
            "the orchestrator stopped before answering; the input is kept in its journal "
            "and will be delivered when it starts again",
        )
        self.journal.close()
        await asyncio.sleep(0.05)  # let the control channel flush the last answers
        self.agents.close()
        self.control.close()
        self._zmq.term()
        self.paths.info_file.unlink(missing_ok=True)
        self._log.info("orchestrator stopped")

    def request_stop(self) -> None:
        self._stop.set()

    async def ask(
        self, agent: str, payload: wire.Delegate, trace_id: str | None = None
    ) -> wire.DelegateResult:
        """Route a delegate from the daemon itself (`goondan run --input`)."""
        cid = str(next(self._local_ids))
        future: asyncio.Future[wire.DelegateResult] = asyncio.get_running_loop().create_future()
        self._local_waiters[cid] = future
        env = wire.Envelope(
            wire.DELEGATE,
            "cli",
            agent,
            wire.encode_payload(payload),
            correlation_id=cid,
            trace_id=trace_id,
        )
        self.router.delegate(Requester("local", b"cli", cid), env)
        try:
            return await future
        finally:
            self._local_waiters.pop(cid, None)

    # -- Outbox for the router ---------------------------------------------------------------

    def to_agent(self, name: str, frame: bytes) -> bool:
        if not self.supervisor.is_ready(name):
            return False
        try:
            self.agents.send([name.encode(), frame])
        except zmq.ZMQError:  # EHOSTUNREACH: the process is gone, its exit is on the way
            return False
        self.supervisor.set_busy(name, self.router.in_flight(name) > 0)
        return True

    def to_requester(self, requester: Requester, frame: bytes) -> None:
        if requester.channel == "replay":
            self._log.info("journaled input answered", agent=wire.decode(frame).from_)
            return
        if requester.channel == "local":
            future = self._local_waiters.get(requester.correlation_id or "")
            if future is not None and not future.done():
                future.set_result(wire.decode_payload(wire.decode(frame), wire.DelegateResult))
            return
        channel = self.agents if requester.channel == "agent" else self.control
        try:
            channel.send([requester.identity, frame])
        except zmq.ZMQError:
            self._log.info("requester gone; answer dropped", requester=requester.identity)

    # -- agents socket -----------------------------------------------------------------------

    def _on_agent_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            self._log.warning("dropped agent message with unexpected frames", count=len(frames))
            return
        identity, frame = frames
        name = identity.decode(errors="replace")
        try:
            env = wire.decode(frame)
            self._on_agent_message(name, identity, env, frame)
        except wire.MalformedFrame as exc:
            self._log.warning("dropped malformed frame", sender=name, error=str(exc))
        except Exception:
            self._log.exception("failed to handle agent message", sender=name)

    def _on_agent_message(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        known = name in self.supervisor.slots
        if not known:
            self._log.warning("message from an unknown peer dropped", sender=name, type=env.type)
            return
        self.supervisor.touch(name)
        kind = env.type
        if kind == wire.DELEGATE:
            self.router.delegate(Requester("agent", identity, env.correlation_id), env)
        elif kind == wire.DELEGATE_RESULT:
            self.router.result(env)
            self.supervisor.note_success(name)
            self.supervisor.set_busy(name, self.router.in_flight(name) > 0)
        elif kind == wire.EVENT:
            self.router.event(env, frame)
        elif kind == wire.HEARTBEAT:
            pass
        elif kind == wire.READY:
            ready = wire.decode_payload(env, wire.Ready)
            if ready.protocol_version != wire.PROTOCOL_VERSION:
                self._log.error("agent speaks another protocol version", agent=name)
                return
            self.supervisor.mark_ready(name, ready.pid)
        elif kind == wire.START_ERROR:
            error = wire.decode_payload(env, wire.ErrorInfo)
            self.supervisor.mark_start_error(name, error.message)
        elif kind == wire.SHUTDOWN_ACK:
            self._log.debug("shutdown acknowledged", agent=name)
        else:
            self._log.warning("dropped message of unknown type", sender=name, type=kind)

    def _agent_ready(self, name: str) -> None:
        self.router.agent_ready(name)
        self.supervisor.set_busy(name, self.router.in_flight(name) > 0)

    def _agent_exited(self, name: str, crashed: bool, start_error: str | None) -> None:
        if start_error is not None:
            self.router.fail_waiting(
                name, "E_AGENT_START", f"agent '{name}' cannot start: {start_error}"
            )
            return
        code = "E_AGENT_CRASHED" if crashed else "E_AGENT_STOPPED"
        waiting = self.router.agent_gone(
            name,
            code,
            f"agent '{name}' {'crashed' if crashed else 'stopped'} while handling the request",
        )
        if crashed or waiting:
            self.supervisor.respawn(name)

    # -- control socket ----------------------------------------------------------------------

    def _on_control_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            return
        identity, frame = frames
        try:
            env = wire.decode(frame)
            if env.type == wire.DELEGATE:
                requester = Requester("control", identity, env.correlation_id)
                request_id = self.router.delegate(requester, env)
                if request_id is not None:
                    # Durable before it can be answered: a crash now loses nothing.
                    self.journal.accept(request_id, frame)
            elif env.type == wire.CONTROL:
                command = wire.decode_payload(env, wire.Control)
                reply = self._control(command)
                out = wire.encode(
                    wire.CONTROL_REPLY,
                    wire.ORCHESTRATOR,
                    "cli",
                    reply,
                    correlation_id=env.correlation_id,
                )
                self.control.send([identity, out])
            else:
                self._log.warning("dropped control message of unknown type", type=env.type)
        except wire.MalformedFrame as exc:
            self._log.warning("dropped malformed control frame", error=str(exc))
        except Exception:
            self._log.exception("failed to handle control message")

    def _control(self, command: wire.Control) -> wire.ControlReply:
        if command.command == "status":
            return wire.ControlReply(True, self.status())
        if command.command == "stop":
            self._log.info("stop requested by the control socket")
            asyncio.get_running_loop().call_soon(self.request_stop)
            return wire.ControlReply(True, {"stopping": True})
        return wire.ControlReply(
            False, error=wire.ErrorInfo("E_UNKNOWN_COMMAND", f"unknown command '{command.command}'")
        )

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "swarm": self.swarm.name,
            "bundle": str(self.bundle.root),
            "entryAgent": self.entry_agent,
            "startedAt": self.started_at,
            "stateRoot": str(self.paths.root),
            "processes": [msgspec.to_builtins(p) for p in self.supervisor.table()],
        }


def _answer_text(answer: wire.DelegateResult | None) -> str | None:
    if answer is None:
        return None
    if answer.status == "ok":
        return answer.response or ""
    error = answer.error
    return f"{error.code}: {error.message}" if error else "unknown error"
