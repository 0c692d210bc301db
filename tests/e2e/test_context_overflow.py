"""A conversation the model refuses as too long: compacted, retried, answered, through the
daemon, against fake OpenAI and Anthropic servers that answer with the real overflow errors."""

import json
from typing import Any

import pytest

from tests.e2e.conftest import write_bundle
from tests.fakes.anthropic_server import FakeAnthropicServerThread
from tests.fakes.openai_server import FakeOpenAIServerThread

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: llm}
spec:
  provider: %(provider)s
  model: test-model
  endpoint: "%(endpoint)s"
  apiKey:
    valueFrom: {env: FAKE_KEY}
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
        required: [a, b]
        properties:
          a: {type: number}
          b: {type: number}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: helper}
spec:
  modelConfig:
    modelRef: Model/llm
    params: {maxTokens: 256}
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


class Server:
    """A fake server and the `provider:` that speaks its wire format."""

    def __init__(self, fake: FakeOpenAIServerThread | FakeAnthropicServerThread, provider: str):
        self.fake, self.provider = fake, provider

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fake, name)


@pytest.fixture(params=["openai", "anthropic"])
def server(request):
    runner = FakeOpenAIServerThread if request.param == "openai" else FakeAnthropicServerThread
    with runner(api_key="sk-test") as fake:
        yield Server(fake, request.param)


def texts(body: dict[str, Any]) -> list[str]:
    """Every text of a request body, in either wire format."""
    found = [body["system"]] if isinstance(body.get("system"), str) else []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            found.append(content)
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "text":
                found.append(block["text"])
    return found


def pairs_intact(body: dict[str, Any]) -> bool:
    calls, results = set(), set()
    for message in body["messages"]:
        for call in message.get("tool_calls") or []:
            calls.add(call["id"])
        if message.get("role") == "tool":
            results.add(message["tool_call_id"])
        for block in message["content"] if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_use":
                calls.add(block["id"])
            if block.get("type") == "tool_result":
                results.add(block["tool_use_id"])
    return calls == results


SUMMARIZER = """\
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: small}
spec:
  provider: %(provider)s
  model: summary-model
  endpoint: "%(endpoint)s"
  apiKey:
    valueFrom: {env: FAKE_KEY}
  options: {maxRetries: 0}
"""


def started(start_daemon, tmp_path, server, bundle_text: str = BUNDLE):
    text = bundle_text % {"provider": server.provider, "endpoint": server.base_url}
    bundle = write_bundle(tmp_path / "b", text, {"calc.py": CALC})
    daemon = start_daemon(bundle, env={"FAKE_KEY": "sk-test"})
    # Some history: a tool call with its result, then a plain exchange.
    server.queue_reply(tool_calls=[{"name": "calc__add", "arguments": {"a": 1, "b": 2}}])
    server.queue_reply(text="1 + 2 = 3")
    server.queue_reply(text="hello to you")
    for line in ("add 1 and 2 " + "please " * 40, "hello " * 40):
        proc = daemon.send(line)
        assert proc.returncode == 0, proc.stderr + daemon.logs()
    return daemon


def test_an_overflow_is_compacted_and_retried(start_daemon, tmp_path, server):
    daemon = started(start_daemon, tmp_path, server)
    server.queue_context_overflow()
    server.queue_reply(text="The user had 1 and 2 added (3) and said hello.")
    server.queue_reply(text="still here")

    proc = daemon.send("and now?")
    assert proc.returncode == 0, proc.stderr + daemon.logs()
    assert proc.stdout.strip() == "still here"

    refused, summary, retry = server.requests[-3:]
    assert not summary.get("tools")  # the summariser is offered no tools
    assert any("add 1 and 2" in t for t in texts(summary))
    assert len(retry["messages"]) < len(refused["messages"])
    assert any("The user had 1 and 2 added (3)" in t for t in texts(retry))
    assert pairs_intact(refused) and pairs_intact(retry)
    assert "and now?" in texts(retry)[-1]

    # The next turn starts from the compacted conversation.
    server.queue_reply(text="yes")
    assert daemon.send("ok?").returncode == 0
    assert any("The user had 1 and 2 added (3)" in t for t in texts(server.requests[-1]))


def test_still_too_long_after_compaction_is_context_overflow(start_daemon, tmp_path, server):
    daemon = started(start_daemon, tmp_path, server)
    server.queue_context_overflow()
    server.queue_reply(text="a summary")
    server.queue_context_overflow()

    proc = daemon.send("and now?")
    assert proc.returncode == 1 and proc.stdout == ""
    assert "E_CONTEXT_OVERFLOW" in proc.stderr, proc.stderr + daemon.logs()
    assert "Traceback" not in proc.stderr
    assert json.dumps(server.requests[-1]).count("a summary") == 1


def test_the_compaction_model_writes_the_summary(start_daemon, tmp_path, server):
    tools = "  tools:\n    - ref: Tool/calc\n"
    text = BUNDLE.replace(tools, tools + "  compaction: {modelRef: Model/small}\n") + SUMMARIZER
    daemon = started(start_daemon, tmp_path, server, text)
    server.queue_context_overflow()
    server.queue_reply(text="a short summary")
    server.queue_reply(text="answered")

    proc = daemon.send("and now?")
    assert proc.returncode == 0, proc.stderr + daemon.logs()
    refused, summary, retry = server.requests[-3:]
    assert (refused["model"], summary["model"], retry["model"]) == (
        "test-model",
        "summary-model",
        "test-model",
    )
