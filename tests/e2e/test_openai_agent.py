"""An agent process driven by an OpenAI-compatible server (a local one speaking the real wire)."""

import json

import pytest

from tests.e2e.conftest import write_bundle
from tests.fakes.openai_server import FakeOpenAIServerThread

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: gpt}
spec:
  provider: openai
  model: gpt-test
  endpoint: "%(endpoint)s"
  apiKey:
    valueFrom: {env: FAKE_OPENAI_KEY}
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
kind: Agent
metadata: {name: helper}
spec:
  modelConfig:
    modelRef: Model/gpt
    params: {temperature: 0.3, maxTokens: 256}
  prompt: {system: "You are terse."}
  tools:
    - ref: Tool/calc
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/helper
  agents: [{ref: Agent/helper}]
"""

CALC = """\
def add(ctx, args):
    return {"sum": args["a"] + args["b"]}

handlers = {"add": add}
"""


@pytest.fixture
def server():
    with FakeOpenAIServerThread(api_key="sk-test") as server:
        yield server


def test_tool_loop_against_an_openai_compatible_server(start_daemon, tmp_path, server):
    bundle = write_bundle(tmp_path / "b", BUNDLE % {"endpoint": server.base_url}, {"calc.py": CALC})
    server.queue_reply(tool_calls=[{"name": "calc__add", "arguments": {"a": 2, "b": "x"}}])
    server.queue_reply(tool_calls=[{"name": "calc__add", "arguments": {"a": 2, "b": 3}}])
    server.queue_reply(text="2 + 3 = 5")
    daemon = start_daemon(bundle, env={"FAKE_OPENAI_KEY": "sk-test"})

    proc = daemon.send("add 2 and 3")
    assert proc.returncode == 0, proc.stderr + daemon.logs()
    assert proc.stdout.strip() == "2 + 3 = 5"

    first, second, third = server.requests
    assert first["model"] == "gpt-test"
    assert first["temperature"] == 0.3 and first["max_tokens"] == 256
    assert first["messages"][0] == {"role": "system", "content": "You are terse."}
    assert first["messages"][-1] == {"role": "user", "content": "add 2 and 3"}
    [tool] = first["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "calc__add"
    # The bad arguments came back to the model as a structured error, not a crash.
    error = json.loads(second["messages"][-1]["content"])
    assert second["messages"][-1]["role"] == "tool"
    assert error["status"] == "error" and error["error"]["code"] == "E_TOOL_INVALID_ARGS"
    result = json.loads(third["messages"][-1]["content"])
    assert result == {"status": "ok", "output": {"sum": 5}}
    assert server.authorizations[-1] == "Bearer sk-test"


def test_model_errors_reach_the_user_clearly(start_daemon, tmp_path, server):
    bundle = write_bundle(tmp_path / "b", BUNDLE % {"endpoint": server.base_url}, {"calc.py": CALC})
    daemon = start_daemon(bundle, env={"FAKE_OPENAI_KEY": "wrong-key"})
    proc = daemon.send("hello")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "E_MODEL_AUTH" in proc.stderr and "Traceback" not in proc.stderr


def test_missing_api_key_names_what_to_set(start_daemon, tmp_path):
    text = BUNDLE.replace('  endpoint: "%(endpoint)s"\n', "")
    bundle = write_bundle(tmp_path / "b", text, {"calc.py": CALC})
    daemon = start_daemon(bundle, env={"FAKE_OPENAI_KEY": ""})
    proc = daemon.send("hello")
    assert proc.returncode == 1
    assert "E_AGENT_START" in proc.stderr and "Model/gpt" in proc.stderr
    assert "FAKE_OPENAI_KEY is not set" in proc.stderr and "apiKey" in proc.stderr


STREAMING = BUNDLE.replace(
    "  options: {maxRetries: 0}\n",
    "  options: {maxRetries: 0}\n  capabilities: {streaming: true}\n",
)
PROGRESS_TOOL = """\
import time

def add(ctx, args):
    ctx.update("adding", progress=0.5)
    return {"sum": args["a"] + args["b"]}

handlers = {"add": add}
"""


def test_send_streams_the_reply_and_tool_progress(start_daemon, tmp_path, server):
    bundle = write_bundle(
        tmp_path / "b", STREAMING % {"endpoint": server.base_url}, {"calc.py": PROGRESS_TOOL}
    )
    server.queue_reply(tool_calls=[{"name": "calc__add", "arguments": {"a": 2, "b": 3}}])
    server.queue_reply(chunks=["2 + 3 ", "= ", "5"])
    daemon = start_daemon(bundle, env={"FAKE_OPENAI_KEY": "sk-test"})
    proc = daemon.send("add 2 and 3", "--stream", "on")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "2 + 3 = 5\n"  # streamed, then a newline: not printed twice
    assert "[calc__add 50%] adding" in proc.stderr
    assert all(body.get("stream") is True for body in server.requests)
    # without a terminal (and no --stream), only the final answer is printed
    server.queue_reply(chunks=["plain ", "answer"])
    quiet = daemon.send("again")
    assert quiet.stdout == "plain answer\n" and quiet.stderr == ""


def test_run_input_streams_on_a_terminal(tmp_path, server, state_root):
    import os
    import subprocess

    from tests.e2e.conftest import GOONDAN

    bundle = write_bundle(
        tmp_path / "b", STREAMING % {"endpoint": server.base_url}, {"calc.py": CALC}
    )
    # Step 1 streams a remark and calls a tool; step 2 streams the answer. The answer alone is
    # "done": seeing the remark proves the text was shown as it streamed.
    calc = [{"name": "calc__add", "arguments": {"a": 1, "b": 2}}]
    server.queue_reply(chunks=["let me ", "add. "], tool_calls=calc)
    server.queue_reply(chunks=["done"])
    primary, secondary = os.openpty()  # stdout is a terminal, as for a person at a shell
    proc = subprocess.Popen(
        [*GOONDAN, "run", str(bundle), "--state-root", str(state_root), "--input", "count"],
        stdout=secondary,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "FAKE_OPENAI_KEY": "sk-test"},
    )
    os.close(secondary)
    output = b""
    while True:
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # EIO: the terminal closed
            break
        if not chunk:
            break
        output += chunk
    os.close(primary)
    assert proc.wait(30) == 0
    assert output.replace(b"\r\n", b"\n") == b"let me add. done\n"  # streamed, shown once
    assert server.requests[-1]["stream"] is True


def test_api_keys_rotate_past_a_revoked_key(start_daemon, tmp_path):
    with FakeOpenAIServerThread(api_key="sk-second") as server:
        text = BUNDLE % {"endpoint": server.base_url}
        text = text.replace(
            "    valueFrom: {env: FAKE_OPENAI_KEY}\n",
            "    valueFrom: {env: FAKE_OPENAI_KEY}\n"
            "  apiKeys:\n    - valueFrom: {env: SECOND_KEY}\n",
        )
        bundle = write_bundle(tmp_path / "b", text, {"calc.py": CALC})
        server.queue_reply(text="answered with the second key")
        daemon = start_daemon(
            bundle, env={"FAKE_OPENAI_KEY": "sk-revoked", "SECOND_KEY": "sk-second"}
        )

        proc = daemon.send("hello")

        assert proc.returncode == 0, proc.stderr + daemon.logs()
        assert proc.stdout.strip() == "answered with the second key"
        assert server.authorizations == ["Bearer sk-revoked", "Bearer sk-second"]
        assert "model API key cooling down" in daemon.logs()
        assert "sk-revoked" not in daemon.logs()  # keys never reach the logs


def test_cancel_stops_a_streaming_model_call(start_daemon, tmp_path, server, state_root):
    import subprocess
    import time

    from tests.e2e.conftest import GOONDAN, wait_for

    bundle = write_bundle(
        tmp_path / "b", STREAMING % {"endpoint": server.base_url}, {"calc.py": CALC}
    )
    # The stream opens at once, and its first chunk would come a minute later.
    server.queue_reply(chunks=["never ", "seen"], first_chunk_delay_seconds=60)
    daemon = start_daemon(bundle, env={"FAKE_OPENAI_KEY": "sk-test"})
    proc = subprocess.Popen(
        [*GOONDAN, "send", "hello", "--state-root", str(state_root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(lambda: len(server.requests) == 1, timeout=30)
    started = time.monotonic()
    done = daemon.cli("cancel", "--agent", "helper")
    assert done.returncode == 0, done.stderr
    out, err = proc.communicate(timeout=20)
    assert time.monotonic() - started < 15  # not the minute the model would have taken
    assert proc.returncode == 1 and "E_TURN_CANCELLED" in err, (out, err)
    # The next turn of the instance is a fresh model call, after the cancelled one.
    server.queue_reply(chunks=["fine ", "now"])
    again = daemon.send("hello again")
    assert again.returncode == 0 and again.stdout == "fine now\n", again.stderr
    sent = server.requests[-1]["messages"]
    assert [m["role"] for m in sent[-3:]] == ["user", "assistant", "user"]
    assert "cancelled" in sent[-2]["content"]
