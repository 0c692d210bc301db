"""The life of a request: every `delegate` gets exactly one `delegate_result`.

The router owns the correlation table. It forwards a delegate to its target under an id of its
own (a counter), answers the requester when the target replies, and answers with a structured
error instead when the target is unknown, the call is circular, the request times out, or the
target crashes twice while handling it. Frames for an agent that is not running wait in that
agent's inbox while the supervisor starts it.

It knows nothing of sockets: it talks to an `Outbox` and asks `start_agent` for processes, so
its rules are tested directly.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import Literal, Protocol

import msgspec
import structlog

from goondan.settings import DEFAULTS, DaemonSettings
from ipc import wire, zmtp
from ipc.error_codes import ErrorCode
from orchestrator.throttled_log import ThrottledLog
from orchestrator.timeouts import Timeouts

Channel = Literal["agent", "control", "local", "replay", "connector"]


class Requester(msgspec.Struct, frozen=True):
    channel: Channel
    identity: bytes  # the ZeroMQ identity on that channel
    correlation_id: str | None


class _Keyed(msgspec.Struct, frozen=True, rename="camel"):
    """The instance key of a `Delegate` payload, for cancelling by instance."""

    instance_key: str = ""


def _instance_key(pending: InFlight) -> str:
    return wire.decode_payload(wire.decode(pending.frame), _Keyed).instance_key


class Outbox(Protocol):
    def to_agent(self, name: str, frame: bytes) -> bool:
        """Send to a running agent; False when it cannot be routed (the process is gone)."""
        ...

    def to_requester(self, requester: Requester, frame: bytes) -> None: ...


class InFlight:
    """A request in flight: routed to its target under the router's own id, not yet answered."""

    __slots__ = (
        "oid",
        "seq",
        "requester",
        "target",
        "frame",
        "deliveries",
        "delivered",
        "timeout_ms",
        "trace_id",
        "started",
    )

    def __init__(
        self,
        oid: str,
        seq: int,
        requester: Requester,
        target: str,
        frame: bytes,
        trace_id: str | None,
    ) -> None:
        self.oid = oid
        self.seq = seq  # unique in this process, unlike `oid` (the journal's replays reuse it)
        self.requester = requester
        self.target = target
        self.frame = frame
        self.deliveries = 0
        self.delivered = False  # handed to a running process (not waiting in the inbox)
        self.timeout_ms = 0  # set by `Router.delegate`
        self.trace_id = trace_id
        self.started = 0.0  # time.monotonic() at routing, when metrics are on


class Router:
    def __init__(
        self,
        agents: set[str],
        entry_agent: str,
        outbox: Outbox,
        start_agent: Callable[[str], None],
        on_settled: Callable[[InFlight, str], None] | None = None,
        settings: DaemonSettings = DEFAULTS.daemon,
        *,
        measure: bool = False,
    ) -> None:
        """`on_settled(request, outcome)` is told once a request got its one answer or gave up
        (the journal, the metrics): `outcome` is "timeout", "error" for a refused request, and
        with `measure` the answer's status; without it "ok" for every answer (a status is read
        from the answer only for `measure`, which also times each request: `--metrics`).
        `settings`: the default time limit of a request, and how often one is delivered."""
        self.agents = agents
        self.entry_agent = entry_agent
        self._outbox = outbox
        self._start_agent = start_agent
        self._on_settled = on_settled
        self._measure = measure
        self._request_timeout_ms = settings.request_timeout_ms
        self._max_deliveries = settings.max_deliveries
        # Ids are unique across restarts (the journal replays requests under their old id).
        self._boot = secrets.token_hex(3)
        self._ids = itertools.count(1)
        self._seqs = itertools.count(1)
        self.pending: dict[str, InFlight] = {}
        # Watched by (oid, seq), not by the request itself: an answered request's deadline
        # stays in the heap a while, and the request with it would live on into the garbage
        # collector's older generations (at 1,000 agents a collection of them every ~2 s took
        # 3-5 ms of CPU, every route waiting; docs/performance.md, figure 14).
        self._timeouts: Timeouts[tuple[str, int]] = Timeouts(self._is_open, self._expire)
        self._by_target: dict[str, dict[str, None]] = {name: {} for name in agents}
        self._ready: set[str] = set()
        # Frames waiting for the agent's process, with the request they belong to (if any).
        self._inbox: dict[str, deque[tuple[bytes, InFlight | None]]] = {
            name: deque() for name in agents
        }
        self._log = structlog.get_logger().bind(component="router")
        self._refusals = ThrottledLog(self._log)

    # -- requests ----------------------------------------------------------------------------

    def delegate(
        self, requester: Requester, env: wire.Envelope, request_id: str | None = None
    ) -> str | None:
        """Route a `delegate` from an agent, the CLI or the daemon itself.

        Returns the request id it is forwarded under (`request_id` to reuse an old one), or
        None when it was answered at once with an error."""
        target = env.to or self.entry_agent
        try:
            routing = wire.decode_payload(env, wire.DelegateRouting)
        except wire.MalformedFrame as exc:
            self._answer_error(
                requester, target, ErrorCode.IPC_DELIVERY_FAILED, str(exc), env.trace_id
            )
            return None
        if target not in self.agents:
            known = ", ".join(sorted(self.agents))
            self._answer_error(
                requester,
                target,
                ErrorCode.AGENT_NOT_FOUND,
                f"Agent '{target}' is not in this swarm (agents: {known})",
                env.trace_id,
            )
            return None
        if target in routing.call_chain:
            chain = " -> ".join((*routing.call_chain, target))
            self._answer_error(
                requester,
                target,
                ErrorCode.CIRCULAR_CALL_DETECTED,
                f"Circular call detected: {chain}",
                env.trace_id,
            )
            return None
        oid = request_id or self.new_request_id()
        forwarded = msgspec.structs.replace(env, to=target, correlation_id=oid)
        try:
            frame = zmtp.check_size(wire.encode_envelope(forwarded))
        except zmtp.MessageTooLarge as exc:  # the agent could not take it
            self._answer_error(
                requester, target, ErrorCode.MESSAGE_TOO_LARGE, str(exc), env.trace_id
            )
            return None
        pending = InFlight(oid, next(self._seqs), requester, target, frame, env.trace_id)
        pending.timeout_ms = routing.timeout_ms or self._request_timeout_ms
        if self._measure:
            pending.started = time.monotonic()
        self._timeouts.add((oid, pending.seq), pending.timeout_ms / 1000, len(self.pending))
        self.pending[oid] = pending
        self._by_target[target][oid] = None
        pending.deliveries = 1
        self._deliver(target, pending.frame, pending)
        return oid

    def new_request_id(self) -> str:
        """An id for `delegate(request_id=...)`, for a caller that journals the input first."""
        return f"{self._boot}-{next(self._ids)}"

    def refuse(self, requester: Requester, env: wire.Envelope, code: str, message: str) -> None:
        """Answer a `delegate` with an error without routing it (e.g. it could not be
        journaled)."""
        self._answer_error(requester, env.to or self.entry_agent, code, message, env.trace_id)

    def result(self, env: wire.Envelope, sender: str) -> None:
        """A `delegate_result` from agent `sender` for request `correlationId`: the answer,
        when `sender` is the agent the request went to."""
        oid = env.correlation_id or ""
        pending = self.pending.get(oid)
        if pending is None:
            self._log.debug("late or unknown delegate_result dropped", oid=oid)
            return
        if pending.target != sender:  # another agent may not answer for the target
            self._refusals.warning(
                "delegate_result from another agent dropped",
                key=sender,
                sender=sender,
                target=pending.target,
                oid=oid,
            )
            return
        self._finish(oid, _status(env) if self._measure else "ok")
        answer = msgspec.structs.replace(
            env,
            to=pending.requester.identity.decode(errors="replace"),
            correlation_id=pending.requester.correlation_id,
        )
        self._outbox.to_requester(pending.requester, wire.encode_envelope(answer))

    def event(self, env: wire.Envelope, frame: bytes) -> None:
        """Fire and forget: deliver (starting the target if needed), no answer."""
        if env.to not in self.agents:
            self._log.warning("event for an unknown agent dropped", target=env.to, sender=env.from_)
            return
        try:
            zmtp.check_size(frame)
        except zmtp.MessageTooLarge as exc:
            self._log.warning(
                "event too large for its agent dropped", target=env.to, error=str(exc)
            )
            return
        self._deliver(env.to, frame, None)

    # -- agent life cycle (called by the supervisor) -----------------------------------------

    def agent_ready(self, name: str) -> None:
        self._ready.add(name)
        inbox = self._inbox[name]
        while inbox and name in self._ready:
            frame, pending = inbox.popleft()
            if pending is not None and pending.oid not in self.pending:
                continue  # timed out while waiting
            if not self._outbox.to_agent(name, frame):
                inbox.appendleft((frame, pending))
                self._ready.discard(name)
            elif pending is not None:
                pending.delivered = True

    def agent_draining(self, name: str) -> None:
        """The agent is finishing its work before it stops: what comes now waits in its inbox
        for the next process instead of going to one that is about to exit."""
        self._ready.discard(name)

    def has_waiting(self, name: str) -> bool:
        return bool(self._inbox.get(name))

    def set_agents(self, agents: set[str], entry_agent: str) -> None:
        """After a reload: new agents become routable; requests for removed ones fail."""
        for name in agents - self.agents:
            self._by_target[name] = {}
            self._inbox[name] = deque()
        for name in self.agents - agents:
            self.fail_waiting(
                name, ErrorCode.AGENT_NOT_FOUND, f"Agent '{name}' was removed from the swarm"
            )
            self._ready.discard(name)
            del self._by_target[name], self._inbox[name]
        self.agents = set(agents)
        self.entry_agent = entry_agent

    def agent_gone(self, name: str, error_code: str, message: str) -> bool:
        """The process ended (crashed, or was stopped before it finished). Redeliver what it
        was handling once; fail what was redelivered already with `error_code`. Returns True
        when work is waiting for it (the caller should start it)."""
        self._ready.discard(name)
        inbox = self._inbox[name]
        redeliver: list[tuple[bytes, InFlight | None]] = []
        for oid in list(self._by_target[name]):
            pending = self.pending[oid]
            if not pending.delivered:
                continue  # never delivered: it simply waits for the next process
            pending.delivered = False
            if pending.deliveries < self._max_deliveries:
                pending.deliveries += 1
                redeliver.append((pending.frame, pending))
            else:
                self._finish(oid)
                self._answer_error(pending.requester, name, error_code, message, pending.trace_id)
        inbox.extendleft(reversed(redeliver))
        return bool(inbox)

    def fail_waiting(self, name: str, error_code: str, message: str) -> None:
        """The agent cannot start: every request waiting for it gets the reason."""
        self._inbox[name].clear()
        for oid in list(self._by_target[name]):
            pending = self._finish(oid)
            if pending is not None:
                self._answer_error(pending.requester, name, error_code, message, pending.trace_id)

    def fail_all(self, error_code: str, message: str) -> None:
        for name in self.agents:
            self.fail_waiting(name, error_code, message)

    def cancel_waiting(
        self, names: list[str], instance_key: str | None, trace_id: str | None
    ) -> list[wire.CancelledTurn]:
        """Cancel the requests for `names` that no process has yet (waiting in an inbox while
        their agent starts or restarts) and match both filters."""
        cancelled: list[wire.CancelledTurn] = []
        for name in names:
            for oid in list(self._by_target.get(name, ())):
                pending = self.pending[oid]
                if pending.delivered or (trace_id is not None and pending.trace_id != trace_id):
                    continue
                if instance_key is not None and _instance_key(pending) != instance_key:
                    continue
                turn = self.cancel_undelivered(oid)
                if turn is not None:
                    cancelled.append(turn)
        return cancelled

    def cancel_undelivered(self, oid: str) -> wire.CancelledTurn | None:
        """Answer a request still waiting for its agent's process with `E_TURN_CANCELLED`
        (it is skipped when the agent is ready); None if it is not such a request."""
        pending = self.pending.get(oid)
        if pending is None or pending.delivered:
            return None
        self._finish(oid)
        self._answer_error(
            pending.requester,
            pending.target,
            ErrorCode.E_TURN_CANCELLED,
            "The request was cancelled before its turn began.",
            pending.trace_id,
        )
        trace_id = pending.trace_id or ""
        return wire.CancelledTurn(pending.target, _instance_key(pending), trace_id, oid)

    def started(self, requester: Requester, trace_id: str) -> bool:
        """Whether a request of `trace_id` that `requester` (its channel and identity) made is
        still open: what a connector may cancel."""
        return any(
            p.trace_id == trace_id
            and p.requester.channel == requester.channel
            and p.requester.identity == requester.identity
            for p in self.pending.values()
        )

    def in_flight(self, name: str) -> int:
        return len(self._by_target.get(name, ()))

    # -- internals ---------------------------------------------------------------------------

    def _deliver(self, target: str, frame: bytes, pending: InFlight | None) -> None:
        if target in self._ready and not self._inbox[target]:
            if self._outbox.to_agent(target, frame):
                if pending is not None:
                    pending.delivered = True
                return
            self._ready.discard(target)
        self._inbox[target].append((frame, pending))
        self._start_agent(target)

    def _finish(self, oid: str, outcome: str = "error") -> InFlight | None:
        pending = self.pending.pop(oid, None)
        if pending is None:
            return None
        self._by_target[pending.target].pop(oid, None)
        if self._on_settled is not None:
            try:
                self._on_settled(pending, outcome)
            except Exception:  # bookkeeping must not cost the requester its answer
                self._log.exception("settling a request failed", oid=oid)
        return pending

    def _is_open(self, key: tuple[str, int]) -> bool:
        # By its number too: a request id reused after a restart is another request.
        pending = self.pending.get(key[0])
        return pending is not None and pending.seq == key[1]

    def _expire(self, key: tuple[str, int]) -> None:
        pending = self.pending[key[0]]
        self._finish(pending.oid, "timeout")
        # If it still waits in the inbox, `agent_ready` skips it; if delivered, the late
        # answer is dropped.
        self._answer_error(
            pending.requester,
            pending.target,
            ErrorCode.AGENT_REQUEST_TIMEOUT,
            f"Agent request to '{pending.target}' timed out after {pending.timeout_ms}ms",
            pending.trace_id,
        )

    def _answer_error(
        self, requester: Requester, target: str, code: str, message: str, trace_id: str | None
    ) -> None:
        result = wire.DelegateResult("error", target, error=wire.ErrorInfo(code, message))
        frame = wire.encode(
            wire.DELEGATE_RESULT,
            wire.ORCHESTRATOR,
            requester.identity.decode(errors="replace"),
            result,
            correlation_id=requester.correlation_id,
            trace_id=trace_id,
        )
        self._outbox.to_requester(requester, frame)


class _Status(msgspec.Struct):
    status: str = "error"


_status_decoder = msgspec.msgpack.Decoder(_Status)


def _status(env: wire.Envelope) -> str:
    """A `delegate_result`'s status ("ok" | "error"), for metrics only."""
    try:
        return _status_decoder.decode(env.payload).status
    except msgspec.DecodeError:
        return "error"
