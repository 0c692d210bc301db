"""The swarm's Connections: which connector processes run, and what their events become.

An event from a connector is routed by the Connection's ingress rules, journaled (fsync'd, off
the event loop: `Journal.accept_durably`), then delivered as one turn of the chosen agent and
acknowledged with `event_ack`. When the connector asked for the reply, the agent's answer goes
back to it under the event's correlationId.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import structlog

from goondan.bundle import Bundle, ConnectionSpec, Resource
from goondan.paths import StorageError
from ipc import wire
from ipc.error_codes import ErrorCode
from orchestrator.ingress import Route, event_text, route_event
from orchestrator.journal import Journal
from orchestrator.router import Requester, Router
from orchestrator.supervisor import CONNECTION_PREFIX

BASE = "@goondan/base"


def swarm_connections(bundle: Bundle, swarm: Resource) -> dict[str, Resource]:
    """Process name (`connection:<name>`) -> Connection, for Connections bound to `swarm`
    (those without `swarmRef` serve whichever swarm runs)."""
    found: dict[str, Resource] = {}
    for connection in bundle.of_kind("Connection"):
        spec: ConnectionSpec = connection.spec
        if spec.swarm_ref is None or spec.swarm_ref.name == swarm.name:
            found[CONNECTION_PREFIX + connection.name] = connection
    return found


def terminal_connection(bundle: Bundle, connections: dict[str, Resource]) -> str | None:
    """The first Connection served by the built-in `cli` connector: it reads the terminal."""
    for name, connection in connections.items():
        connector = bundle.find(connection.spec.connector_ref, connection.package)
        if connector is not None and (connector.package, connector.name) == (BASE, "cli"):
            return name
    return None


class Connections:
    def __init__(
        self,
        connections: dict[str, Resource],
        entry_agent: str,
        router: Router,
        journal: Journal,
        send: Callable[[bytes, bytes], None],
    ) -> None:
        self.connections = connections
        self.entry_agent = entry_agent
        self._router = router
        self._journal = journal
        self._send = send  # (identity, frame) on the agents socket
        self._reply_wanted: set[tuple[bytes, str]] = set()
        self._log = structlog.get_logger().bind(component="ingress")

    def update(self, connections: dict[str, Resource], entry_agent: str) -> None:
        self.connections, self.entry_agent = connections, entry_agent

    def on_event(self, name: str, identity: bytes, env: wire.Envelope) -> None:
        cid = env.correlation_id or ""
        self._guarded(name, identity, cid, lambda: self._route(name, identity, cid, env))

    def _guarded(self, name: str, identity: bytes, cid: str, work: Callable[[], None]) -> None:
        """`work()`; if it raises (a bug), the connector is still answered, with E_INTERNAL."""
        try:
            work()
        except Exception as exc:  # a bug here must still answer the connector
            self._log.exception("failed to route a connector event", connection=name)
            error = wire.ErrorInfo(ErrorCode.E_INTERNAL, f"{type(exc).__name__}: {exc}")
            self._ack(identity, cid, wire.EventAck(False, error=error))

    def _route(self, name: str, identity: bytes, cid: str, env: wire.Envelope) -> None:
        event = wire.decode_payload(env, wire.ConnectorEvent)
        connection = self.connections.get(name)
        if connection is None:
            self._ack(
                identity, cid, wire.EventAck(False, error=_error(ErrorCode.E_NO_CONNECTION, name))
            )
            return
        route = route_event(connection.spec, self.entry_agent, event)
        if route is None:
            self._log.warning(
                "event matched no ingress rule; refused",
                connection=connection.name,
                eventName=event.name,
                properties=sorted(event.properties),
            )
            message = (
                f"event '{event.name}' matched no ingress rule of Connection/{connection.name}"
            )
            self._ack(
                identity,
                cid,
                wire.EventAck(False, error=wire.ErrorInfo(ErrorCode.E_NO_ROUTE, message)),
            )
            return
        payload = wire.Delegate(
            input=event_text(event),
            instance_key=route.instance_key,
            source=wire.Source("connector", connection.name),
            timeout_ms=None,
            metadata=_metadata(connection.spec, event),
        )
        delegate = wire.Envelope(
            wire.DELEGATE,
            name,
            route.agent,
            wire.encode_payload(payload),
            correlation_id=cid,
            trace_id=env.trace_id,
            span_id=env.span_id,  # the connector's caller's span (a webhook's `traceparent`)
        )
        request_id = self._router.new_request_id()

        def refuse(exc: StorageError) -> None:
            self._ack(identity, cid, wire.EventAck(False, error=wire.ErrorInfo(exc.code, str(exc))))

        def deliver() -> None:
            self._guarded(
                name,
                identity,
                cid,
                lambda: self._deliver(identity, cid, event.reply, route, delegate, request_id),
            )

        try:  # written now; routed and acknowledged once it is durable (fsync'd in a thread)
            durable = self._journal.accept_durably(request_id, wire.encode_envelope(delegate))
        except StorageError as exc:
            refuse(exc)
            return
        self._journal.when_durable(durable, request_id, deliver, refuse)

    def _deliver(
        self,
        identity: bytes,
        cid: str,
        reply: bool,
        route: Route,
        delegate: wire.Envelope,
        request_id: str,
    ) -> None:
        """Route a journaled event, once its fsync returned, and acknowledge it."""
        if reply:
            self._reply_wanted.add((identity, cid))
        requester = Requester("connector", identity, cid)
        if self._router.delegate(requester, delegate, request_id) is None:
            self._reply_wanted.discard((identity, cid))  # refused at once (e.g. agent left)
            with contextlib.suppress(StorageError):  # a crash now replays it once more
                self._journal.done(request_id)
            self._ack(
                identity, cid, wire.EventAck(False, error=_error(ErrorCode.E_NO_ROUTE, route.agent))
            )
            return
        self._ack(identity, cid, wire.EventAck(True, route.agent, route.instance_key))

    def answer(self, requester: Requester, frame: bytes) -> None:
        """The agent's answer to an event: to the connector if it asked for it."""
        key = (requester.identity, requester.correlation_id or "")
        if key in self._reply_wanted:
            self._reply_wanted.discard(key)
            self._send(requester.identity, frame)

    def _ack(self, identity: bytes, cid: str, ack: wire.EventAck) -> None:
        frame = wire.encode(
            wire.EVENT_ACK, wire.ORCHESTRATOR, identity.decode(), ack, correlation_id=cid
        )
        self._send(identity, frame)


def _metadata(spec: ConnectionSpec, event: wire.ConnectorEvent) -> dict[str, object]:
    """What the agent learns about the event: its name and properties, and the Connection's
    tool policy (which narrows the agent's own for this turn)."""
    metadata: dict[str, object] = {"event": event.name, "properties": event.properties}
    if spec.tool_policy is not None:
        policy = spec.tool_policy
        metadata["toolPolicy"] = {
            "allow": policy.allow,
            "deny": list(policy.deny),
            "require_approval": list(policy.require_approval),
            "approval_timeout_seconds": policy.approval_timeout_seconds,
        }
    return metadata


def _error(code: str, what: str) -> wire.ErrorInfo:
    return wire.ErrorInfo(code, f"no route for this event ({what})")
