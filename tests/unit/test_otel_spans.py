"""The agent's half of trace export, without a daemon: events in, span records out on a real
unix datagram socket; and nothing of OpenTelemetry is imported while traces are off."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from agentproc.span_export import SpanSink
from goondan.connectors import parse_traceparent
from ipc.spans import KIND_CLIENT, decode_batch

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def test_events_become_span_records_sent_as_each_span_ends(tmp_path: Path) -> None:
    path = str(tmp_path / "spans.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    receiver.settimeout(5)
    sink = SpanSink(path, model="gpt-x", provider="openai")
    emit = sink.on_event
    emit("turn.started", TRACE, "a" * 16, "f" * 16, "bot", "chat:1", "t1", {})
    emit("step.started", TRACE, "b" * 16, "a" * 16, "bot", "chat:1", "t1", {"stepIndex": 0})
    emit("tool.called", TRACE, "c" * 16, "b" * 16, "bot", "chat:1", "t1", {"toolName": "x__y"})
    failed = {"toolName": "x__y", "toolCallId": "c1", "status": "error", "errorCode": "E_BOOM"}
    emit("tool.failed", TRACE, "c" * 16, "b" * 16, "bot", "chat:1", "t1", failed)
    [tool] = decode_batch(receiver.recv(65536))  # sent the moment it ended
    assert tool.name == "execute_tool x__y" and tool.parent_span_id == "b" * 16
    assert tool.error == "E_BOOM" and tool.attributes["error.type"] == "E_BOOM"
    assert tool.attributes["gen_ai.tool.name"] == "x__y" and tool.start_ns <= tool.end_ns
    usage = {"inputTokens": 12, "outputTokens": 3}
    done = {"stepIndex": 0, "finishReason": "stop", "tokenUsage": usage}
    emit("step.completed", TRACE, "b" * 16, "a" * 16, "bot", "chat:1", "t1", done)
    [step] = decode_batch(receiver.recv(65536))
    assert step.name == "chat gpt-x" and step.kind == KIND_CLIENT and step.error is None
    assert step.attributes["gen_ai.request.model"] == "gpt-x"
    assert step.attributes["gen_ai.usage.input_tokens"] == 12
    assert step.attributes["gen_ai.usage.output_tokens"] == 3
    assert step.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    emit("tool.progress", TRACE, "d" * 16, "c" * 16, "bot", "chat:1", "t1", {})  # not a span
    emit("turn.completed", TRACE, "a" * 16, "f" * 16, "bot", "chat:1", "t1", {})
    [turn] = decode_batch(receiver.recv(65536))
    assert turn.name == "invoke_agent bot" and turn.parent_span_id == "f" * 16
    assert turn.attributes["goondan.instance_key"] == "chat:1"
    sink.close()
    receiver.close()


def test_a_full_queue_holds_spans_for_the_next_send(tmp_path: Path) -> None:
    path = str(tmp_path / "spans.sock")
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(path)
    sink = SpanSink(path, model="m", provider="p")
    sent = 0
    for n in range(200):  # nobody reads: the queue fills, the sink never blocks
        sink.on_event("tool.completed", TRACE, f"{n:016x}", None, "a", "k", "t", {})
        sent += 1
    receiver.setblocking(False)
    received = []
    while True:
        try:
            received.extend(decode_batch(receiver.recv(1 << 20)))
        except BlockingIOError:
            break
    sink.on_event("tool.completed", TRACE, f"{999:016x}", None, "a", "k", "t", {})
    received.extend(decode_batch(receiver.recv(1 << 20)))
    assert len({r.span_id for r in received}) == sent + 1  # none lost
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
        "assert t.spans is None\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
