"""A coordinator -> worker swarm on the scripted model, with a tool call, for the studio's
tests: `delegate X` makes the coordinator ask the worker, who calls `calc__add`; `divide X`
the same with `calc__divide`, which fails; `slow X` has the worker wait in `calc__wait` for a
minute (for cancelling)."""

BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: coord-script}
spec:
  provider: scripted
  model: coord-model
  options:
    rules:
      - when: "delegate (.*)"
        steps:
          - call: agents__request
            args: {target: worker, input: "add 2 and 3 for {{match.1}}"}
          - reply: "worker says {{result.response}}"
      - when: "divide (.*)"
        steps:
          - call: agents__request
            args: {target: worker, input: "divide 1 by 0 for {{match.1}}"}
          - reply: "worker says {{result.response}}"
      - when: "slow (.*)"
        steps:
          - call: agents__request
            args: {target: worker, input: "wait for {{match.1}}"}
          - reply: "worker says {{result.response}}"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: worker-script}
spec:
  provider: scripted
  model: worker-model
  options:
    rules:
      - when: "add"
        steps:
          - call: calc__add
            args: {a: 2, b: 3}
          - reply: "the sum is {{result.sum}}"
      - when: "divide"
        steps:
          - call: calc__divide
            args: {a: 1, b: 0}
          - reply: "could not divide"
      - when: "wait"
        steps:
          - call: calc__wait
            args: {}
          - reply: "waited"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: calc}
spec:
  entry: ./calc.py
  exports:
    - name: add
      description: Adds two numbers.
      parameters: {type: object, properties: {a: {type: number}, b: {type: number}}}
    - name: divide
      description: Divides a by b.
      parameters: {type: object, properties: {a: {type: number}, b: {type: number}}}
    - name: wait
      description: Waits a minute.
      parameters: {type: object}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: coordinator}
spec:
  modelConfig: {modelRef: Model/coord-script}
  tools:
    - ref: {kind: Tool, name: agents, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: worker}
spec:
  modelConfig: {modelRef: Model/worker-script}
  tools:
    - ref: Tool/calc
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/coordinator
  agents: [{ref: Agent/coordinator}, {ref: Agent/worker}]
"""

CALC = """\
import asyncio


def add(ctx, args):
    return {"sum": args["a"] + args["b"]}


def divide(ctx, args):
    return {"quotient": args["a"] / args["b"]}


async def wait(ctx, args):
    await asyncio.sleep(60)
    return {}


handlers = {"add": add, "divide": divide, "wait": wait}
"""
