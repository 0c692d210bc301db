"""Upstream parity end to end: the `agents` tool's eventType / metadata / eventId / spawn cwd
across processes, and a bundle using @goondan/base the way upstream's brain-persona does."""

import json

import pytest

from tests.e2e.conftest import goondan, write_bundle
from tests.fakes.openai_server import FakeOpenAIServerThread
from tests.waiting import wait_for

AGENTS = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: boss-script}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "^ask"
        steps:
          - call: agents__request
            args: {target: worker, input: "review", eventType: review.requested,
                   metadata: {pr: 12}}
          - reply: "{{result}}"
      - when: "^later"
        steps:
          - call: agents__request
            args: {target: worker, input: "later", async: true, eventType: batch.job}
          - reply: "{{result}}"
      - when: "^notify"
        steps:
          - call: agents__send
            args: {target: worker, input: "note", eventType: note.sent, metadata: {n: 1}}
          - reply: "{{result}}"
      - when: "^spawn inside"
        steps:
          - call: agents__spawn
            args: {target: worker, instanceKey: job-2, cwd: "sub/dir"}
          - call: agents__request
            args: {target: worker, instanceKey: job-2, input: "pwd"}
          - reply: "{{results}}"
      - when: "^spawn outside"
        steps:
          - call: agents__spawn
            args: {target: worker, instanceKey: job-3, cwd: "../../.."}
          - reply: "{{result}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: worker-script}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "^pwd$"
        steps:
          - call: bash__exec
            args: {command: pwd}
          - reply: "{{result.stdout}}"
    default: "worked on: {{input}}"
---
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: seen}
spec: {entry: ./seen.py}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: boss}
spec:
  modelConfig: {modelRef: Model/boss-script}
  tools: [{ref: {kind: Tool, name: agents, package: "@goondan/base"}}]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  modelConfig: {modelRef: Model/worker-script}
  extensions: [{ref: Extension/seen}]
  tools: [{ref: {kind: Tool, name: bash, package: "@goondan/base"}}]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/boss
  agents: [{ref: Agent/boss}, {ref: Agent/worker}]
"""

# The worker writes what its turn middleware sees as ctx.runtime, one file per event.
SEEN = """\
from pathlib import Path

import msgspec


def register(api, config):
    async def record(ctx):
        runtime = ctx.runtime
        seen = Path(runtime.agent.bundle_root) / "seen"
        seen.mkdir(exist_ok=True)
        # Whole or not at all: the test reads it as soon as it is there.
        tmp = seen / (runtime.inbound.event_id + ".tmp")
        tmp.write_bytes(msgspec.json.encode(runtime))
        tmp.replace(seen / (runtime.inbound.event_id + ".json"))
        return await ctx.next()

    api.pipeline.register("turn", record)
"""


@pytest.fixture
def bundle(tmp_path):
    return write_bundle(tmp_path / "b", AGENTS, {"seen.py": SEEN})


def seen(bundle, event_id):
    path = bundle / "seen" / f"{event_id}.json"
    wait_for(path.exists, what=f"the worker's turn for {event_id}")
    return json.loads(path.read_text())


def test_request_carries_event_type_and_metadata_and_returns_the_event_id(start_daemon, bundle):
    daemon = start_daemon(bundle)
    out = json.loads(daemon.send("ask").stdout)
    assert out["response"] == "worked on: review" and out["eventId"].startswith("agent_event_")
    runtime = seen(bundle, out["eventId"])
    inbound = runtime["inbound"]
    assert inbound["event_type"] == "review.requested"
    assert inbound["event_metadata"] == {"pr": 12}
    assert (inbound["source_kind"], inbound["source_name"]) == ("agent", "boss")
    call = runtime["call"]
    assert call["caller_agent"] == "boss" and call["caller_instance_key"] == "cli"
    assert call["call_source"] == "request" and call["call_stack"] == ["boss"]
    assert call["reply_to"]["target"] == "boss"
    assert call["caller_turn_id"]  # the boss's turn that asked
    assert runtime["agent"]["name"] == "worker"
    assert runtime["swarm"]["entry_agent"] == "boss"


def test_send_carries_event_type_and_metadata_and_returns_the_event_id(start_daemon, bundle):
    daemon = start_daemon(bundle)
    out = json.loads(daemon.send("notify").stdout)
    assert out["accepted"] is True and out["target"] == "worker"
    runtime = seen(bundle, out["eventId"])
    assert runtime["inbound"]["event_type"] == "note.sent"
    assert runtime["inbound"]["event_metadata"] == {"n": 1}
    assert runtime["call"]["call_source"] == "send" and "reply_to" not in runtime["call"]


def test_an_async_request_returns_the_event_id_the_target_sees(start_daemon, bundle):
    daemon = start_daemon(bundle)
    out = json.loads(daemon.send("later").stdout)
    assert out["async"] is True and out["eventId"].startswith("agent_event_")
    runtime = seen(bundle, out["eventId"])
    assert runtime["inbound"]["event_type"] == "batch.job"
    assert runtime["call"]["reply_to"]["target"] == "boss"


def test_spawn_cwd_sets_the_instance_working_directory(start_daemon, bundle, state_root):
    daemon = start_daemon(bundle)
    spawned, asked = json.loads(daemon.send("spawn inside").stdout)
    workdir = state_root / "swarms" / "default" / "workspaces" / "cli"
    expected = str((workdir / "sub" / "dir").resolve())
    assert spawned == {
        "target": "worker",
        "instanceKey": "job-2",
        "spawned": True,
        "cwd": expected,
    }
    assert asked["response"].strip() == expected  # the worker's bash ran there


def test_spawn_cwd_outside_the_workspace_is_refused(start_daemon, bundle):
    daemon = start_daemon(bundle)
    error = json.loads(daemon.send("spawn outside").stdout)
    assert error["code"] == "E_PATH_OUTSIDE_WORKDIR"


# -- a bundle written for upstream: brain-persona's coordinator -----------------------------------

PERSONA = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: fast-model}
spec:
  provider: openai
  model: gpt-test
  endpoint: "%(endpoint)s"
  apiKey:
    valueFrom: {env: FAKE_OPENAI_KEY}
  options: {maxRetries: 0}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: worker-model}
spec: {provider: scripted, model: s}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: coordinator}
spec:
  modelConfig:
    modelRef: "Model/fast-model"
  prompt:
    systemRef: "./prompts/coordinator.system.md"
  extensions:
    - ref:
        kind: Extension
        name: message-window
        package: "@goondan/base"
    - ref:
        kind: Extension
        name: message-compaction
        package: "@goondan/base"
    - ref:
        kind: Extension
        name: context-message
        package: "@goondan/base"
      config:
        includeAgentPrompt: true
        includeSwarmCatalog: true
%(required)s  tools:
    - ref:
        kind: Tool
        name: agents
        package: "@goondan/base"
    - ref:
        kind: Tool
        name: telegram
        package: "@goondan/base"
    - ref:
        kind: Tool
        name: slack
        package: "@goondan/base"
    - ref:
        kind: Tool
        name: wait
        package: "@goondan/base"
    - ref:
        kind: Tool
        name: self-restart
        package: "@goondan/base"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  modelConfig: {modelRef: "Model/worker-model"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: brain}
spec:
  entryAgent: "Agent/coordinator"
  agents:
    - ref: "Agent/coordinator"
    - ref: "Agent/worker"
"""
REQUIRED = '  requiredTools:\n    - "telegram__send"\n    - "slack__send"\n'


def persona(tmp_path, endpoint, required=REQUIRED):
    text = PERSONA % {"endpoint": endpoint, "required": required}
    prompt = {"prompts/coordinator.system.md": "You are the coordinator."}
    return write_bundle(tmp_path / "persona", text, prompt)


def test_brain_persona_refs_validate(tmp_path):
    proc = goondan("validate", str(persona(tmp_path, "http://127.0.0.1:9/v1")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "E_CONFIG_REF_NOT_FOUND" not in proc.stdout + proc.stderr


def test_brain_persona_coordinator_runs_with_its_context_message(start_daemon, tmp_path):
    with FakeOpenAIServerThread(api_key="sk-test") as server:
        server.queue_reply(text="hello from the coordinator")
        server.queue_reply(text="again")
        bundle = persona(tmp_path, server.base_url, required="")
        daemon = start_daemon(bundle, env={"FAKE_OPENAI_KEY": "sk-test"})
        proc = daemon.send("hi")
        assert proc.returncode == 0, proc.stderr + daemon.logs()
        assert proc.stdout.strip() == "hello from the coordinator"
        assert daemon.send("and again").stdout.strip() == "again"
        first, second = server.requests
    for request in (first, second):
        systems = [m["content"] for m in request["messages"] if m["role"] == "system"]
        assert systems[0] == "You are the coordinator."  # once, from the runtime
        [catalog] = [s for s in systems if s.startswith("[runtime_catalog]")]
        assert "swarm=brain\nentryAgent=coordinator\nselfAgent=coordinator" in catalog
        assert "callableAgents=worker\n[/runtime_catalog]" in catalog
        assert systems.count("You are the coordinator.") == 1
    # Appended once, in the first turn; the second turn found it in the conversation.
    assert len([m for m in second["messages"] if m["role"] == "system"]) == 2
