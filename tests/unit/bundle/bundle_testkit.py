"""Helpers for the bundle tests: a small valid bundle to break, and where things are in it."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# A valid single-file bundle. Error tests replace one snippet and check the error points at it.
MINIMAL = """\
apiVersion: goondan.ai/v1
kind: Package
metadata:
  name: demo
spec:
  version: "0.1.0"
---
apiVersion: goondan.ai/v1
kind: Model
metadata:
  name: fast
spec:
  provider: scripted
  model: scripted-v1
---
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: calc
spec:
  entry: ./tools/calc.py
  exports:
    - name: add
      description: Add two numbers.
      parameters:
        type: object
        properties:
          a: {type: number}
          b: {type: number}
        required: [a, b]
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: coder
spec:
  modelConfig:
    modelRef: Model/fast
    params: {temperature: 0.2, maxTokens: 500}
  prompt:
    system: You write code.
  tools:
    - ref: Tool/calc
    - ref: {kind: Tool, name: agents, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata:
  name: reviewer
spec:
  modelConfig:
    modelRef: Model/fast
---
apiVersion: goondan.ai/v1
kind: Connector
metadata:
  name: cli
spec:
  entry: ./connectors/cli.py
  events:
    - name: stdin_message
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata:
  name: default
spec:
  entryAgent: Agent/coder
  agents:
    - ref: Agent/coder
    - ref: Agent/reviewer
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: cli-to-default
spec:
  connectorRef: Connector/cli
  swarmRef: Swarm/default
  ingress:
    rules:
      - match: {event: stdin_message}
        route: {agentRef: Agent/reviewer, instanceKey: cli}
"""


def edit(old: str, new: str, text: str = MINIMAL) -> str:
    """`text` with the one occurrence of `old` replaced (fails loudly if the template moved)."""
    assert text.count(old) == 1, f"snippet not found exactly once: {old!r}"
    return text.replace(old, new)


def write_bundle(root: Path, main: str = MINIMAL, extra: dict[str, str] | None = None) -> Path:
    """Write goondan.yaml, the Python entries MINIMAL needs and `extra` files; return `root`."""
    files = {
        "goondan.yaml": main,
        "tools/calc.py": "handlers = {}\n",
        "connectors/cli.py": "async def main(ctx):\n    pass\n",
        **(extra or {}),
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    """1-based line of the `occurrence`-th line containing `needle`."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    assert len(hits) >= occurrence, f"{needle!r} occurs {len(hits)} times"
    return hits[occurrence - 1]
