"""Trace context and runtime events of a turn: turn -> step -> tool spans.

`current_span` holds the span that is running in this task (the turn, a step, a tool call). A
tool that asks another agent passes it in the `delegate` envelope's `spanId`, so the callee's
turn names the caller's tool span as its parent: one trace across processes.

`TurnTracer` writes each event to the agent's `runtime-events.jsonl` (for `goondan logs`)
and publishes it on the extensions' in-process bus (`api.events.on("tool.completed", ...)`).
When the orchestrator exports OpenTelemetry traces, the agent's definition holds a `SpanSink`
(`span_sink`), and a tracer given it sends each span to the orchestrator as it ends
(docs/tracing.md); otherwise it is None and an event costs one more check.
"""

from __future__ import annotations

import os
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Protocol

from agentproc.runtime_events import RuntimeEvent, RuntimeEventLog, new_span_id, now_iso

if TYPE_CHECKING:
    from agentproc.span_export import SpanSink

current_span: ContextVar[str | None] = ContextVar("goondan_current_span", default=None)


class EventBus(Protocol):
    def wants(self, event: str) -> bool: ...

    def publish(self, event: str, payload: dict[str, Any]) -> None: ...


def span_sink(*, model: str, provider: str) -> SpanSink | None:
    """The span export of an agent of `model`, if the orchestrator asked for spans
    (`GOONDAN_SPAN_SOCKET`), else None. The span code is imported only then."""
    from ipc.endpoints import SPAN_SOCKET_ENV

    path = os.environ.get(SPAN_SOCKET_ENV)
    if not path:
        return None
    from agentproc.span_export import SpanSink

    try:
        return SpanSink(path, model=model, provider=provider)
    except OSError as exc:  # the socket went away: no traces, the agent works as ever
        import structlog

        structlog.get_logger().warning("span export off", path=path, error=str(exc))
        return None


class TurnTracer:
    def __init__(
        self,
        log: RuntimeEventLog | None,
        bus: EventBus | None,
        spans: SpanSink | None = None,
        *,
        agent_name: str,
        instance_key: str,
        trace_id: str,
        turn_id: str,
        parent_span_id: str | None,
    ) -> None:
        self._log = log
        self._bus = bus
        self._spans = spans  # the OpenTelemetry export, when the orchestrator wants spans
        self.agent_name = agent_name
        self.instance_key = instance_key
        self.trace_id = trace_id
        self.turn_id = turn_id
        self.turn_span = new_span_id()
        self.parent_span_id = parent_span_id  # the caller's tool span, for a delegated turn

    def turn(self, event: str, data: dict[str, Any]) -> None:
        self.emit(event, self.turn_span, self.parent_span_id, data)

    def emit(
        self, event: str, span_id: str, parent_span_id: str | None, data: dict[str, Any]
    ) -> None:
        record = RuntimeEvent(  # type, timestamp, agent, instance, trace, span, parent, turn
            event,
            now_iso(),
            self.agent_name,
            self.instance_key,
            self.trace_id,
            span_id,
            parent_span_id,
            self.turn_id,
            data,
        )
        if self._log is not None:
            self._log.emit(record)
        if self._spans is not None:
            self._spans.on_event(
                event,
                self.trace_id,
                span_id,
                parent_span_id,
                self.agent_name,
                self.instance_key,
                self.turn_id,
                data,
            )
        if self._bus is not None and self._bus.wants(event):
            self._bus.publish(
                event,
                {
                    "type": event,
                    "timestamp": record.timestamp,
                    "agentName": self.agent_name,
                    "instanceKey": self.instance_key,
                    "traceId": self.trace_id,
                    "spanId": span_id,
                    "parentSpanId": parent_span_id,
                    "turnId": self.turn_id,
                    **data,
                },
            )


__all__ = ["EventBus", "TurnTracer", "current_span", "new_span_id", "span_sink"]
