"""An agent's side of OpenTelemetry export: runtime events become finished spans, handed to
the orchestrator as they end.

Only when the orchestrator exports traces (it then sets `GOONDAN_SPAN_SOCKET`): otherwise no
`SpanSink` exists and `TurnTracer.emit` pays a `None` check. A span is sent the moment it ends,
with a non-blocking `send` on this agent's unix stream connection to the orchestrator: once
sent it sits in the orchestrator's receive buffer, so it survives this process being SIGKILLed
a moment later, and the turn never waits on the collector, the network or the SDK (the
orchestrator owns those, on a thread). The orchestrator reads the connection only now and then
and never waits on it, so a send wakes no one: a few microseconds, not a context switch.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections import deque
from typing import Any

import structlog

from ipc.spans import KIND_CLIENT, KIND_INTERNAL, Attribute, SpanRecord, encode_batch

# Bytes the connection's buffers could not take (the orchestrator reads them every fraction of
# a second): they go first with the next span that ends. Past this many, new spans are dropped.
MAX_UNSENT = 1 << 20
MAX_OPEN = 1024  # spans started and not ended (a cancelled task's) before they are forgotten
DROP_WARN_S = 60.0

_STARTS = frozenset({"turn.started", "step.started", "tool.called"})
_ENDS = frozenset(
    {
        "turn.completed",
        "turn.failed",
        "step.completed",
        "step.failed",
        "tool.completed",
        "tool.failed",
    }
)


class SpanSink:
    """Turns one agent's runtime events into `SpanRecord`s and sends them, never blocking."""

    def __init__(self, path: str, *, model: str, provider: str) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.setblocking(False)
        self._sock.connect(path)  # raises OSError when the orchestrator has no span socket
        self.model = model
        self.provider = provider
        self._pid = os.getpid()  # which process ran the span (the resource is the daemon's)
        self._started: dict[str, int] = {}  # span id -> start, until the span ends
        # Length-prefixed batches (the first maybe half sent) the connection did not take yet.
        self._unsent: deque[bytes] = deque()
        self._unsent_bytes = 0
        self._dropped = 0
        self._warned_at = -DROP_WARN_S

    def on_event(
        self,
        event: str,
        trace_id: str,
        span_id: str,
        parent_span_id: str | None,
        agent: str,
        instance_key: str,
        turn_id: str,
        data: dict[str, Any],
    ) -> None:
        """Note a span's start, or send it when it ends. Never raises: a turn must not fail
        for its trace."""
        try:
            if event in _STARTS:
                if len(self._started) > MAX_OPEN:
                    self._started.clear()
                self._started[span_id] = time.time_ns()
                return
            if event not in _ENDS:
                return
            end = time.time_ns()
            start = self._started.pop(span_id, end)
            family = event[: event.index(".")]
            error = data.get("errorCode")
            if error is None and event.endswith(".failed"):
                error = data.get("finishReason") or "failed"
            attributes: dict[str, Attribute] = {
                "gen_ai.agent.name": agent,
                "process.pid": self._pid,
            }
            kind = KIND_INTERNAL
            if family == "tool":
                tool = str(data.get("toolName", ""))
                name = f"execute_tool {tool}"
                attributes["gen_ai.operation.name"] = "execute_tool"
                attributes["gen_ai.tool.name"] = tool
                attributes["gen_ai.tool.call.id"] = str(data.get("toolCallId", ""))
                attributes["goondan.tool.status"] = str(data.get("status", ""))
            elif family == "step":
                name = f"chat {self.model}"
                kind = KIND_CLIENT
                attributes["gen_ai.operation.name"] = "chat"
                attributes["gen_ai.request.model"] = self.model
                attributes["gen_ai.provider.name"] = self.provider
                attributes["goondan.step.index"] = int(data.get("stepIndex", 0))
                _usage(attributes, data)
                reason = data.get("finishReason")
                if reason is not None:
                    attributes["gen_ai.response.finish_reasons"] = [str(reason)]
            else:
                name = f"invoke_agent {agent}"
                attributes["gen_ai.operation.name"] = "invoke_agent"
                attributes["goondan.instance_key"] = instance_key
                attributes["goondan.turn_id"] = turn_id
                attributes["goondan.finish_reason"] = str(data.get("finishReason", ""))
                _usage(attributes, data)
            if error is not None:
                attributes["error.type"] = str(error)
                message = data.get("errorMessage")
                if message is not None:
                    attributes["goondan.error.message"] = str(message)[:500]
            record = SpanRecord(
                name,
                trace_id,
                span_id,
                parent_span_id,
                start,
                end,
                kind,
                None if error is None else str(error),
                attributes,
            )
            self._send(record)
        except Exception as exc:
            self._drop(1, f"{type(exc).__name__}: {exc}")

    def _send(self, record: SpanRecord) -> None:
        batch = encode_batch((record,))
        frame = len(batch).to_bytes(4, "big") + batch
        if self._unsent:  # behind what waits: in order, and one failing send per span at most
            if self._unsent_bytes > MAX_UNSENT:
                self._drop(1, "the orchestrator did not read its span connection")
            else:
                self._unsent.append(frame)
                self._unsent_bytes += len(frame)
            self._send_unsent()
            return
        try:
            sent = self._sock.send(frame, socket.MSG_NOSIGNAL)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:  # the orchestrator is gone
            self._drop(1, exc.strerror or str(exc))
            return
        if sent < len(frame):
            self._unsent.append(frame[sent:])
            self._unsent_bytes += len(frame) - sent

    def _send_unsent(self) -> None:
        unsent = self._unsent
        while unsent:
            chunk = b"".join(unsent) if len(unsent) < 64 else unsent[0]
            try:
                sent = self._sock.send(chunk, socket.MSG_NOSIGNAL)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._drop(len(unsent), exc.strerror or str(exc))
                unsent.clear()
                self._unsent_bytes = 0
                return
            self._unsent_bytes -= sent
            if len(unsent) < 64:
                unsent.clear()
                if sent < len(chunk):
                    unsent.append(chunk[sent:])
                    return
            elif sent < len(chunk):
                unsent[0] = chunk[sent:]
                return
            else:
                unsent.popleft()

    def _drop(self, count: int, why: str) -> None:
        self._dropped += count
        now = time.monotonic()
        if now - self._warned_at >= DROP_WARN_S:
            self._warned_at = now
            structlog.get_logger().warning("spans dropped", count=self._dropped, reason=why)
            self._dropped = 0

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.close()


def _usage(attributes: dict[str, Attribute], data: dict[str, Any]) -> None:
    usage = data.get("tokenUsage")
    if isinstance(usage, dict):
        attributes["gen_ai.usage.input_tokens"] = int(usage.get("inputTokens", 0))
        attributes["gen_ai.usage.output_tokens"] = int(usage.get("outputTokens", 0))
