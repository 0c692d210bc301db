"""The soak's swarm: a coordinator that delegates every request to a worker, and the ledger.

Both agents run on the offline `scripted` model. A request's input is `req <id>`; the
coordinator asks the worker `record <id>`, the worker's `ledger__record` tool appends
`<id> worker <pid> <turn>` to the ledger, the coordinator's own `ledger__record` appends a
`coordinator` line when the worker has answered, and the coordinator replies
`done <id>: recorded <id>`. The ledger lives outside the state root (the soak fills that disk)
and is the harness's evidence that a turn ran, whoever asked for it (a client or the journal's
replay after a restart).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from agentproc.conversation import read_messages
from goondan.paths import conversation_stored
from ipc.error_codes import ErrorCode

LEDGER_TOOL = '''"""Soak ledger: one line per turn that reached this tool (O_APPEND)."""

import os
import time

LEDGER = {ledger!r}


def record(ctx, args):
    line = f"{{args['id']}} {{args['role']}} {{os.getpid()}} {{ctx.turn_id}} {{time.time():.6f}}\\n"
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    return {{"id": args["id"]}}


handlers = {{"record": record}}
'''

BUNDLE = """apiVersion: goondan.ai/v1
kind: Package
metadata: {{name: soak}}
spec:
  version: "0.1.0"
  dependencies:
    - {{name: "@goondan/base", version: "*"}}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: coordinator-script}}
spec:
  provider: scripted
  model: scripted-v1
  options:
    rules:
      - when: "req (\\\\S+)"
        steps:
          - call: agents__request
            args: {{target: worker, input: "record {{{{match.1}}}}", timeoutMs: {timeout_ms}}}
          - call: ledger__record
            args: {{id: "{{{{match.1}}}}", role: coordinator}}
          - reply: "done {{{{match.1}}}}: {{{{results.0.response}}}}"
    default: "send 'req <id>'"
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: worker-script}}
spec:
  provider: scripted
  model: scripted-v1
  options:
    rules:
      - when: "record (\\\\S+)"
        steps:
          - call: ledger__record
            args: {{id: "{{{{match.1}}}}", role: worker}}
          - reply: "recorded {{{{result.id}}}}"
    default: "send 'record <id>'"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {{name: ledger}}
spec:
  entry: ./tools/ledger.py
  exports:
    - name: record
      description: Append a request id to the soak ledger.
      parameters:
        type: object
        additionalProperties: false
        required: [id, role]
        properties:
          id: {{type: string}}
          role: {{type: string}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: coordinator}}
spec:
  modelConfig: {{modelRef: "Model/coordinator-script"}}
  tools:
    - ref: "Tool/ledger"
    - ref: {{kind: Tool, name: agents, package: "@goondan/base"}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: worker}}
spec:
  modelConfig: {{modelRef: "Model/worker-script"}}
  tools:
    - ref: "Tool/ledger"
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: default}}
spec:
  entryAgent: "Agent/coordinator"
  agents:
    - ref: "Agent/coordinator"
    - ref: "Agent/worker"
  policy:
    shutdown: {{gracePeriodSeconds: 3}}
"""

AGENTS = ("coordinator", "worker")


def write_bundle(directory: Path, ledger: Path, worker_timeout_ms: int) -> Path:
    """The bundle in `directory`, its tool appending to `ledger` (an absolute path)."""
    (directory / "tools").mkdir(parents=True, exist_ok=True)
    (directory / "tools" / "ledger.py").write_text(LEDGER_TOOL.format(ledger=str(ledger)))
    (directory / "goondan.yaml").write_text(BUNDLE.format(timeout_ms=worker_timeout_ms))
    return directory


class LedgerLine(msgspec.Struct, frozen=True):
    request_id: str
    role: str  # "worker" or "coordinator"
    pid: int
    turn_id: str
    at: float  # time.time() when the tool ran


def read_ledger(ledger: Path) -> list[LedgerLine]:
    """Every whole line of the ledger, in the order written."""
    try:
        text = ledger.read_text(errors="replace")
    except FileNotFoundError:
        return []
    lines = []
    for raw in text.splitlines():
        parts = raw.split(" ")
        if len(parts) != 5:
            continue
        try:
            lines.append(LedgerLine(parts[0], parts[1], int(parts[2]), parts[3], float(parts[4])))
        except ValueError:
            continue
    return lines


def expected_answer(request_id: str) -> str:
    return f"done {request_id}: recorded {request_id}"


class CoordinatorTurn(msgspec.Struct):
    """What a coordinator's stored conversation shows of one request's turn."""

    answered: bool = False  # it ended with the coordinator's `done <id>: ...`
    cut_short: bool = False  # its own `ledger__record` call got E_TOOL_INTERRUPTED
    summary: str = ""  # role:text of each message, for a report's lost details


def coordinator_turns(state_root: Path) -> dict[str, CoordinatorTurn]:
    """Each request's turn as the coordinators' conversations store it (read after the run).
    A crash can cut the coordinator's own `ledger__record` call short: on resume it is
    answered `E_TOOL_INTERRUPTED` and not run again (a tool runs at most once), so the ledger
    cannot show that turn, which still ends with the coordinator's answer."""
    turns: dict[str, CoordinatorTurn] = {}
    instances = state_root / "swarms" / "default" / "instances"
    for directory in [key / "coordinator" for key in instances.glob("*")]:
        if not conversation_stored(directory):
            continue
        messages = read_messages(directory)
        ledger_calls = {
            call.id for m in messages for call in m.tool_calls if call.name == "ledger__record"
        }
        turn = CoordinatorTurn()
        for message in messages:
            text = message.content or ""
            if message.role == "user" and text.startswith("req "):
                turn = turns.setdefault(text.removeprefix("req ").strip(), CoordinatorTurn())
            calls = ",".join(call.name for call in message.tool_calls)
            turn.summary += f"{message.role}:{calls or text[:60]} | "
            if message.role == "tool" and ErrorCode.E_TOOL_INTERRUPTED in text:
                turn.cut_short |= message.tool_call_id in ledger_calls
            if message.role == "assistant" and not message.tool_calls and text.startswith("done "):
                turn.answered = True
    return turns
