"""OpenTelemetry traces: real OTLP/HTTP export from a real daemon to a receiver in this test.

The spans of a request come from three processes (the orchestrator and two agents) and must
form one tree with the ids `goondan logs` shows; a webhook caller's `traceparent` continues;
what ended in an agent before a SIGKILL is exported; a dead collector stalls nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import REPO, pid_alive, write_bundle
from tests.fakes.otlp_receiver import OtlpReceiver, Span
from tests.waiting import wait_for

QUESTION = "What is 19 plus 23? Ask the researcher for a fun fact too."
SERVER, CLIENT = 2, 3  # OTLP's SpanKind values (INTERNAL is 1)


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.close()


def otel_env(endpoint: str, **more: str) -> dict[str, str]:
    return {
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: the test need not wait the default 5 s
        **more,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def trace_id_of(daemon, text: str) -> str:
    """The trace id of the request whose input was `text`, as `goondan logs --json` has it."""
    proc = daemon.cli("logs", "--json")
    assert proc.returncode == 0, proc.stderr
    for line in proc.stdout.splitlines():
        event = json.loads(line)
        if event["type"] == "turn.started" and event["data"].get("input") == text:
            return str(event["traceId"])
    raise AssertionError(f"no turn.started for {text!r} in:\n{proc.stdout}")


def by_name(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.name == name]


def one(spans: list[Span], name: str) -> Span:
    found = by_name(spans, name)
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]


def test_a_delegation_is_one_trace_across_three_processes(start_daemon, receiver):
    daemon = start_daemon(env=otel_env(receiver.endpoint, OTEL_SERVICE_NAME="swarm-under-test"))
    proc = daemon.send(QUESTION)
    assert proc.returncode == 0, proc.stderr
    assert "42" in proc.stdout
    trace_id = trace_id_of(daemon, QUESTION)

    def complete() -> bool:  # the request's span ends last
        return any(s.name == "request assistant" for s in receiver.trace(trace_id))

    wait_for(complete, timeout=20)
    spans = receiver.trace(trace_id)
    ids = {s.span_id: s for s in spans}
    assert len(ids) == len(spans)  # each span exported once
    assert {s.service for s in spans} == {"swarm-under-test"}
    assert {s.scope for s in spans} == {"goondan"}

    request = one(spans, "request assistant")
    assert request.parent_span_id is None and request.kind == SERVER
    assert request.status_code == 0 and request.attributes["goondan.request.source"] == "control"
    turn = one(spans, "invoke_agent assistant")
    assert turn.parent_span_id == request.span_id
    steps = by_name(spans, "chat scripted-v1")
    caller_steps = [s for s in steps if s.parent_span_id == turn.span_id]
    assert len(caller_steps) == 3  # add, ask the researcher, answer
    for step in caller_steps:
        assert step.kind == CLIENT
        assert step.attributes["gen_ai.operation.name"] == "chat"
        assert step.attributes["gen_ai.request.model"] == "scripted-v1"
        assert step.attributes["gen_ai.provider.name"] == "scripted"
        assert isinstance(step.attributes["gen_ai.usage.input_tokens"], int)
        assert isinstance(step.attributes["gen_ai.usage.output_tokens"], int)
    add = one(spans, "execute_tool calc__add")
    assert add.parent_span_id in {s.span_id for s in caller_steps}
    assert add.attributes["gen_ai.tool.name"] == "calc__add"
    assert add.attributes["gen_ai.operation.name"] == "execute_tool"
    assert add.attributes["goondan.tool.status"] == "ok"
    ask = one(spans, "execute_tool agents__request")
    assert ask.parent_span_id in {s.span_id for s in caller_steps}

    # The researcher's turn, in its own process, is a child of the caller's tool span.
    callee = one(spans, "invoke_agent researcher")
    assert callee.parent_span_id == ask.span_id
    assert ask.start_ns <= callee.start_ns <= callee.end_ns <= ask.end_ns
    callee_steps = [s for s in steps if s.parent_span_id == callee.span_id]
    assert len(callee_steps) == 2
    describe = one(spans, "execute_tool numbers__describe")
    assert describe.parent_span_id in {s.span_id for s in callee_steps}
    assert describe.attributes["gen_ai.agent.name"] == "researcher"

    # Three processes: the daemon (the request) and one per agent.
    pids = {
        request.attributes["process.pid"],
        turn.attributes["process.pid"],
        callee.attributes["process.pid"],
    }
    assert len(pids) == 3
    status = {p["name"]: p["pid"] for p in daemon.status()["processes"]}
    assert {status["assistant"], status["researcher"]} <= pids

    # The spans `goondan logs` shows for this trace were exported under the same ids (the
    # agents write their events in batches: wait for both turns' last ones).
    def logged() -> list[dict[str, Any]]:
        proc = daemon.cli("logs", "--json", "--trace", trace_id)
        return [json.loads(line) for line in proc.stdout.splitlines() if line]

    wait_for(lambda: sum(e["type"] == "turn.completed" for e in logged()) == 2, timeout=20)
    events = logged()
    assert {e["spanId"] for e in events if e["type"] == "turn.completed"} == {
        turn.span_id,
        callee.span_id,
    }
    assert {s.span_id for s in spans} - {request.span_id} == {
        e["spanId"] for e in events if e["type"].endswith((".completed", ".failed"))
    }


def test_the_webhook_continues_the_callers_trace(start_daemon, receiver, tmp_path):
    bundle = tmp_path / "webhook"
    shutil.copytree(REPO / "configs" / "webhook", bundle)
    port = free_port()
    main = bundle / "goondan.yaml"
    main.write_text(main.read_text().replace('PORT: {value: "8080"}', f'PORT: {{value: "{port}"}}'))
    secret = "otel-test-secret"
    env = otel_env("http://127.0.0.1:9")  # the traces endpoint below wins over this one
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = f"{receiver.endpoint}/custom/traces"
    start_daemon(bundle, env={"WEBHOOK_SECRET": secret, **env})

    def listening() -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_for(listening, timeout=20)
    caller_trace, caller_span = os.urandom(16).hex(), os.urandom(8).hex()
    body = json.dumps({"text": "What is 2 plus 3?", "wait": True})
    timestamp = str(int(time.time()))
    digest = hmac.new(secret.encode(), f"{timestamp}.{body}".encode(), hashlib.sha256)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/",
        body.encode(),
        {
            "Content-Type": "application/json",
            "X-Webhook-Timestamp": timestamp,
            "X-Signature-256": f"sha256={digest.hexdigest()}",
            "traceparent": f"00-{caller_trace}-{caller_span}-01",
        },
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.loads(response.read())["reply"] == "2 plus 3 is 5."

    wait_for(lambda: by_name(receiver.trace(caller_trace), "request responder"), timeout=20)
    spans = receiver.trace(caller_trace)
    root = one(spans, "request responder")
    assert root.parent_span_id == caller_span  # the caller's span, in the caller's trace
    assert root.attributes["goondan.request.source"] == "connector"
    assert root.attributes["goondan.request.from"] == "connection:http-in"
    turn = one(spans, "invoke_agent responder")
    assert turn.parent_span_id == root.span_id
    tool = one(spans, "execute_tool calc__add")
    assert tool.parent_span_id in {s.span_id for s in by_name(spans, "chat scripted-v1")}
    assert set(receiver.paths) == {"/custom/traces"}


KILLER = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: script}
spec:
  provider: scripted
  model: doomed-v1
  options:
    rules:
      - when: "go"
        steps:
          - call: tools__fine
            args: {}
          - call: tools__die
            args: {}
          - reply: "never"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: tools}
spec:
  entry: ./tools.py
  exports:
    - name: fine
      description: Returns at once.
      parameters: {type: object, properties: {}}
    - name: die
      description: SIGKILLs its own process, mid-turn.
      parameters: {type: object, properties: {}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: solo}
spec:
  modelConfig: {modelRef: Model/script}
  tools:
    - ref: Tool/tools
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/solo
  agents:
    - ref: Agent/solo
"""

TOOLS = """\
import os
import signal


async def fine(ctx, args):
    return {"ok": True}


async def die(ctx, args):
    os.kill(os.getpid(), signal.SIGKILL)


handlers = {"fine": fine, "die": die}
"""


def test_spans_that_ended_before_a_sigkill_are_exported(start_daemon, receiver, tmp_path):
    bundle = write_bundle(tmp_path / "killer", KILLER, {"tools.py": TOOLS})
    daemon = start_daemon(bundle, env=otel_env(receiver.endpoint))
    proc = daemon.send("go")
    # The first process died in `die`; the request went to a second one, which resumed the
    # turn (an interrupted call is not run again) and answered.
    assert proc.returncode == 0 and "never" in proc.stdout, proc.stderr
    trace_id = trace_id_of(daemon, "go")
    wait_for(lambda: by_name(receiver.trace(trace_id), "request solo"), timeout=20)
    spans = receiver.trace(trace_id)
    fine = one(spans, "execute_tool tools__fine")
    killed = fine.attributes["process.pid"]
    assert not pid_alive(int(killed))
    assert daemon.process("solo")["pid"] != killed
    # What ended in the killed process left it: the call to `fine` and the step that asked
    # for it. Its turn, its second step and `die` never ended, so they are not there.
    from_killed = [s for s in spans if s.attributes.get("process.pid") == killed]
    assert sorted(s.name for s in from_killed) == ["chat doomed-v1", "execute_tool tools__fine"]
    step = one(from_killed, "chat doomed-v1")
    assert fine.parent_span_id == step.span_id
    assert not by_name(spans, "execute_tool tools__die")
    turns = by_name(spans, "invoke_agent solo")  # the second process's turn only
    assert len(turns) == 1 and turns[0].attributes["process.pid"] != killed
    assert step.parent_span_id not in {s.span_id for s in spans}


def test_a_dead_collector_stalls_no_request(start_daemon, tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    daemon = start_daemon(env=otel_env(endpoint, OTEL_EXPORTER_OTLP_TIMEOUT="1"))
    for _ in range(3):
        proc = daemon.send(QUESTION, timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert "42" in proc.stdout
    warning = "spans not exported: the collector did not take them"
    wait_for(lambda: warning in daemon.logs(), timeout=30)
    assert daemon.stop() == 0  # and its exit is not held up by the spans it could not send
    # A warning now and then, not one per batch (nor the SDK's own, one per retry).
    stderr = daemon.stderr_path.read_text()
    assert stderr.count(warning) == 1, stderr
    assert "Traceback" not in stderr and "Failed to export" not in stderr, stderr


def test_traces_off_leaves_no_span_socket(start_daemon, state_root):
    daemon = start_daemon(env={"OTEL_TRACES_EXPORTER": "none"})
    proc = daemon.send(QUESTION)
    assert proc.returncode == 0, proc.stderr
    assert not (Path(state_root) / "run" / "spans.sock").exists()


def test_grpc_without_its_exporter_is_said_clearly(start_daemon, receiver):
    daemon = start_daemon(
        env=otel_env(receiver.endpoint, OTEL_EXPORTER_OTLP_PROTOCOL="grpc"),
    )
    proc = daemon.send(QUESTION)
    assert proc.returncode == 0, proc.stderr
    assert "opentelemetry-exporter-otlp-proto-grpc" in daemon.logs()
