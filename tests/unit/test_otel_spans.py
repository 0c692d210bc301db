"""The agent's half of trace export, without a daemon: events in, span records out on a real
unix stream socket; and nothing of OpenTelemetry is imported while traces are off."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from agentproc.span_export import SpanSink
from goondan.connectors import parse_traceparent
from ipc.endpoints import SPAN_SOCKET_ENV
from ipc.spans import KIND_CLIENT, SpanRecord
from orchestrator.otel_sdk import _frames

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


class Orchestrator:
    """The listening end of the span socket, read as the orchestrator reads it."""

    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(8)
        self.conn: socket.socket | None = None
        self.buffer = bytearray()

    def read(self) -> list[SpanRecord]:
        """Everything sent so far: a send returns once its bytes are in our buffer."""
        if self.conn is None:
            self.conn, _ = self.listener.accept()
            self.conn.setblocking(False)
        while True:
            try:
                data = self.conn.recv(1 << 20)
            except BlockingIOError:
                break
            if not data:
                break
            self.buffer += data
        return _frames(self.buffer)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


def test_events_become_span_records_sent_as_each_span_ends(tmp_path: Path) -> None:
    path = str(tmp_path / "spans.sock")
    receiver = Orchestrator(path)
    sink = SpanSink(path, model="gpt-x", provider="openai")
    emit = sink.on_event
    emit("turn.started", TRACE, "a" * 16, "f" * 16, "bot", "chat:1", "t1", {})
    emit("step.started", TRACE, "b" * 16, "a" * 16, "bot", "chat:1", "t1", {"stepIndex": 0})
    emit("tool.called", TRACE, "c" * 16, "b" * 16, "bot", "chat:1", "t1", {"toolName": "x__y"})
    failed = {"toolName": "x__y", "toolCallId": "c1", "status": "error", "errorCode": "E_BOOM"}
    emit("tool.failed", TRACE, "c" * 16, "b" * 16, "bot", "chat:1", "t1", failed)
    [tool] = receiver.read()  # sent the moment it ended
    assert tool.name == "execute_tool x__y" and tool.parent_span_id == "b" * 16
    assert tool.error == "E_BOOM" and tool.attributes["error.type"] == "E_BOOM"
    assert tool.attributes["gen_ai.tool.name"] == "x__y" and tool.start_ns <= tool.end_ns
    usage = {"inputTokens": 12, "outputTokens": 3}
    done = {"stepIndex": 0, "finishReason": "stop", "tokenUsage": usage}
    emit("step.completed", TRACE, "b" * 16, "a" * 16, "bot", "chat:1", "t1", done)
    [step] = receiver.read()
    assert step.name == "chat gpt-x" and step.kind == KIND_CLIENT and step.error is None
    assert step.attributes["gen_ai.request.model"] == "gpt-x"
    assert step.attributes["gen_ai.usage.input_tokens"] == 12
    assert step.attributes["gen_ai.usage.output_tokens"] == 3
    assert step.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    emit("tool.progress", TRACE, "d" * 16, "c" * 16, "bot", "chat:1", "t1", {})  # not a span
    emit("turn.completed", TRACE, "a" * 16, "f" * 16, "bot", "chat:1", "t1", {})
    [turn] = receiver.read()
    assert turn.name == "invoke_agent bot" and turn.parent_span_id == "f" * 16
    assert turn.attributes["goondan.instance_key"] == "chat:1"
    sink.close()
    receiver.close()


def test_a_connection_nobody_reads_holds_spans_for_the_next_send(tmp_path: Path) -> None:
    path = str(tmp_path / "spans.sock")
    receiver = Orchestrator(path)
    sink = SpanSink(path, model="m", provider="p")
    n = 0
    for n in range(4000):  # more than the socket buffers take: the sink keeps the rest
        sink.on_event("tool.completed", TRACE, f"{n:016x}", None, "a", "k", "t", {})
    assert sink._unsent  # the buffers were full, and the sink did not block
    received = receiver.read()
    while sink._unsent:  # each span that ends sends what waited first
        n += 1
        sink.on_event("tool.completed", TRACE, f"{n:016x}", None, "a", "k", "t", {})
        received += receiver.read()
    assert [int(r.span_id, 16) for r in received] == list(range(n + 1))  # none lost, in order
    sink.close()
    receiver.close()


def test_a_bad_event_costs_its_span_not_the_turn(tmp_path: Path) -> None:
    path = str(tmp_path / "spans.sock")
    receiver = Orchestrator(path)
    sink = SpanSink(path, model="m", provider="p")
    bad = {"stepIndex": "not a number"}
    sink.on_event("step.completed", TRACE, "b" * 16, None, "a", "k", "t", bad)  # does not raise
    sink.on_event("tool.completed", TRACE, "c" * 16, None, "a", "k", "t", {"toolName": "x"})
    assert [r.name for r in receiver.read()] == ["execute_tool x"]
    sink.close()
    receiver.close()


def test_traceparent_is_read_as_w3c_says() -> None:
    assert parse_traceparent(f"00-{TRACE}-00f067aa0ba902b7-01") == (TRACE, "00f067aa0ba902b7")
    assert parse_traceparent(f"00-{TRACE.upper()}-00F067AA0BA902B7-00") is not None
    for bad in (
        None,
        "",
        "garbage",
        f"ff-{TRACE}-00f067aa0ba902b7-01",  # version ff is invalid
        f"00-{'0' * 32}-00f067aa0ba902b7-01",  # all-zero ids are invalid
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE[:-1]}z-00f067aa0ba902b7-01",
        f"00-{TRACE}-00f067aa0ba902b7",
    ):
        assert parse_traceparent(bad) is None, bad


def test_nothing_of_opentelemetry_is_imported_while_traces_are_off() -> None:
    code = (
        "import sys, orchestrator.daemon, agentproc.main, agentproc.zygote\n"
        "loaded = [m for m in sys.modules if m.startswith(('opentelemetry', 'google.protobuf'))]\n"
        "assert not loaded, loaded\n"
        "import agentproc.tracing as t\n"
        "assert t.span_sink(model='m', provider='p') is None\n"
        "assert 'agentproc.span_export' not in sys.modules\n"
    )
    env = {k: v for k, v in os.environ.items() if k != SPAN_SOCKET_ENV}  # traces off
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
