"""The orchestrator daemon: sockets, signals and the main loop, read top to bottom.

serve -> startup (lock, load, bind) -> main loop (until SIGTERM/SIGINT/`stop`) -> shutdown
(drain agents, answer what is left, close).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import resource
import secrets
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import structlog

from goondan.bundle import Bundle, BundleInvalid
from goondan.bundle.env_needs import env_needs
from goondan.bundle.placement import PlacementError, ray_agents
from goondan.envfiles import EnvFileError, EnvFiles
from goondan.files import replace_file
from goondan.hardening import forbid_inspection
from goondan.paths import BadInstanceKey, StatePaths, StorageError, storage_name
from goondan.proctitle import set_title
from goondan.settings import DEFAULTS, Settings
from ipc import wire
from ipc.endpoints import SPAN_SOCKET_ENV, ensure_private_dir, ipc_endpoint
from ipc.error_codes import ErrorCode
from ipc.router_socket import RouterSocket, Unroutable, connection_cap
from ipc.tasks import TaskSet
from orchestrator.approvals import ApprovalRegistry, with_decider
from orchestrator.cancel import cancel_turns
from orchestrator.connections import Connections, swarm_connections, terminal_connection
from orchestrator.control import AgentCalls, CommandError, ControlCommands
from orchestrator.instances import InstanceRegistry, delete_instance
from orchestrator.journal import Journal
from orchestrator.launcher import AgentLauncher, ConnectorLauncher, LaunchSpec, make_launcher
from orchestrator.lock import StateLock
from orchestrator.reload import load_for_reload, swarm_fingerprints
from orchestrator.router import InFlight, Requester, Router
from orchestrator.supervisor import Exit, ProcessKind, Supervisor
from orchestrator.systemd import Notifier
from orchestrator.throttled_log import ThrottledLog
from orchestrator.trust import PEER_KEY_FILE, SENDS, Admitted, Refused, admit, write_peer_key
from orchestrator.watch import watch

if TYPE_CHECKING:
    from orchestrator.metrics import AgentUsage, MetricsServer, RequestStats
    from orchestrator.otel_sdk import SpanExport
    from orchestrator.ray_placement import PlacedLauncher, RayPlacement
    from orchestrator.studio.server import Studio

# A journaled input delivered again after a restart that fails with one of these is delivered
# once more later: a disk with room again, or an agent that no longer crashes, may answer it.
REPLAY_AGAIN_ON = frozenset(
    {
        ErrorCode.E_STORAGE,
        ErrorCode.E_AGENT_CRASHED,
        ErrorCode.E_AGENT_STOPPED,
        ErrorCode.AGENT_REQUEST_TIMEOUT,
    }
)

# How long opening a trace in the studio waits for each agent to write its held events: a
# stuck agent must not hold the page for long.
STUDIO_FLUSH_WAIT_MS = 500

# A handler of one message type from agents.sock: (sender name, identity, envelope, frame).
AgentHandler = Callable[[str, bytes, wire.Envelope, bytes], None]


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
        settings: Settings = DEFAULTS,
        watch: bool = False,
        env_files: EnvFiles | None = None,
    ) -> None:
        self.bundle = bundle
        self.env_files = env_files  # read again by a reload
        self.swarm = bundle.select_swarm(swarm_name)
        self.paths = paths
        self.agent_names = list(bundle.swarm_agents(self.swarm))
        self.entry_agent = bundle.entry_agent(self.swarm)
        self.grace_s = float(self.swarm.spec.policy.shutdown.grace_period_seconds)
        self.settings = settings
        # `goondan send`'s client hears nothing before its answer and shares our machine, so
        # only `--durability fsync` wants its input fsync'd before it is routed
        # (`_accept_input`).
        self._inputs_durable_first = settings.storage.durability == "fsync"
        self._watch = watch
        self._stop = asyncio.Event()
        self._local_ids = itertools.count(1)
        self._local_waiters: dict[str, asyncio.Future[wire.DelegateResult]] = {}
        self._log = structlog.get_logger().bind(swarm=self.swarm.name)
        # What a peer can provoke at will is logged once per reason per interval.
        self._refusals = ThrottledLog(self._log)
        self._handlers = self._agent_handlers()
        self._admitted: dict[bytes, Admitted] = {}  # by identity: how its peer got in
        self.started_at = time.time()
        self.input_trace_id: str | None = None  # of `run --input`, for its transcript
        # Shows what a `run --input` turn streams (text, tool progress), when set.
        self.on_update: Callable[[wire.TurnUpdate], None] | None = None
        # Given `run --input`'s (exit code, answer) as soon as it is known, before the shutdown.
        self.on_answer: Callable[[int, str | None], None] | None = None
        self._stopping = False
        self._fingerprints = swarm_fingerprints(bundle, self.swarm)
        self._reload_lock = asyncio.Lock()
        self._replay_tries: dict[str, int] = {}  # journaled inputs that failed after a restart
        self.notifier = Notifier()
        # Where children's stdout and stderr go (None: the daemon's stderr); `run --detach`.
        self.child_output: int | None = None
        # `run --metrics HOST:PORT`: /metrics served there (orchestrator.metrics).
        self.metrics_address: tuple[str, int] | None = None
        self._usage: AgentUsage | None = None
        self._requests: RequestStats | None = None  # each settled request, for /metrics
        self._metrics_server: MetricsServer | None = None
        self.placement: RayPlacement | None = None  # `run --placement ray`
        self._placed: PlacedLauncher | None = None  # the launcher then
        # `run --studio`: its listening socket, bound by the CLI; the studio starts with us.
        self.studio_socket: socket.socket | None = None
        self.studio: Studio | None = None

    # -- life cycle --------------------------------------------------------------------------

    async def serve(self, one_input: str | None = None) -> tuple[int, str | None]:
        """Run until stopped. With `one_input`, answer it and stop; returns (code, answer)."""
        # Conversations, journal and sockets are the owner's alone; agents inherit the umask.
        os.umask(0o077)
        set_title(f"goondan: orchestrator {self.swarm.name}")
        forbid_inspection()  # agents' keys sit in our environ: root-only /proc/PID/environ
        ensure_private_dir(self.paths.root)
        ensure_private_dir(self.paths.run_dir)
        ensure_private_dir(self.paths.last_error_dir)  # where agents keep their last error
        with StateLock(self.paths.lock_file):
            self._startup()
            try:
                await self._start_metrics()
                answer = await self._main_loop(one_input)
                code = 0 if answer is None or answer.status == "ok" else 1
                if self.on_answer is not None and answer is not None:
                    self.on_answer(code, _answer_text(answer))
            finally:
                await self._shutdown()
        return code, _answer_text(answer)

    def _startup(self) -> None:
        if self.metrics_address is not None:  # bound first: a port in use stops the start
            from orchestrator.metrics import MetricsServer  # prometheus-client only if asked

            self._metrics_server = MetricsServer(*self.metrics_address)
        open_files = _raise_open_files_limit()  # before any agent: they inherit it
        agents_endpoint = ipc_endpoint(self.paths.agents_socket)
        control_endpoint = ipc_endpoint(self.paths.control_socket)
        self._peer_key = write_peer_key(self.paths.run_dir / PEER_KEY_FILE)
        control_share = self.settings.daemon.control_connection_share
        self.agents = RouterSocket(
            agents_endpoint,
            self._on_agent_frames,
            on_peer_error=self._agent_socket_error,
            admit=self._admit,
            max_connections=connection_cap(1 - control_share, self.settings.ipc.fd_reserve),
            limits=self.settings.ipc,
        )
        # Ours too, not libzmq's: at the open-file limit libzmq's listener aborts the process.
        self.control = RouterSocket(
            control_endpoint,
            self._on_control_frames,
            on_peer_error=self._control_socket_error,
            max_connections=connection_cap(control_share, self.settings.ipc.fd_reserve),
            limits=self.settings.ipc,
        )
        # Before the agents' launcher: they inherit its span socket's path in the environment.
        self.spans = _span_export(self.paths.run_dir)
        launch_spec = LaunchSpec(
            self.bundle.root,
            self.swarm.name,
            agents_endpoint,
            self.paths.root,
            self.settings,
            self.bundle.model_providers(),
            output_fd=self.child_output,
        )
        self.launcher: AgentLauncher = make_launcher(self.settings.daemon.spawn, launch_spec)
        if self.placement is not None:  # `--placement ray`: Ray is imported from here only
            from orchestrator.ray_placement import place

            self.launcher = self._placed = place(
                self.launcher,
                self.placement,
                launch_spec,
                self.bundle,
                self.swarm,
                self.agents,
                self.paths.root / "tls",
                self._ray_environment,
            )
        connections = swarm_connections(self.bundle, self.swarm)
        # Reloads, control commands, the template's start and the bundle watch; `_shutdown`
        # waits for them. The supervisor, launcher and notifier own theirs.
        self._tasks = TaskSet("daemon")
        self.supervisor = Supervisor(
            self.agent_names,
            {
                "agent": self.launcher,
                "connector": ConnectorLauncher(
                    launch_spec, terminal_connection(self.bundle, connections)
                ),
            },
            connectors=list(connections),
            on_ready=self._agent_ready,
            on_exit=self._agent_exited,
            settings=self.settings.daemon,
            last_errors=self.paths.last_error_dir,
        )
        self.router = _router(
            self.spans,
            set(self.agent_names),
            self.entry_agent,
            self,
            self.supervisor.ensure_running,
            on_settled=self._settled,
            settings=self.settings.daemon,
            measure=self._metrics_server is not None,
        )
        storage = self.settings.storage
        self.journal = Journal(
            self.paths.journal_file,
            compact_bytes=storage.journal_compact_bytes,
            sync_after_s=storage.journal_sync_after_s,
        )
        self.instances = InstanceRegistry(self.paths.swarm(self.swarm.name))
        self.connections = Connections(
            connections, self.entry_agent, self.router, self.journal, self._send_to_peer
        )
        self.agent_calls = AgentCalls(self.to_agent)
        self.approvals = ApprovalRegistry(self.paths.approvals_file, self.to_agent)
        if waiting := self.approvals.recover():
            self._log.info("tool calls still wait for approval", count=waiting)
        self.commands = ControlCommands(
            {
                "status": self._cmd_status,
                "stop": self._cmd_stop,
                "restart": self._cmd_restart,
                "instance.delete": self._cmd_instance_delete,
                "cancel": self._cmd_cancel,
                "logs.flush": self._cmd_logs_flush,
                "approvals": self._cmd_approvals,
                "approve": self._cmd_approve,
                "deny": self._cmd_deny,
            },
            wire.CLI_COMMANDS,
        )
        self.agents.start()
        self.control.start()
        self._tasks.spawn(self.launcher.start(), name="prepare agent launcher")
        self.supervisor.start_watchdog()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        info = OrchestratorInfo(
            os.getpid(), self.swarm.name, str(self.bundle.root), self.started_at, control_endpoint
        )
        self._redeliver_journal()
        for name in self.connections.connections:
            self.supervisor.ensure_running(name)  # ingress runs from the start
        # Whole or not at all: `goondan status` and `stop` read it while we may be writing.
        replace_file(self.paths.info_file, msgspec.json.encode(info), mode=0o644)
        self._log.info(
            "orchestrator started",
            pid=os.getpid(),
            agents=self.agent_names,
            entryAgent=self.entry_agent,
            stateRoot=str(self.paths.root),
            openFiles=open_files,
        )
        self.notifier.ready(f"swarm {self.swarm.name}: {len(self.agent_names)} agents")
        self.notifier.start_watchdog()
        if self.studio_socket is not None:
            self._start_studio(self.studio_socket)
        _freeze_long_lived()
        if self._watch:
            self._tasks.spawn(
                watch(
                    self.bundle.root, self._on_bundle_change, self.settings.daemon.watch_interval_s
                ),
                name="watch bundle",
            )

    async def _start_metrics(self) -> None:
        if self._metrics_server is None:
            return
        from orchestrator import metrics

        self._requests, self._usage = metrics.RequestStats(), metrics.AgentUsage()
        collector = metrics.DaemonCollector(
            self.supervisor, self.router, self._requests, self._usage
        )
        await self._metrics_server.start(collector)

    def _start_studio(self, sock: socket.socket) -> None:
        from orchestrator.studio.server import Studio

        self.studio = Studio(
            sock,
            self.paths,
            lambda: self.swarm.name,
            self.status,
            lambda: {
                name.removeprefix("connection:"): self.entry_agent
                for name in self.connections.connections
            },
            lambda trace_id: self._cancel(wire.TurnCancelArgs(trace_id=trace_id), self.agent_names),
            lambda: self._cmd_logs_flush(wire.LogsFlushArgs(STUDIO_FLUSH_WAIT_MS)),
        )
        self._tasks.spawn(self.studio.start(), name="start studio")

    def _redeliver_journal(self) -> None:
        """Inputs accepted by an earlier run that never got their answer: deliver them again."""
        entries = self.journal.recover()
        if entries:
            self._log.warning("delivering unanswered inputs from the journal", count=len(entries))
        for entry in entries:
            self._replay(entry.id)

    def _replay(self, request_id: str) -> None:
        """Deliver a journaled input again; its answer goes to `_replay_answered`."""
        entry = self.journal.entry(request_id)
        if entry is None or self._stopping:
            return
        try:
            env = wire.decode(entry.frame)
        except wire.MalformedFrame:
            self._journal_done(request_id)
            return
        self.router.delegate(Requester("replay", b"journal", request_id), env, request_id)

    def _replay_answered(self, request_id: str, frame: bytes) -> None:
        """A replayed input's answer has nobody to go to: the client that sent it left with
        the orchestrator that died. A failure a later delivery may not meet (a full disk, a
        crash) keeps the input journaled and delivers it again after a back-off, so it is not
        forgotten; anything else settles it."""
        if self._stopping:
            return  # still journaled: the next run delivers it
        result = wire.decode_payload(wire.decode(frame), wire.DelegateResult)
        code = result.error.code if result.error is not None else None
        if code in REPLAY_AGAIN_ON:
            tries = self._replay_tries[request_id] = self._replay_tries.get(request_id, 0) + 1
            replay = self.settings.daemon
            if code == ErrorCode.E_STORAGE or tries < replay.replay_max_tries:
                delay = min(replay.replay_backoff_s * 2 ** (tries - 1), replay.replay_backoff_max_s)
                self._log.warning(
                    "journaled input failed; delivering it again",
                    requestId=request_id,
                    code=code,
                    retryInSeconds=delay,
                )
                asyncio.get_running_loop().call_later(delay, self._replay, request_id)
                return
            self._log.error("journaled input abandoned", requestId=request_id, code=code)
        self._replay_tries.pop(request_id, None)
        self._journal_done(request_id)
        self._log.info(
            "journaled input answered",
            requestId=request_id,
            agent=result.target,
            status=result.status,
            code=code,
        )

    def _settled(self, request: InFlight, outcome: str) -> None:
        # At shutdown, unanswered inputs stay in the journal for the next run. Replays settle
        # in `_replay_answered`, which decides whether they are done.
        outside = request.requester.channel in ("control", "connector")
        if outside and not self._stopping:
            self._journal_done(request.oid)
        if self._requests is not None:
            self._requests.finished(request, outcome)

    def _journal_done(self, request_id: str) -> None:
        try:
            self.journal.done(request_id)
        except StorageError as exc:  # the answer still goes out; a crash now replays it once
            self._log.warning("could not journal an answered input", error=str(exc))

    async def _main_loop(self, one_input: str | None) -> wire.DelegateResult | None:
        if one_input is None:
            await self._stop.wait()
            return None
        payload = wire.Delegate(
            input=one_input,
            instance_key="cli",
            source=wire.Source("cli", "run"),
            timeout_ms=self.settings.daemon.input_timeout_ms,
        )
        self.input_trace_id = secrets.token_hex(16)
        ask = asyncio.ensure_future(self.ask(self.entry_agent, payload, self.input_trace_id))
        stop = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait([ask, stop], return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        interrupted = not ask.done()
        ask.cancel()  # nothing when it is done
        await asyncio.wait([ask, stop])  # both end here, not after the loop
        if interrupted:
            return wire.DelegateResult(
                "error",
                self.entry_agent,
                error=wire.ErrorInfo(ErrorCode.E_INTERRUPTED, "interrupted"),
            )
        return ask.result()

    def _shutdown_sender(self, reason: str) -> Callable[[str], bool]:
        shutdown = wire.Shutdown(reason, int(self.grace_s * 1000))

        def send_shutdown(name: str) -> bool:
            self.router.agent_draining(name)
            return self.to_agent(
                name, wire.encode(wire.SHUTDOWN, wire.ORCHESTRATOR, name, shutdown)
            )

        return send_shutdown

    async def _shutdown(self) -> None:
        self._log.info("orchestrator stopping", graceSeconds=self.grace_s)
        self._stopping = True  # from now on, unanswered inputs stay in the journal
        self.notifier.stopping()
        await self.notifier.stop_watchdog()
        if self.studio is not None:
            await self.studio.close()
        send_shutdown = self._shutdown_sender("orchestrator_shutdown")
        try:
            await self.supervisor.stop_all(send_shutdown, self.grace_s)
        except Exception:  # a bug must not keep the sockets and the journal open
            self._log.exception("draining the processes failed")
        await self.launcher.aclose()
        if self._metrics_server is not None:
            await self._metrics_server.aclose()
        self.router.fail_all(
            ErrorCode.E_SHUTTING_DOWN,
            "the orchestrator stopped before answering; the input is kept in its journal "
            "and will be delivered when it starts again",
        )
        self.journal.close()
        self.approvals.close()
        if self.spans is not None:  # at most a few seconds, for a collector that is gone
            await asyncio.to_thread(self.spans.close)
        await asyncio.sleep(0.05)  # let the control channel flush the last answers
        self.agents.close()
        self.control.close()
        await self.agents.wait_closed()
        await self.control.wait_closed()
        await self._tasks.close()  # a reload or a control command still under way ends here
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

    # -- reload and restart ------------------------------------------------------------------

    async def _on_bundle_change(self) -> None:
        self._log.info("bundle files changed: reloading")
        await self.reload()

    def _on_sighup(self) -> None:
        self._log.info("SIGHUP: reloading the bundle")
        self._tasks.spawn(self.reload(), name="reload (SIGHUP)")

    async def reload(self, *, restart_all: bool = False) -> wire.Reloaded:
        """Load the bundle again and restart the agents whose resources changed (all of them
        with `restart_all`). A bundle that no longer validates is refused: the running swarm
        stays as it was and the errors are logged and returned."""
        async with self._reload_lock:
            self.notifier.reloading()
            try:
                return await self._reload(restart_all)
            finally:
                self.notifier.ready(f"swarm {self.swarm.name}: {len(self.agent_names)} agents")

    async def _reload(self, restart_all: bool) -> wire.Reloaded:
        try:
            # Off the loop (a thread, then a probe process that imports the entries): the
            # swarm keeps routing meanwhile.
            env = await asyncio.to_thread(self.env_files.read) if self.env_files else None
            bundle, swarm, prints, warnings = await load_for_reload(
                self.bundle.root, self.swarm.name, self.settings.daemon.import_timeout_s
            )
        except (BundleInvalid, EnvFileError) as exc:
            errors = [e.render() for e in exc.errors]
            self._log.error("reload refused: the bundle does not validate", errors=errors)
            return wire.Reloaded(False, [], [], [], errors)
        except (LookupError, OSError) as exc:
            self._log.error("reload refused", error=str(exc))
            return wire.Reloaded(False, [], [], [], [str(exc)])
        try:  # placed as at start: a local run refuses an agent that asks for Ray
            on_ray = ray_agents(bundle, swarm, "local" if self.placement is None else "ray")
        except PlacementError as exc:
            self._log.error("reload refused", error=str(exc))
            return wire.Reloaded(False, [], [], [], [str(exc)])
        if warnings:
            self._log.warning("reload: warnings", warnings=[w.render() for w in warnings])
        # Every process inherits the environment: new env-file values restart them all.
        env_changed = self.env_files.apply(env) if self.env_files and env else []
        if env_changed:
            self._log.info("env files changed", names=env_changed)  # never the values
        restart_all = restart_all or bool(env_changed)
        old = self._fingerprints
        added = [n for n in prints if n not in old]
        removed = [n for n in old if n not in prints]
        changed = [n for n in prints if n in old and (restart_all or prints[n] != old[n])]
        self.bundle, self.swarm, self._fingerprints = bundle, swarm, prints
        self.launcher.set_providers(bundle.model_providers())
        if self._placed is not None:
            self._placed.set_placement(on_ray)
        self.agent_names = list(bundle.swarm_agents(swarm))
        connections = swarm_connections(bundle, swarm)
        self.entry_agent = bundle.entry_agent(swarm)
        self.grace_s = float(swarm.spec.policy.shutdown.grace_period_seconds)
        for name in added:
            self.supervisor.add(name, "connector" if name in connections else "agent")
        await asyncio.gather(*(self.restart_agent(n) for n in changed + removed))
        for name in removed:
            self.supervisor.remove(name)
        self.router.set_agents(set(self.agent_names), self.entry_agent)
        self.connections.update(connections, self.entry_agent)
        for name in added:
            if name in connections:
                self.supervisor.ensure_running(name)
        result = wire.Reloaded(True, changed, added, removed)
        gc.unfreeze()  # the old bundle is garbage now, and may hold cycles
        _freeze_long_lived()
        self._log.info("bundle reloaded", restarted=changed, added=added, removed=removed)
        return result

    def _ray_environment(self) -> dict[str, str]:
        """What a Ray-placed agent gets over its node's environment: the variables the env
        files set and those the bundle reads (`env_needs`: its Models' keys...), with the
        values in effect here (the process environment wins over the files, as for local
        agents). The rest of this environment is this machine's."""
        names = set(self.env_files.layer.values) if self.env_files is not None else set()
        names.update(name for need in env_needs(self.bundle) for name in need.names)
        return {name: os.environ[name] for name in sorted(names) if name in os.environ}

    async def restart_agent(self, name: str, *, fresh: bool = False) -> None:
        """Drain and stop the agent's process, then start it again if it was running or has
        work waiting. `fresh` also forgets its conversations."""
        slot = self.supervisor.slots[name]
        was_running = slot.process is not None
        await self.supervisor.stop(name, self._shutdown_sender("restart"), self.grace_s)
        if fresh:
            from goondan.paths import delete_conversation

            agent = storage_name(name)
            for key in (self.paths.swarm_dir(self.swarm.name) / "instances").glob("*"):
                delete_conversation(key / agent)
        slot.consecutive_crashes = 0
        if name in self._fingerprints and (was_running or self.router.has_waiting(name)):
            self.supervisor.ensure_running(name)

    # -- Outbox for the router ---------------------------------------------------------------

    def to_agent(self, name: str, frame: bytes) -> bool:
        if not self.supervisor.is_ready(name):
            return False
        try:
            self.agents.send([name.encode(), frame])
        except Unroutable:  # the process is gone, its exit is on the way
            return False
        self.supervisor.set_busy(name, self.router.in_flight(name) > 0)
        return True

    def to_requester(self, requester: Requester, frame: bytes) -> None:
        if requester.channel == "replay":
            self._replay_answered(requester.correlation_id or "", frame)
            return
        if requester.channel == "connector":
            self.connections.answer(requester, frame)
            return
        if requester.channel == "local":
            future = self._local_waiters.get(requester.correlation_id or "")
            if future is not None and not future.done():
                future.set_result(wire.decode_payload(wire.decode(frame), wire.DelegateResult))
            return
        channel = self.agents if requester.channel == "agent" else self.control
        try:
            channel.send([requester.identity, frame])
        except Unroutable:
            self._log.info("requester gone; answer dropped", requester=requester.identity)

    # -- agents socket -----------------------------------------------------------------------

    def _admit(self, identity: bytes, properties: dict[bytes, bytes]) -> str | None:
        """agents.sock's admission (`orchestrator.trust`): None lets the peer in."""
        name = identity.decode(errors="replace")
        try:
            admitted = admit(self.supervisor.slots.get(name), properties, self._peer_key)
        except Refused as exc:
            return str(exc)
        self._admitted[identity] = admitted
        if admitted.how == "external":
            self._log.info("external agent admitted with the operator's key", agent=name)
        return None

    def _agent_socket_error(self, identity: bytes | None, reason: str) -> None:
        peer = identity.decode(errors="replace") if identity is not None else None
        if reason.startswith("refused: "):
            self._refusals.warning("agents.sock peer refused", reason, peer=peer, reason=reason)
        else:
            self._refusals.warning("dropped a connection to agents.sock", peer=peer, reason=reason)

    def _on_agent_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            self._refusals.warning(
                "dropped agent message with unexpected frames",
                frames[0].decode(errors="replace"),
                count=len(frames),
            )
            return
        identity, frame = frames
        name = identity.decode(errors="replace")
        try:
            env = wire.decode(frame)
            self._on_agent_message(name, identity, env, frame)
        except wire.MalformedFrame as exc:
            self._refusals.warning("dropped malformed frame", name, sender=name, error=str(exc))
        except Exception:
            self._log.exception("failed to handle agent message", sender=name)

    def _agent_handlers(self) -> dict[ProcessKind, dict[str, AgentHandler]]:
        """`{type: handler}` per kind of process, for the types `SENDS` lets it send."""
        handlers: dict[str, AgentHandler] = {
            wire.DELEGATE: self._on_delegate,
            wire.DELEGATE_RESULT: self._on_delegate_result,
            wire.EVENT: self._on_event,
            wire.HEARTBEAT: self._on_heartbeat,
            wire.READY: self._on_ready,
            wire.START_ERROR: self._on_start_error,
            wire.TURN_UPDATE: self._on_turn_update,
            wire.CONNECTOR_EVENT: self._on_connector_event,
            wire.CONTROL: self._on_agent_control,
            wire.CONTROL_REPLY: self._on_control_reply,
            wire.RESTART_REQUEST: self._on_restart_request,
            wire.SHUTDOWN_ACK: self._on_shutdown_ack,
            wire.APPROVAL_REQUEST: self._on_approval_request,
            wire.TRACE_CANCEL: self._on_trace_cancel,
        }
        return {kind: {t: handlers[t] for t in sends} for kind, sends in SENDS.items()}

    def _on_agent_message(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        slot = self.supervisor.slots.get(name)
        if slot is None:  # its agent left the swarm in a reload
            self._refusals.warning(
                "message from an unknown peer dropped", name, sender=name, type=env.type
            )
            return
        handler = self._handlers[slot.kind].get(env.type)
        if handler is None:
            self._drop_unexpected(name, slot.kind, env.type)
            return
        self.supervisor.touch(name)
        handler(name, identity, env, frame)

    def _drop_unexpected(self, name: str, sender_kind: ProcessKind, kind: str) -> None:
        what = "message type not allowed for its sender dropped"
        if kind not in wire.MESSAGES:
            what = "dropped message of unknown type"
        self._refusals.warning(
            what, f"{name}/{kind}", sender=name, senderKind=sender_kind, type=kind
        )

    def _on_delegate(self, name: str, identity: bytes, env: wire.Envelope, frame: bytes) -> None:
        self.router.delegate(Requester("agent", identity, env.correlation_id), env)

    def _on_delegate_result(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        self.router.result(env, name)
        self.supervisor.note_success(name)
        self.supervisor.set_busy(name, self.router.in_flight(name) > 0)

    def _on_event(self, name: str, identity: bytes, env: wire.Envelope, frame: bytes) -> None:
        self.router.event(env, frame)

    def _on_heartbeat(self, name: str, identity: bytes, env: wire.Envelope, frame: bytes) -> None:
        # `touch` above is what a heartbeat is for; an agent's may carry its counts.
        if self._usage is not None and len(env.payload) > 1:
            process = self.supervisor.slots[name].process
            beat = wire.decode_payload(env, wire.Heartbeat)
            self._usage.report(name, beat, process.pid if process is not None else None)

    def _on_ready(self, name: str, identity: bytes, env: wire.Envelope, frame: bytes) -> None:
        ready = wire.decode_payload(env, wire.Ready)
        if ready.protocol_version != wire.PROTOCOL_VERSION:
            self._log.error("agent speaks another protocol version", agent=name)
            return
        admitted = self._admitted.get(identity)
        slot = self.supervisor.slots[name]
        if admitted is None or not admitted.speaks_for(slot):
            # e.g. a process that has exited since: its slot has no process, or another
            self._refusals.warning("ready from a gone process dropped", name, agent=name)
            return
        self.supervisor.mark_ready(name, ready.pid)

    def _on_start_error(self, name: str, identity: bytes, env: wire.Envelope, frame: bytes) -> None:
        error = wire.decode_payload(env, wire.ErrorInfo)
        self.supervisor.mark_start_error(name, error.message)

    def _on_turn_update(self, name: str, identity: bytes, env: wire.Envelope, frame: bytes) -> None:
        self._forward_update(env)

    def _on_connector_event(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        self.connections.on_event(name, identity, env)

    def _on_agent_control(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        command = wire.decode_payload(env, wire.Control)
        reply = self.instances.handle(name, command, self.router.agents)
        if isinstance(reply.result, wire.Spawned):
            self.supervisor.ensure_running(reply.result.target)
        answer = wire.encode(
            wire.CONTROL_REPLY, wire.ORCHESTRATOR, name, reply, correlation_id=env.correlation_id
        )
        self.agents.send([identity, answer])

    def _on_control_reply(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        if not self.agent_calls.on_reply(env):
            self._log.debug("late control_reply dropped", sender=name)

    def _on_restart_request(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        reason = wire.decode_payload(env, wire.RestartRequest).reason
        self._log.warning("swarm restart requested by an agent", agent=name, reason=reason)
        self._tasks.spawn(self.reload(restart_all=True), name="restart requested by an agent")

    def _on_approval_request(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        self.approvals.request(name, wire.decode_payload(env, wire.ApprovalRequest))

    def _on_trace_cancel(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        trace_id = wire.decode_payload(env, wire.TraceCancel).trace_id
        self._tasks.spawn(
            self._cancel_trace_for(name, identity, env.correlation_id, trace_id),
            name="cancel asked by a connector",
        )

    async def _cancel_trace_for(
        self, name: str, identity: bytes, correlation_id: str | None, trace_id: str
    ) -> None:
        """A connector may cancel only a trace that one of its own events started and that
        is still open: a webhook caller cannot reach other callers' turns."""
        turns: list[wire.CancelledTurn] = []
        if self.router.started(Requester("connector", identity, None), trace_id):
            turns = await self._cancel(wire.TurnCancelArgs(trace_id=trace_id), self.agent_names)
            self._log.info("cancel requested by a connector", connection=name, cancelled=len(turns))
        answer = wire.encode(
            wire.TRACE_CANCELLED,
            wire.ORCHESTRATOR,
            name,
            wire.Cancelled(turns),
            correlation_id=correlation_id,
        )
        self._send_to_peer(identity, answer)

    def _on_shutdown_ack(
        self, name: str, identity: bytes, env: wire.Envelope, frame: bytes
    ) -> None:
        self._log.debug("shutdown acknowledged", agent=name)

    def _forward_update(self, env: wire.Envelope) -> None:
        """Streamed text / tool progress of a turn, to a CLI client waiting on it."""
        pending = self.router.pending.get(env.correlation_id or "")
        if pending is None:
            return
        requester = pending.requester
        if requester.channel == "local":  # `goondan run --input`
            if self.on_update is not None:
                self.on_update(wire.decode_payload(env, wire.TurnUpdate))
            return
        if requester.channel != "control":
            return  # only a terminal shows these; agents and connectors get the answer
        forwarded = msgspec.structs.replace(env, correlation_id=requester.correlation_id)
        try:
            self.control.send([requester.identity, wire.encode_envelope(forwarded)])
        except Unroutable:
            pass  # the client left; its answer will be dropped the same way

    def _send_to_peer(self, identity: bytes, frame: bytes) -> None:
        try:
            self.agents.send([identity, frame])
        except Unroutable:
            self._log.info("peer gone; message dropped", peer=identity.decode(errors="replace"))

    def _agent_ready(self, name: str) -> None:
        if self.supervisor.slots[name].kind == "connector":
            return
        self.router.agent_ready(name)
        self.supervisor.set_busy(name, self.router.in_flight(name) > 0)

    def _agent_exited(self, exit: Exit) -> None:
        name, crashed = exit.agent, exit.crashed
        if exit.kind == "connector":
            if exit.start_error is not None:
                self._log.error("connector cannot start", connection=name, error=exit.start_error)
            elif crashed and name in self.connections.connections:
                self.supervisor.respawn(name)
            return
        if exit.start_error is not None:
            self.router.fail_waiting(
                name, ErrorCode.E_AGENT_START, f"agent '{name}' cannot start: {exit.start_error}"
            )
            return
        if crashed and not exit.was_ready and exit.startup_crashes >= 2:
            # Dies before it is ready, again: don't let the requests wait for a fix.
            self.router.fail_waiting(
                name,
                ErrorCode.E_AGENT_CRASHED,
                f"agent '{name}' keeps crashing during start-up (exit code {exit.code}, "
                f"{exit.startup_crashes} times in a row); see the orchestrator's log",
            )
        code = ErrorCode.E_AGENT_CRASHED if crashed else ErrorCode.E_AGENT_STOPPED
        waiting = self.router.agent_gone(
            name,
            code,
            f"agent '{name}' {'crashed' if crashed else 'stopped'} while handling the request",
        )
        if crashed or waiting:
            self.supervisor.respawn(name)

    # -- control socket ----------------------------------------------------------------------

    def _control_socket_error(self, identity: bytes | None, reason: str) -> None:
        peer = identity.decode(errors="replace") if identity is not None else None
        self._log.warning("dropped a connection to control.sock", peer=peer, reason=reason)

    def _accept_input(self, requester: Requester, env: wire.Envelope, frame: bytes) -> None:
        """Journal a `goondan send` input, then route it: at once, or with `--durability
        fsync` once its fsync (in a thread, shared with the inputs meanwhile) has returned."""
        request_id = self.router.new_request_id()

        def route() -> None:
            if self.router.delegate(requester, env, request_id) is None:
                self._journal_done(request_id)  # answered at once with an error

        def refuse(exc: StorageError) -> None:
            self._log.error("input refused: journal write failed", error=str(exc))
            self.router.refuse(requester, env, exc.code, str(exc))

        try:  # written before it is routed: no process crash from now on loses it
            if self._inputs_durable_first:
                durable = self.journal.accept_durably(request_id, frame)
                self.journal.when_durable(durable, request_id, route, refuse)
                return
            self.journal.accept(request_id, frame)
        except StorageError as exc:
            refuse(exc)
            return
        route()

    def _on_control_frames(self, frames: list[bytes]) -> None:
        if len(frames) != 2:
            self._log.warning("dropped control message with unexpected frames", count=len(frames))
            return
        identity, frame = frames
        try:
            env = wire.decode(frame)
            if env.type == wire.DELEGATE:
                self._accept_input(Requester("control", identity, env.correlation_id), env, frame)
            elif env.type == wire.CONTROL:
                command = wire.decode_payload(env, wire.Control)
                if command.command in ("approve", "deny"):
                    command = with_decider(command, self.control.peer_uid(identity))
                self._tasks.spawn(
                    self._answer_control(identity, env.correlation_id, command),
                    name=f"control {command.command}",
                )
            else:
                self._refusals.warning(
                    "dropped control message of unknown type", env.type, type=env.type
                )
        except wire.MalformedFrame as exc:
            self._log.warning("dropped malformed control frame", error=str(exc))
        except Exception:
            self._log.exception("failed to handle control message")

    async def _answer_control(
        self, identity: bytes, correlation_id: str | None, command: wire.Control
    ) -> None:
        reply = await self.commands.run(command)
        frame = wire.encode(
            wire.CONTROL_REPLY, wire.ORCHESTRATOR, "cli", reply, correlation_id=correlation_id
        )
        try:
            self.control.send([identity, frame])
        except Unroutable:
            self._log.info("control client gone before its answer", command=command.command)

    async def _cmd_approvals(self, args: wire.ApprovalsArgs) -> wire.Approvals:
        return self.approvals.waiting()

    async def _cmd_approve(self, args: wire.DecideArgs) -> wire.Decided:
        return self.approvals.decide("approved", args)

    async def _cmd_deny(self, args: wire.DecideArgs) -> wire.Decided:
        return self.approvals.decide("denied", args)

    async def _cmd_status(self, args: wire.StatusArgs) -> wire.Status:
        return self.status()

    async def _cmd_stop(self, args: wire.StopArgs) -> wire.Stopping:
        self._log.info("stop requested by the control socket")
        asyncio.get_running_loop().call_soon(self.request_stop)
        return wire.Stopping()

    async def _cmd_restart(self, args: wire.RestartArgs) -> wire.Reloaded | wire.Restarted:
        agent = args.agent
        if agent is None:
            result = await self.reload()
            if not result.reloaded:
                raise CommandError(ErrorCode.E_CONFIG, "\n".join(result.errors))
            return result
        if agent not in self.supervisor.slots:
            known = ", ".join(sorted(self.supervisor.slots))
            raise CommandError(
                ErrorCode.AGENT_NOT_FOUND, f"no agent '{agent}' in this swarm ({known})"
            )
        await self.restart_agent(agent, fresh=args.fresh)
        return wire.Restarted([agent], args.fresh)

    async def _cmd_instance_delete(self, args: wire.InstanceDeleteArgs) -> wire.Deleted:
        key = args.instance_key
        try:
            storage_name(key)
        except BadInstanceKey as exc:
            raise CommandError(exc.code, str(exc)) from exc
        asked = args.swarm
        ours = storage_name(self.swarm.name)
        swarms = [ours] if asked in (None, self.swarm.name, ours) else []
        swarms += [s for s in self.paths.stored_swarms(key) if asked in (None, s)]
        deleted = []
        for swarm in dict.fromkeys(swarms):  # ours first: its agents may hold the instance
            running = [n for n in self.agent_names if swarm == ours and self.supervisor.is_ready(n)]
            found = await delete_instance(
                self.paths,
                swarm,
                key,
                workdir=args.workdir,
                running_agents=running,
                calls=self.agent_calls,
                timeout_s=self.settings.daemon.instance_drop_timeout_s,
            )
            if found:
                deleted.append(f"{swarm}/{storage_name(key)}")
        if not deleted:
            raise CommandError(
                ErrorCode.INSTANCE_NOT_FOUND, f"no instance '{key}' under {self.paths.root}"
            )
        self.instances.forget(key)
        self._log.info("instance deleted", instanceKey=key, deleted=deleted)
        return wire.Deleted(deleted)

    async def _cmd_cancel(self, args: wire.CancelArgs) -> wire.Cancelled:
        if args.agent is not None and args.agent not in self.router.agents:
            known = ", ".join(sorted(self.router.agents))
            raise CommandError(
                ErrorCode.AGENT_NOT_FOUND, f"no agent '{args.agent}' in this swarm ({known})"
            )
        if not args.all and (args.agent, args.instance_key, args.trace_id) == (None, None, None):
            raise CommandError(
                ErrorCode.E_BAD_REQUEST, "say which turns: --agent, --instance, --trace or --all"
            )
        names = [args.agent] if args.agent is not None else self.agent_names
        turns = await self._cancel(wire.TurnCancelArgs(args.instance_key, args.trace_id), names)
        self._log.info("cancel requested by the control socket", cancelled=len(turns))
        return wire.Cancelled(turns)

    async def _cmd_logs_flush(self, args: wire.LogsFlushArgs) -> wire.Flushed:
        """Every running agent (or those `args.agents` names) writes the runtime events it
        holds (`goondan logs` asks before it reads). An agent that does not answer in time is
        left out of the result."""
        wanted = set(args.agents or self.agent_names)
        names = [n for n in self.agent_names if n in wanted and self.supervisor.is_ready(n)]
        flush, wait_s = wire.control("events.flush"), args.wait_ms / 1000
        replies = await asyncio.gather(
            *(self.agent_calls.call(name, flush, wait_s) for name in names)
        )
        flushed = [n for n, reply in zip(names, replies, strict=True) if reply.ok]
        return wire.Flushed(flushed)

    async def _cancel(
        self, args: wire.TurnCancelArgs, names: list[str]
    ) -> list[wire.CancelledTurn]:
        return await cancel_turns(
            args,
            names,
            self.supervisor.is_ready,
            self.router,
            self.agent_calls,
            self.settings.daemon.instance_drop_timeout_s,
        )

    def status(self) -> wire.Status:
        return wire.Status(
            pid=os.getpid(),
            swarm=self.swarm.name,
            bundle=str(self.bundle.root),
            entry_agent=self.entry_agent,
            started_at=self.started_at,
            state_root=str(self.paths.root),
            processes=self.supervisor.table(),
        )


def _answer_text(answer: wire.DelegateResult | None) -> str | None:
    if answer is None:
        return None
    if answer.status == "ok":
        return answer.response or ""
    error = answer.error
    return f"{error.code}: {error.message}" if error else "unknown error"


def _raise_open_files_limit() -> int:
    """Raise the soft limit on open files to the hard one; returns the limit now in force.

    The daemon holds a connection per agent and each agent two files per loaded conversation,
    so the usual soft limit (1024, systemd's default too) is what a busy swarm hits first. The
    hard limit is the administrator's ceiling (`LimitNOFILE=`); agents inherit the soft one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    ceiling = 1 << 20 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < ceiling:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (ceiling, hard))
            soft = ceiling
        except (ValueError, OSError):  # above the kernel's nr_open: keep what we have
            pass
    return soft


def _freeze_long_lived() -> None:
    """Move what startup (or a reload) built into gc's permanent generation.

    The bundle, the imported modules and the process tables live as long as the daemon, yet
    every full collection walked them all, a pause in routing that could come at any moment
    under load (docs/performance.md, figure 7). Frozen, they are never traversed; what routing
    allocates later is still collected as before."""
    gc.collect()
    gc.freeze()


def _span_export(run_dir: Path) -> SpanExport | None:
    """Span export when OTEL_TRACES_EXPORTER asks for it; a run without it imports nothing of
    OpenTelemetry's, nor our exporter."""
    if not os.environ.get("OTEL_TRACES_EXPORTER"):
        os.environ.pop(SPAN_SOCKET_ENV, None)  # only ever ours, never inherited
        return None
    from orchestrator.otel_export import start_span_export

    return start_span_export(run_dir)


def _router(spans: SpanExport | None, *args: Any, **kwargs: Any) -> Router:
    """The router; with span export on, the one that also records each request's span."""
    if spans is None:
        return Router(*args, **kwargs)
    from orchestrator.otel_export import TracedRouter

    return TracedRouter(spans, *args, **kwargs)
