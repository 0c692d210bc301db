"""The `agents` tool of @goondan/base end to end: async requests, spawn, list, catalog."""

import json

import pytest

from tests.e2e.conftest import write_bundle

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: boss-script}
spec:
  provider: scripted
  model: s
  options:
    rules:
      - when: "inter_agent_response"
        steps:
          - reply: "async answer: {{input}}"
      - when: "fire"
        steps:
          - call: agents__request
            args: {target: worker, input: "work", async: true}
          - reply: "{{result}}"
      - when: "spawn ghost"
        steps:
          - call: agents__spawn
            args: {target: ghost}
          - reply: "{{result}}"
      - when: "spawn"
        steps:
          - call: agents__spawn
            args: {target: worker, instanceKey: job-1}
          - call: agents__list
            args: {}
          - call: agents__catalog
            args: {}
          - reply: "{{results}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: worker-script}
spec: {provider: scripted, model: s, options: {default: "worked on: {{input}}"}}
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
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/boss
  agents: [{ref: Agent/boss}, {ref: Agent/worker}]
"""


@pytest.fixture
def daemon(start_daemon, tmp_path):
    return start_daemon(write_bundle(tmp_path / "b", BUNDLE))


def test_async_request_answer_joins_the_next_turn(daemon, state_root):
    ack = json.loads(daemon.send("fire").stdout)
    assert ack["accepted"] is True and ack["async"] is True and ack["target"] == "worker"
    # The worker's answer arrives while the boss is idle; it joins the boss's next turn.
    reply = daemon.send("anything new?").stdout
    assert reply.startswith("async answer: ")
    body = json.loads(reply.removeprefix("async answer: "))
    assert body["type"] == "inter_agent_response" and body["status"] == "ok"
    assert body["response"] == "worked on: work" and body["requestId"] == ack["correlationId"]


def test_spawn_list_and_catalog(daemon):
    spawned, listed, catalog = json.loads(daemon.send("spawn").stdout)
    assert spawned == {"target": "worker", "instanceKey": "job-1", "spawned": True, "cwd": None}
    assert listed["count"] == 1
    [entry] = listed["agents"]
    assert entry["target"] == "worker" and entry["instanceKey"] == "job-1"
    assert entry["ownerAgent"] == "boss" and entry["ownerInstanceKey"] == "cli"
    assert catalog["selfAgent"] == "boss" and catalog["callableAgents"] == ["worker"]
    assert catalog["availableCount"] == 2 and catalog["callableCount"] == 1
    assert daemon.process("worker")["pid"] is not None  # spawn started its process


def test_spawn_of_an_agent_outside_the_swarm_is_an_error(daemon):
    error = json.loads(daemon.send("spawn ghost").stdout)
    assert error["code"] == "AGENT_NOT_FOUND"
