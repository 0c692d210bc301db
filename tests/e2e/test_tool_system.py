"""The Tool system end to end: real daemons, real agent processes, a local OpenAI-compatible
server speaking the real wire."""

import json
import os
import signal
import subprocess
from typing import Any

import pytest

from agentproc.conversation import read_messages
from agentproc.runtime_events import EVENTS_FILE, RuntimeEvent, event_decoder
from goondan.paths import StatePaths
from tests.e2e.conftest import GOONDAN, QUICKSTART, pid_alive, wait_for, write_bundle
from tests.fakes.openai_server import FakeOpenAIServerThread

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: gpt}
spec:
  provider: openai
  model: gpt-test
  endpoint: "%(endpoint)s"
  apiKey: {value: sk-test}
  options: {maxRetries: 0}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: calc}
spec:
  entry: ./calc.py
  exports:
    - name: add
      description: Add two numbers.
      parameters:
        type: object
        additionalProperties: false
        required: [a, b]
        properties:
          a: {type: number, description: first}
          b: {type: number, description: second}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: boom}
spec:
  entry: ./boom.py
  exports:
    - name: fail
      description: Always fails, loudly.
      parameters: {type: object, properties: {}}
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: work}
spec:
  entry: ./work.py
  exports:
    - name: quick
      description: Returns at once.
      parameters: {type: object, properties: {}}
    - name: slow
      description: Takes its time.
      parameters: {type: object, properties: {}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig: {modelRef: Model/gpt}
  prompt: {system: "You are terse."}
  tools:
    - ref: Tool/calc
    - ref: Tool/boom
    - ref: Tool/work
  %(extra)s
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/helper
  agents: [{ref: Agent/helper}]
"""

FILES = {
    "calc.py": """\
def add(ctx, args):
    return {"sum": args["a"] + args["b"]}

handlers = {"add": add}
""",
    "boom.py": """\
def fail(ctx, args):
    raise RuntimeError("disk on fire: " + "x" * 5000)

handlers = {"fail": fail}
""",
    "work.py": """\
import time

def quick(ctx, args):
    return "quick done"

def slow(ctx, args):
    (ctx.workdir / "slow-started").write_text("yes")
    time.sleep(60)
    return "slow done"

handlers = {"quick": quick, "slow": slow}
""",
}


@pytest.fixture
def server():
    with FakeOpenAIServerThread(api_key="sk-test") as server:
        yield server


def make_bundle(tmp_path, server, extra: str = "", files: dict[str, str] | None = None):
    text = BUNDLE % {"endpoint": server.base_url, "extra": extra}
    return write_bundle(tmp_path / "b", text, {**FILES, **(files or {})})


def tool_messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request["messages"] if m["role"] == "tool"]


def test_the_next_request_carries_three_structured_errors(start_daemon, tmp_path, server):
    server.queue_reply(
        tool_calls=[
            {"id": "call_ghost", "name": "ghost__run", "arguments": {}},
            {"id": "call_args", "name": "calc__add", "arguments": {"a": "two", "c": 1}},
            {"id": "call_boom", "name": "boom__fail", "arguments": {}},
        ]
    )
    server.queue_reply(text="All three failed.")
    daemon = start_daemon(make_bundle(tmp_path, server))

    proc = daemon.send("try your tools")
    assert proc.returncode == 0, proc.stderr + daemon.logs()
    assert proc.stdout.strip() == "All three failed."

    first, second = server.requests
    assert [t["function"]["name"] for t in first["tools"]] == [
        "calc__add",
        "boom__fail",
        "work__quick",
        "work__slow",
    ]
    results = tool_messages(second)
    assert [m["tool_call_id"] for m in results] == ["call_ghost", "call_args", "call_boom"]
    ghost, bad_args, boom = (json.loads(m["content"]) for m in results)

    assert ghost["status"] == "error"
    assert ghost["error"]["code"] == "E_TOOL_NOT_IN_CATALOG"
    assert ghost["error"]["message"] == (
        "Tool 'ghost__run' is not available in the current Tool Catalog."
    )
    assert "calc__add" in ghost["error"]["suggestion"]

    assert bad_args["error"]["code"] == "E_TOOL_INVALID_ARGS"
    assert bad_args["error"]["message"] == (
        "Invalid arguments for tool 'calc__add': args.b: required property is missing; "
        "args.a: must be a number, got string; "
        "args.c: unexpected property (allowed: a, b)"
    )

    assert boom["error"]["code"] == "E_TOOL"
    assert boom["error"]["name"] == "RuntimeError"
    message = boom["error"]["message"]
    assert len(message) == 1000
    assert message.startswith("disk on fire: xxx") and message.endswith("... (truncated)")


def test_sigkill_during_a_slow_tool_keeps_every_message(start_daemon, tmp_path, server, state_root):
    server.queue_reply(
        text="Working on it.",
        tool_calls=[
            {"id": "call_quick", "name": "work__quick", "arguments": {}},
            {"id": "call_slow", "name": "work__slow", "arguments": {}},
        ],
    )
    server.queue_reply(text="The slow one was interrupted; the quick one worked.")
    daemon = start_daemon(make_bundle(tmp_path, server))
    workdir = state_root / "swarms/default/workspaces/cli"
    sender = subprocess.Popen(
        [*GOONDAN, "send", "do both", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: (workdir / "slow-started").exists(), timeout=20)
    pid = daemon.process("helper")["pid"]
    directory = StatePaths.at(state_root).conversation_dir("default", "cli", "helper")
    wait_for(lambda: len(read_messages(directory)) == 3, timeout=5)  # the quick result is in
    before = read_messages(directory)  # what was appended when the kill comes
    os.kill(pid, signal.SIGKILL)

    out, err = sender.communicate(timeout=30)
    assert sender.returncode == 0, err + daemon.logs()
    assert out.strip() == "The slow one was interrupted; the quick one worked."
    assert not pid_alive(pid) and daemon.process("helper")["pid"] != pid

    # Before the kill: input, the assistant message with both calls, the quick result.
    assert [m.role for m in before] == ["user", "assistant", "tool"]
    assert before[2].tool_call_id == "call_quick"
    # After the respawn the turn resumed: every message is still there, the interrupted call
    # has a synthetic result, and the request was valid for the provider.
    resumed = server.requests[-1]["messages"]
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool", "tool"]
    assert resumed[1]["content"] == "do both"
    assert [c["id"] for c in resumed[2]["tool_calls"]] == ["call_quick", "call_slow"]
    quick, slow = (json.loads(m["content"]) for m in resumed[3:])
    assert quick == {"status": "ok", "output": "quick done"}
    assert slow["error"]["code"] == "E_TOOL_INTERRUPTED"
    assert [m["tool_call_id"] for m in resumed[3:]] == ["call_quick", "call_slow"]
    stored = read_messages(directory)
    assert [m.id for m in stored[:3]] == [m.id for m in before]
    assert stored[-1].content == "The slow one was interrupted; the quick one worked."


def test_an_extension_that_fails_to_start_names_itself(start_daemon, tmp_path, server):
    extra = "extensions: [{ref: Extension/broken}]"
    broken = "def register(api, config):\n    raise RuntimeError('cannot reach the vault')\n"
    extension = (
        "\n---\napiVersion: goondan.ai/v1\nkind: Extension\nmetadata: {name: broken}\n"
        "spec: {entry: ./broken.py}\n"
    )
    bundle = make_bundle(tmp_path, server, extra, {"broken.py": broken})
    (bundle / "goondan.yaml").write_text((bundle / "goondan.yaml").read_text() + extension)
    daemon = start_daemon(bundle)
    proc = daemon.send("hello")
    assert proc.returncode == 1
    assert "E_EXT_INIT: Extension/broken: register() failed" in proc.stderr
    assert "cannot reach the vault" in proc.stderr and "Traceback" not in proc.stderr


def test_extensions_and_tool_policy_in_a_real_agent(start_daemon, tmp_path, server, state_root):
    extra = (
        "toolPolicy: {deny: ['boom__*']}\n"
        "  extensions:\n"
        "    - ref: {kind: Extension, name: logging, package: '@goondan/base'}\n"
        "    - ref: {kind: Extension, name: message-window, package: '@goondan/base'}\n"
        "      config: {maxMessages: 3}\n"
    )
    server.queue_reply(tool_calls=[{"id": "c1", "name": "boom__fail", "arguments": {}}])
    server.queue_reply(text="denied, as expected")
    server.queue_reply(text="second turn")
    daemon = start_daemon(make_bundle(tmp_path, server, extra))
    assert daemon.send("first").returncode == 0
    assert daemon.send("second").stdout.strip() == "second turn"
    first, second, third = server.requests
    assert "boom__fail" not in [t["function"]["name"] for t in first["tools"]]
    [denied] = tool_messages(second)
    assert json.loads(denied["content"])["error"]["code"] == "E_TOOL_POLICY_DENIED"
    # message-window (3) cut into the first turn's tool call: the call and its result went
    # together, so the second turn sends the last answer and the new input
    assert [m["role"] for m in third["messages"]] == ["system", "assistant", "user"]
    assert third["messages"][1]["content"] == "denied, as expected"
    assert "[logging.turn] complete" in daemon.logs()


def test_a_trace_crosses_agents_with_the_tool_span_as_parent(start_daemon, state_root):
    daemon = start_daemon(QUICKSTART)
    assert daemon.send("What is 2 plus 3?").returncode == 0
    paths = StatePaths.at(state_root)

    def load(agent: str) -> list[RuntimeEvent]:
        path = paths.agent_dir("default", agent) / EVENTS_FILE  # every instance's, one file
        return [event_decoder.decode(line) for line in path.read_bytes().splitlines()]

    # Runtime events are written in batches, within a second of the turn's end.
    wait_for(lambda: load("assistant")[-1].type == "turn.completed", timeout=5)
    caller, callee = load("assistant"), load("researcher")
    [request_span] = [
        e.span_id
        for e in caller
        if e.type == "tool.called" and e.data["toolName"] == "agents__request"
    ]
    [started] = [e for e in callee if e.type == "turn.started"]
    assert started.parent_span_id == request_span
    assert started.trace_id == caller[0].trace_id
    assert caller[-1].type == "turn.completed" and caller[-1].data["stepCount"] == 3
    # a conversation's directory holds its conversation, not a file of events too
    assert not (paths.conversation_dir("default", "cli", "assistant") / EVENTS_FILE).exists()
