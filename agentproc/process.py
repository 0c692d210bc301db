"""The AgentProcess: one per agent, many instances inside, all traffic via the orchestrator."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import structlog

from agentproc.approvals import ApprovalWaits
from agentproc.counters import COUNTERS
from agentproc.heartbeat import Heartbeat
from agentproc.inline_syncs import InlineSyncs
from agentproc.instance import Instance
from agentproc.instance_queues import InstanceQueues
from agentproc.log_limit import LogLimit
from agentproc.messages import Message
from agentproc.peers import PeerClient, TurnRuntime
from agentproc.runtime_events import RuntimeEventLog, new_trace_id
from agentproc.settle_schedule import SettleSchedule, phase_of
from agentproc.spare_files import SpareFiles
from agentproc.turn import (
    AgentDefinition,
    TurnCancel,
    TurnInput,
    UpdateSink,
    find_request,
    run_turn,
)
from goondan.files import file_fsync_syncs_new_entries
from goondan.paths import (
    EVENTS_SUFFIX,
    BadInstanceKey,
    StatePaths,
    StorageError,
    delete_conversation,
    instance_dir_text,
    storage_name,
)
from goondan.settings import DEFAULTS, Settings
from ipc import wire, zmtp
from ipc.credential import properties
from ipc.dealer import Dealer
from ipc.error_codes import ErrorCode

# After an answer, the spares are made again this much later, once the answer is on its way,
# one new inode per wake-up, each this long after the one before.
SPARES_REFILL_DELAY_S = 0.003


class Job(msgspec.Struct, frozen=True):
    """One unit of work for an instance: a turn, answered when `correlation_id` is set."""

    input: str
    instance_key: str
    source: wire.Source
    call_chain: tuple[str, ...]
    trace_id: str
    request_id: str = ""
    correlation_id: str | None = None
    reply_to: str = ""
    parent_span_id: str | None = None  # the requester's span (its tool call), for traces
    metadata: dict[str, Any] = {}  # from the request (event name, properties, toolPolicy)


class Drop(msgspec.Struct, frozen=True):
    """Queued work for an instance being deleted: forget it and remove its files, then tell
    `reply_to` (queued, so a running turn of the instance finishes first)."""

    reply_to: str
    correlation_id: str | None


class Settle(msgspec.Struct, frozen=True):
    """Queued work for a quiet instance: sync its conversation (in a thread: fsync blocks),
    then unload it."""


class AgentProcess:
    def __init__(
        self,
        definition: AgentDefinition,
        *,
        swarm: str,
        catalog: dict[str, Any],
        paths: StatePaths,
        endpoint: str,
        credential: bytes | None = None,
        settings: Settings = DEFAULTS,
        inline_syncs: InlineSyncs | None = None,
    ) -> None:
        """`settings.storage.durability`: "os" writes each conversation event to the OS before
        going on (safe from a process crash); "fsync" also fsyncs it, a new conversation's
        directory entries, extension state and long-running tool records before going on (safe
        from power loss, slower). Past `settings.agent.max_loaded_instances` (each instance
        holds two open files), the least recently used are synced and unloaded.
        `endpoint` is the orchestrator's ROUTER (`ipc://`); `credential` is presented when
        connecting (the orchestrator admits only the processes it launched). `inline_syncs`:
        where quiet instances' fsyncs run (default: on the loop while the disk is fast)."""
        self.definition = definition
        self.name = definition.name
        self.swarm = swarm
        self.catalog = catalog
        self._dirs = paths.swarm(swarm)
        self._instances_text = str(self._dirs.instances)
        self.log = structlog.get_logger().bind(agent=self.name)
        self.channel = Dealer(
            endpoint,
            self.name,
            self.on_frames,
            on_disconnect=self._disconnected,
            properties=properties(credential),
        )
        agent, storage = settings.agent, settings.storage
        self.approvals = definition.approvals = ApprovalWaits(self.name, self._send)
        self.peers = PeerClient(
            self.name,
            self._send,
            request_timeout_ms=settings.daemon.request_timeout_ms,
            orchestrator_timeout_s=agent.orchestrator_timeout_s,
            backstop_s=agent.request_backstop_s,
        )
        self.queues: InstanceQueues[Job | Settle | Drop] = InstanceQueues(
            self._run_job, max_parked=agent.max_parked_workers
        )
        self._instances: OrderedDict[str, Instance] = OrderedDict()  # least recently used first
        self._running: dict[str, tuple[Job, TurnCancel]] = {}  # instance key -> its turn
        self._max_loaded = agent.max_loaded_instances
        self._inbox_limit = agent.inbox_limit
        # `goondan run --metrics` sets it (agents inherit it): only then do counts travel.
        self._report_counts = bool(os.environ.get("GOONDAN_METRICS"))
        self.heartbeat = Heartbeat(
            settings.heartbeat_interval_s(self._report_counts),
            self._on_heartbeat_tick,
            put_off=not self._report_counts,  # with --metrics, the counts ride on every tick
        )
        self._cancel_wait_s = agent.cancel_wait_s
        self._quiet_s = agent.quiet_s
        self._settles = SettleSchedule(self._quiet_s, self._settle_quiet, phase_of(self.name))
        self._fold_events_bytes = storage.fold_events_bytes
        self.events = RuntimeEventLog(  # every instance's
            self._dirs.agent_dir(self.name),
            rotate_bytes=storage.runtime_events_rotate_bytes,
            flush_after_s=storage.runtime_events_flush_after_s,
            flush_slack_s=storage.runtime_events_flush_slack_s,
            flush_count=storage.runtime_events_flush_count,
        )
        own = self._storage_name = storage_name(self.name)
        self.spares = SpareFiles(  # new conversations' files, made ahead
            self._dirs.spares / own,
            self._dirs.instances,
            own + EVENTS_SUFFIX,
            count=agent.spare_conversations,
        )
        self._spares_refill: asyncio.TimerHandle | None = None
        # Whether a quiet new conversation's fsync makes its directory entries durable too.
        self._fsync_syncs_new_entries = file_fsync_syncs_new_entries(self._dirs.instances)
        self._inline_syncs = inline_syncs or InlineSyncs()
        self._heartbeat_frame = wire.encode(wire.HEARTBEAT, self.name, wire.ORCHESTRATOR)
        self._stop = asyncio.Event()
        self._shutdown: wire.Shutdown | None = None
        self.durability = storage.durability
        self._log_limit = LogLimit()  # for frames we drop: a flood must not flood the log
        self._handlers = self._message_handlers()

    # -- wire --------------------------------------------------------------------------------

    def _send(self, frame: bytes) -> None:
        self.channel.send([frame])
        self.heartbeat.last_sent = time.monotonic()

    def _disconnected(self, reason: str) -> None:
        self.log.warning("lost the orchestrator's socket; reconnecting", reason=reason)

    def on_frames(self, frames: list[bytes]) -> None:
        for frame in frames:
            try:
                self._dispatch(wire.decode(frame))
            except wire.MalformedFrame as exc:
                self._warn_dropped("dropped malformed frame", str(exc))
            except Exception:  # never let one message take the reader down
                self.log.exception("failed to handle a frame")

    def _warn_dropped(self, what: str, error: str) -> None:
        held = self._log_limit.due(what)
        if held is not None:
            self.log.warning(what, error=error, alsoDroppedSinceLastLine=held)

    def _message_handlers(self) -> dict[str, Callable[[wire.Envelope], None]]:
        """`{type: handler}` for the types an agent receives (`wire.received_by("agent")`)."""
        return {
            wire.DELEGATE: self._accept,
            wire.EVENT: self._accept,
            wire.DELEGATE_RESULT: self._on_delegate_result,
            wire.CONTROL_REPLY: self._on_control_reply,
            wire.CONTROL: self._on_control,
            wire.SHUTDOWN: self._on_shutdown,
            wire.APPROVAL_DECISION: self._on_approval_decision,
        }

    def _dispatch(self, env: wire.Envelope) -> None:
        handler = self._handlers.get(env.type)
        if handler is None:
            self._warn_dropped("dropped frame of unknown type", f"{env.type} from {env.from_}")
        else:
            handler(env)

    def _on_delegate_result(self, env: wire.Envelope) -> None:
        result = wire.decode_payload(env, wire.DelegateResult)
        if not self.peers.resolve(env.correlation_id, result):
            self.log.debug("late delegate_result dropped", correlationId=env.correlation_id)

    def _on_control_reply(self, env: wire.Envelope) -> None:
        reply = wire.decode_payload(env, wire.ControlReply)
        if not self.peers.resolve_call(env.correlation_id, reply):
            self.log.debug("late control_reply dropped", correlationId=env.correlation_id)

    def _on_approval_decision(self, env: wire.Envelope) -> None:
        if not self.approvals.on_decision(wire.decode_payload(env, wire.ApprovalDecision)):
            self.log.debug("approval decision for no waiting call dropped")

    def _on_shutdown(self, env: wire.Envelope) -> None:
        self._shutdown = wire.decode_payload(env, wire.Shutdown)
        self._stop.set()

    def _accept(self, env: wire.Envelope) -> None:
        try:
            job = self._job_of(env)
        except wire.MalformedFrame as exc:
            self._refuse_undecodable(env, str(exc))
            return
        self.queues.submit(job.instance_key, job)

    def _refuse_undecodable(self, env: wire.Envelope, problem: str) -> None:
        """A request we cannot read is answered at once, so its requester does not wait out
        its timeout; an event (nobody waits) is only logged."""
        self._warn_dropped(f"dropped {env.type} with an undecodable payload", problem)
        if env.type != wire.DELEGATE or env.correlation_id is None:
            return
        error = wire.ErrorInfo(
            ErrorCode.E_BAD_REQUEST,
            f"agent '{self.name}' could not decode the request: {problem}",
            suggestion="send a delegate payload with input, instanceKey and source",
        )
        result = wire.DelegateResult("error", self.name, error=error)
        frame = wire.encode(
            wire.DELEGATE_RESULT,
            self.name,
            env.from_,
            result,
            correlation_id=env.correlation_id,
            trace_id=env.trace_id,
        )
        self._send(frame)

    def _job_of(self, env: wire.Envelope) -> Job:
        """The turn a delegate or event asks for. Raises `MalformedFrame`."""
        if env.type == wire.DELEGATE:
            d = wire.decode_payload(env, wire.Delegate)
            return Job(
                d.input,
                d.instance_key,
                d.source,
                d.call_chain,
                env.trace_id or new_trace_id(),
                env.correlation_id or "",
                env.correlation_id,
                env.from_,
                env.span_id,
                d.metadata,
            )
        e = wire.decode_payload(env, wire.Event)
        return Job(
            e.input,
            e.instance_key,
            e.source,
            (),
            env.trace_id or new_trace_id(),
            parent_span_id=env.span_id,
            metadata=e.metadata,
        )

    def _on_control(self, env: wire.Envelope) -> None:
        """A command from the orchestrator (`wire.DAEMON_COMMANDS`)."""
        command = wire.decode_payload(env, wire.Control)
        declared = wire.DAEMON_COMMANDS.get(command.command)
        if declared is None:
            error = f"agents do not know '{command.command}'"
            self._refuse_control(env, wire.ErrorInfo(ErrorCode.E_UNKNOWN_COMMAND, error))
            return
        try:
            args = wire.decode_args(command, declared.args)
        except wire.BadArgs as exc:
            self._refuse_control(env, wire.ErrorInfo(ErrorCode.E_BAD_REQUEST, str(exc)))
            return
        result: wire.ControlResult
        if isinstance(args, wire.InstanceDropArgs):  # answered after the key's queued turns
            self.queues.submit(args.instance_key, Drop(env.from_, env.correlation_id))
            return
        if isinstance(args, wire.TurnCancelArgs):
            result = wire.Cancelled(self._cancel_turns(args))
        else:  # events.flush: `goondan logs` is about to read this agent's events
            self.events.flush()
            result = wire.Flushed([self.name])
        self._answer_control(env.from_, env.correlation_id, wire.ControlReply(True, result))

    def _refuse_control(self, env: wire.Envelope, error: wire.ErrorInfo) -> None:
        self._answer_control(env.from_, env.correlation_id, wire.ControlReply(False, error=error))

    def _cancel_turns(self, args: wire.TurnCancelArgs) -> list[wire.CancelledTurn]:
        """Cancel the running turns matching `args` (each ends as cancelled and answers its
        requester), and answer the matching queued ones without running them."""

        def matches(job: Job | Settle | Drop) -> bool:
            return (
                isinstance(job, Job)
                and (args.instance_key is None or job.instance_key == args.instance_key)
                and (args.trace_id is None or job.trace_id == args.trace_id)
                and (args.request_id is None or job.request_id == args.request_id)
            )

        cancelled: list[wire.CancelledTurn] = []
        for key, (job, handle) in list(self._running.items()):
            if matches(job) and not handle.requested:
                handle.cancel()
                cancelled.append(wire.CancelledTurn(self.name, key, job.trace_id, job.request_id))
        for key, queued in self.queues.remove_queued(matches):
            assert isinstance(queued, Job)
            error = wire.ErrorInfo(
                ErrorCode.E_TURN_CANCELLED, "The request was cancelled before its turn began."
            )
            self._reply(queued, wire.DelegateResult("error", self.name, error=error))
            cancelled.append(wire.CancelledTurn(self.name, key, queued.trace_id, queued.request_id))
        if cancelled:
            self.log.info("turns cancelled", count=len(cancelled))
        return cancelled

    def _answer_control(
        self, to: str, correlation_id: str | None, reply: wire.ControlReply
    ) -> None:
        frame = wire.encode(wire.CONTROL_REPLY, self.name, to, reply, correlation_id=correlation_id)
        self._send(frame)

    def _drop(self, key: str, job: Drop) -> None:
        instance = self._instances.pop(key, None)
        if instance is not None:
            instance.close(save=False)
        existed = delete_conversation(self._dirs.conversation_dir(key, self.name))
        self.log.info("instance deleted", instanceKey=key)
        reply = wire.ControlReply(True, wire.Dropped(existed or instance is not None))
        self._answer_control(job.reply_to, job.correlation_id, reply)

    # -- work --------------------------------------------------------------------------------

    def _instance(self, key: str) -> Instance:
        instance = self._instances.get(key)
        if instance is not None:
            self._instances.move_to_end(key)
            return instance
        key_text = instance_dir_text(self._instances_text, key)  # for the rename and the look
        events_fd = None
        try:
            events_fd = self.spares.place(key_text)  # the usual new conversation
            new = events_fd is not None or not os.path.isdir(key_text)
        except FileExistsError:
            new = False
        instance = self._instances[key] = Instance(
            key,
            Path(key_text, self._storage_name),  # conversation_dir, without naming us again
            workdir=self._dirs.workdir(key),
            fsync_events=self.durability == "fsync",
            events=self.events,
            inbox_limit=self._inbox_limit,
            # No directory for the key: nothing stored to look for.
            new=new,
            spares=self.spares,
            events_fd=events_fd,
            fsync_syncs_new_entries=self._fsync_syncs_new_entries,
        ).load()
        self._settles.touched(time.monotonic())
        if len(self._instances) > self._max_loaded:
            self._unload_least_recent()
        return instance

    def _unload_least_recent(self) -> None:
        """Queue a settle (sync, then unload) for the least recently used instances past the
        limit. A key with work queued is skipped but counted: its turn runs first, or a settle
        is already on its way."""
        excess = len(self._instances) - self._max_loaded
        for key in self._instances:
            if excess <= 0:
                return
            if not self.queues.is_busy(key):
                self.queues.submit(key, Settle())
            excess -= 1

    def _deliver_async(self, key: str, message: Message) -> None:
        """An async request's answer: it joins the conversation before the next step/turn."""
        self._instance(key).deliver(message)

    async def _run_job(self, key: str, job: Job | Settle | Drop) -> None:
        if isinstance(job, Drop):
            self._drop(key, job)
            return
        try:
            instance = self._instance(key)
        except (BadInstanceKey, StorageError) as exc:  # the requester hears why
            self.log.warning("instance cannot be stored", instanceKey=key, error=str(exc))
            if isinstance(job, Job):
                error = wire.ErrorInfo(exc.code, str(exc))
                self._reply(job, wire.DelegateResult("error", self.name, error=error))
            return
        conversation = instance.conversation
        if isinstance(job, Settle):
            # Queued like a turn, so no turn of this instance runs meanwhile; on the loop while
            # the disk is fast, else in a thread, so that the other instances (and heartbeats)
            # go on while it syncs (`agentproc/inline_syncs.py`).
            if self._inline_syncs.inline():
                self._inline_syncs.run(conversation.sync)
            else:
                await asyncio.to_thread(conversation.sync)
            if instance.can_unload() and not self.queues.has_queued(key):
                # Quiet and durable: free its memory and files; a later turn reloads it.
                self._instances.pop(key, None)
                instance.close()
            return
        replay = find_request(conversation, job.request_id)
        if replay is not None and replay.answer is not None:
            # Answered before the crash or restart, but the answer never arrived: resend it.
            self.log.info("replayed request already answered", requestId=job.request_id)
            self._reply(job, wire.DelegateResult("ok", self.name, replay.answer, instance_key=key))
            return
        if replay is not None and replay.superseded:
            self.log.info(
                "replayed request runs again: other turns followed it", requestId=job.request_id
            )
        runtime = TurnRuntime(
            self.peers,
            instance_key=key,
            trace_id=job.trace_id,
            call_chain=job.call_chain,
            catalog=self.catalog,
            deliver_async=lambda message: self._deliver_async(key, message),
        )
        turn_input = TurnInput(
            job.input,
            key,
            job.trace_id,
            f"{job.source.kind}:{job.source.name}",
            job.request_id,
            parent_span_id=job.parent_span_id,
            metadata=job.metadata,
            call_chain=job.call_chain,
        )
        restart_reason: str | None = None
        task = asyncio.current_task()
        assert task is not None
        handle = TurnCancel(task)
        cancelling = task.cancelling()
        self._running[key] = (job, handle)
        try:
            outcome = await run_turn(
                self.definition,
                instance,
                turn_input,
                runtime,
                instance.workdir,
                # A turn others have followed since is run again from its input: resuming it
                # would continue after their messages, not its own.
                resume=replay is not None and not replay.superseded,
                updates=self._updates_for(job),
                cancel=handle,
            )
            restart_reason = outcome.restart_reason
            if outcome.error_code is None:
                result = wire.DelegateResult("ok", self.name, outcome.text, instance_key=key)
            else:
                error = wire.ErrorInfo(outcome.error_code, outcome.text)
                result = wire.DelegateResult("error", self.name, error=error, instance_key=key)
        except StorageError as exc:  # the disk is full or failing: the turn fails, not us
            self.log.error("turn failed: could not store it", instanceKey=key, error=str(exc))
            # Memory holds what the disk does not: the next turn reloads it from the disk.
            self._instances.pop(key, None)
            instance.conversation.drop_unwritten()
            instance.close(save=False)
            error = wire.ErrorInfo(exc.code, str(exc))
            result = wire.DelegateResult("error", self.name, error=error, instance_key=key)
        except Exception as exc:  # a bug in the loop: answer with an error, keep serving
            self.log.exception("turn failed", instanceKey=key)
            error = wire.ErrorInfo(ErrorCode.E_TURN_FAILED, f"{type(exc).__name__}: {exc}")
            result = wire.DelegateResult("error", self.name, error=error, instance_key=key)
        finally:
            del self._running[key]
        if handle.requested and task.cancelling() > cancelling:
            # A middleware swallowed the cancel: it must not count against this worker's next
            # job (whose deadlines compare cancel counts).
            task.uncancel()
        self._reply(job, result)
        instance.last_turn_at = time.monotonic()
        # The turn's events are already with the OS, so the answer is safe from a crash. An
        # fsync would cost more than the turn itself: it waits until the instance goes quiet
        # (`_settle_quiet`, below) or the agent stops; with `durability: fsync` every event
        # was fsync'd before the loop went on. The fold only compacts (it rewrites the whole
        # conversation, three fsyncs with a new inode): it waits until the events grow large,
        # whatever the durability.
        if conversation.events_bytes > self._fold_events_bytes:
            await asyncio.to_thread(conversation.fold)
        if restart_reason is not None:
            request = wire.RestartRequest(restart_reason)
            self._send(wire.encode(wire.RESTART_REQUEST, self.name, wire.ORCHESTRATOR, request))
        self._after_answer(instance.last_turn_at)

    def _after_answer(self, now: float) -> None:
        """The agent's own upkeep, done while it is awake for a turn anyway: at 1,000 agents a
        wake-up of a cold agent process costs ~200 µs of CPU, so a busy agent is woken for
        none of it (docs/performance.md, "Settles at a turn's end")."""
        self.events.write_if_due()
        self._settles.touched(now)  # other instances gone quiet, if due
        self.heartbeat.answered(now)
        if self.spares.wanted() and self._spares_refill is None:
            if self.spares.file_is_next():
                # A file alone (the conversation's key had its directory): cheaper than the
                # wake-up a timer would cost ("Spares' files made at once").
                self.spares.make_one()
            if self.spares.wanted():
                # Not now: the answer just sent woke its reader, which a kernel without
                # preemption may run on this CPU only once we block, and a spare's directory
                # is ~200 µs of file system work on a cold cache ("Spares made a little later").
                self._refill_spares_later()

    def _refill_spares_later(self) -> None:
        self._spares_refill = asyncio.get_running_loop().call_later(
            SPARES_REFILL_DELAY_S, self._refill_spares
        )

    def _refill_spares(self) -> None:
        """One inode of the spares, then the next a little later: a request that arrives
        meanwhile waits for one inode, not for all (docs/performance.md, "Spares one inode
        at a time")."""
        self._spares_refill = None
        if self.spares.make_one() and self.spares.wanted():
            self._refill_spares_later()

    def _updates_for(self, job: Job) -> UpdateSink | None:
        """Streamed text and tool progress go to the requester, under the request's id."""
        if job.correlation_id is None:
            return None

        def send(kind: str, text: str | None, data: dict[str, Any]) -> None:
            update = wire.TurnUpdate("text" if kind == "text" else "progress", text, data)
            self._to_requester(job, wire.TURN_UPDATE, update)

        return send

    def _reply(self, job: Job, result: wire.DelegateResult) -> None:
        if job.correlation_id is None:
            return  # an event: nobody waits for an answer
        try:
            self._to_requester(job, wire.DELEGATE_RESULT, result)
        except zmtp.MessageTooLarge as exc:  # the requester hears why, not its timeout
            self.log.warning("answer too large to send; an error goes instead", error=str(exc))
            error = wire.ErrorInfo(ErrorCode.MESSAGE_TOO_LARGE, f"the answer is too large: {exc}")
            result = wire.DelegateResult(
                "error", self.name, error=error, instance_key=result.instance_key
            )
            self._to_requester(job, wire.DELEGATE_RESULT, result)

    def _to_requester(self, job: Job, kind: str, payload: Any) -> None:
        self._send(
            wire.encode(
                kind,
                self.name,
                job.reply_to,
                payload,
                correlation_id=job.correlation_id,
                trace_id=job.trace_id,
            )
        )

    # -- life cycle --------------------------------------------------------------------------

    async def run(self) -> int:
        self.channel.start()
        self._send(
            wire.encode(
                wire.READY,
                self.name,
                wire.ORCHESTRATOR,
                wire.Ready(wire.PROTOCOL_VERSION, os.getpid(), self.name),
            )
        )
        self.log.debug("agent ready", pid=os.getpid())
        self.heartbeat.start()
        await self._stop.wait()
        self.heartbeat.stop()
        self._settles.close()
        self.approvals.park_all()  # a human may take hours: their turns resume after a restart
        grace = self._shutdown.grace_period_ms / 1000 if self._shutdown else 30.0
        try:
            async with asyncio.timeout(grace):
                await self.queues.wait_idle()
        except TimeoutError:
            self.log.warning("shutdown grace period over; stopping unfinished turns")
            self.queues.cancel_all()
            try:  # let the cancelled turns answer their tool calls and write their events
                async with asyncio.timeout(self._cancel_wait_s):
                    await self.queues.wait_idle()
            except TimeoutError:
                pass
        # The parked workers end here; a turn that ignored its cancellation ends with the
        # process. Async requests still waiting are cancelled (their instances hear of it).
        if self.queues.busy:
            self.queues.cancel_all()
        else:
            await self.queues.aclose()
        await self.peers.async_requests.close()
        if self.definition.bus is not None:
            await self.definition.bus.aclose()  # extensions' async event handlers
        for instance in self._instances.values():
            instance.close()
        if self._spares_refill is not None:
            self._spares_refill.cancel()
        self.spares.close()
        self.events.close()
        self.definition.executor.close()
        # The last turns' counts, before the process is gone.
        if self._report_counts and COUNTERS.changed:
            self._send_counts()
        if self._shutdown is not None:
            self._send(wire.encode(wire.SHUTDOWN_ACK, self.name, wire.ORCHESTRATOR))
        await self.channel.flush(timeout_s=1.0)  # the ack must not die in our outbox
        self.channel.close()
        stuck = self.definition.executor.abandoned
        if stuck:
            # A timed-out sync tool call still runs in its thread, and the interpreter would
            # wait for it at exit, until the orchestrator's SIGKILL. Everything is saved and
            # acknowledged by now, so leave at once.
            self.log.warning("exiting with timed-out tool calls still running", tools=sorted(stuck))
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)
        return 0

    def request_stop(self) -> None:
        """SIGTERM: finish what is running and exit, as for a `shutdown` message."""
        self._stop.set()

    def _settle_quiet(self, now: float) -> float | None:
        """Queue a sync and unload for the instances that changed and then had no turn for
        `quiet_s`; when the next may be due (`SettleSchedule`), None when nothing changed.
        One with a turn running, or whose settle is queued now, is looked at again after
        `quiet_s` (a settle that failed leaves it changed)."""
        quiet_since, again = now - self._quiet_s, now + self._quiet_s
        due: float | None = None
        for key, instance in self._instances.items():
            if not instance.conversation.dirty:
                continue
            if instance.last_turn_at > quiet_since:
                when = instance.last_turn_at + self._quiet_s
            else:
                if not self.queues.is_busy(key):
                    self.queues.submit(key, Settle())
                when = again
            due = when if due is None else min(due, when)
        return due

    def _on_heartbeat_tick(self, now: float) -> None:
        """With `--metrics`, the counts when they changed; else a heartbeat when the agent sent
        nothing for an interval (`agentproc/heartbeat.py`)."""
        if self._report_counts and COUNTERS.changed:
            self._send_counts()
        elif now - self.heartbeat.last_sent >= self.heartbeat.interval_s:
            self._send(self._heartbeat_frame)

    def _send_counts(self) -> None:
        report = COUNTERS.report(os.getpid())
        self._send(wire.encode(wire.HEARTBEAT, self.name, wire.ORCHESTRATOR, report))
