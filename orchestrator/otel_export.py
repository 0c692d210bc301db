"""OpenTelemetry traces: the orchestrator exports every process's spans over OTLP.

On when `OTEL_TRACES_EXPORTER` names `otlp` (the SDK's own variables: endpoint, protocol,
headers, timeout, `OTEL_SERVICE_NAME`, which defaults to `goondan`). Off, nothing here is
imported past this module and the router is the plain one.

Agents never load the SDK. Each sends a finished span on its connection to the orchestrator's
span socket (unix stream, in the run directory) the moment it ends, without blocking (see
`agentproc/span_export.py`): a span that was sent survives the agent being SIGKILLed. A thread
of the orchestrator (`otel_sdk.SpanExport`) reads the connections now and then, re-creates
each span as an SDK span with its ids, parent and times, and exports them in batches with the
SDK's OTLP exporter. A turn never waits for the collector: a dead one costs a warning a
minute. The request's own span (root of the trace, or child of the caller's W3C
`traceparent`) is made here by `TracedRouter`, around the routing of a request that came from
outside (the CLI, a connector, `run --input`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import structlog

from ipc import wire
from ipc.endpoints import SPAN_SOCKET_ENV
from ipc.spans import KIND_SERVER, SpanRecord
from orchestrator.router import InFlight, Requester, Router

if TYPE_CHECKING:
    from orchestrator.otel_sdk import SpanExport

SPAN_SOCKET_FILE = "spans.sock"

_log = structlog.get_logger().bind(component="otel")


def start_span_export(run_dir: Path, environ: Mapping[str, str] = os.environ) -> SpanExport | None:
    """The span export the environment asks for, started, or None (then agents get no span
    socket either). Problems are warnings: tracing never stops the daemon."""
    os.environ.pop(SPAN_SOCKET_ENV, None)  # only ever ours, never inherited
    wanted = [e.strip() for e in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()]
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    unsupported = sorted(set(wanted) - {"otlp", "none"})
    if unsupported:
        _log.warning(
            "OTEL_TRACES_EXPORTER: only otlp is supported here",
            ignored=unsupported,
        )
    if "otlp" not in wanted:
        return None
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    try:
        from orchestrator.otel_sdk import SpanExport, make_exporter
    except ImportError as exc:
        _log.warning(
            "traces are not exported: OTEL_TRACES_EXPORTER=otlp needs the OpenTelemetry SDK "
            "(pip install 'goondan[otel]')",
            error=str(exc),
        )
        return None
    try:
        exporter = make_exporter(protocol)
        service = environ.get("OTEL_SERVICE_NAME") or "goondan"
        export = SpanExport(exporter, service, run_dir / SPAN_SOCKET_FILE)
    except (ImportError, OSError) as exc:
        _log.warning(f"traces are not exported: {exc}")
        return None
    os.environ[SPAN_SOCKET_ENV] = str(export.path)  # agents inherit the daemon's environment
    _log.info("exporting traces", protocol=protocol, service=service)
    return export


def new_id(hex_digits: int) -> str:
    return os.urandom(hex_digits // 2).hex()


class _Request:
    """A request from outside, while it is routed: its span, open."""

    __slots__ = (
        "trace_id",
        "span_id",
        "parent",
        "start",
        "target",
        "source",
        "sender",
        "oid",
        "error",
    )

    def __init__(
        self, trace_id: str, parent: str | None, target: str, source: str, sender: str
    ) -> None:
        self.trace_id = trace_id
        self.span_id = new_id(16)
        self.parent = parent  # the caller's span (a `traceparent` at the webhook), if any
        self.start = time.time_ns()
        self.target = target
        self.source = source
        self.sender = sender  # the envelope's `from`: the connection, for a connector's event
        self.oid = ""
        self.error: str | None | bool = False  # False: no answer yet; None: answered ok


class TracedRouter(Router):
    """The router, plus a span for each request from outside (the root of its trace): from
    the moment it is routed to its one answer. The agent's turn is its child (the span id
    goes in the forwarded envelope, as an agent's tool span does when it delegates).

    Requests between agents pass untouched: their parent is the caller's tool span already.
    Used only when traces are exported, so the plain router carries none of this."""

    def __init__(self, spans: SpanExport, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._spans = spans
        self._open: dict[str, _Request] = {}  # by request id
        # Ended without an answer from the agent: `_answer_error` follows, with the reason.
        self._failing: dict[tuple[str, bytes, str | None], _Request] = {}

    def delegate(
        self, requester: Requester, env: wire.Envelope, request_id: str | None = None
    ) -> str | None:
        if requester.channel == "agent":
            return super().delegate(requester, env, request_id)
        request = _Request(
            env.trace_id or new_id(32),
            env.span_id,
            env.to or self.entry_agent,
            requester.channel,
            env.from_,
        )
        key = (requester.channel, requester.identity, requester.correlation_id)
        self._failing[key] = request  # a refusal at once answers in `super().delegate`
        env = msgspec.structs.replace(env, trace_id=request.trace_id, span_id=request.span_id)
        oid = super().delegate(requester, env, request_id)
        if oid is not None and self._failing.pop(key, None) is request:
            request.oid = oid
            self._open[oid] = request
        return oid

    def result(self, env: wire.Envelope, sender: str) -> None:
        request = self._open.get(env.correlation_id or "")
        if request is not None and request.target == sender:
            try:
                answer = wire.decode_payload(env, wire.DelegateResult)
                request.error = answer.error.code if answer.error is not None else None
            except wire.MalformedFrame:
                request.error = "malformed answer"
        super().result(env, sender)

    def _finish(self, oid: str, outcome: str = "error") -> InFlight | None:
        pending = super()._finish(oid, outcome)
        request = self._open.pop(oid, None)
        if request is not None and pending is not None:
            if request.error is False:  # no answer: the reason comes in `_answer_error`
                key = (
                    pending.requester.channel,
                    pending.requester.identity,
                    pending.requester.correlation_id,
                )
                self._failing[key] = request
            else:
                self._end(request)
        return pending

    def _answer_error(
        self, requester: Requester, target: str, code: str, message: str, trace_id: str | None
    ) -> None:
        key = (requester.channel, requester.identity, requester.correlation_id)
        request = self._failing.pop(key, None)
        if request is not None:
            request.error = code
            self._end(request)
        super()._answer_error(requester, target, code, message, trace_id)

    def _end(self, request: _Request) -> None:
        error = request.error if isinstance(request.error, str) else None
        attributes: dict[str, str | bool | int | float | list[str]] = {
            "goondan.request.target": request.target,
            "goondan.request.source": request.source,
            "goondan.request.from": request.sender,
            "goondan.request.id": request.oid,
            "process.pid": os.getpid(),
        }
        if error is not None:
            attributes["error.type"] = error
        self._spans.export(
            SpanRecord(
                f"request {request.target}",
                request.trace_id,
                request.span_id,
                request.parent,
                request.start,
                time.time_ns(),
                KIND_SERVER,
                error,
                attributes,
            )
        )
