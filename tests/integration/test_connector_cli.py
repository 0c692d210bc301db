"""The built-in `cli` connector reading a file (to its end) and a FIFO (with replies)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from tests.fakes.fake_orchestrator import FakeOrchestrator, write_bundle

pytestmark = pytest.mark.timeout(30)

CONNECTIONS = """
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: cli-file
spec:
  connectorRef: {kind: Connector, name: cli, package: "@goondan/base"}
  config:
    INPUT_PATH: {valueFrom: {env: CLI_INPUT}}
  ingress:
    rules:
      - match: {event: stdin_message}
        route: {}
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: cli-fifo
spec:
  connectorRef: {kind: Connector, name: cli, package: "@goondan/base"}
  config:
    INPUT_PATH: {valueFrom: {env: CLI_INPUT}}
    OUTPUT_PATH: {valueFrom: {env: CLI_OUTPUT}}
    REPLY: {value: "true"}
    DEFAULT_INSTANCE_KEY: {value: "term"}
"""


async def test_cli_reads_a_file_line_by_line_and_ends_at_eof() -> None:
    async with FakeOrchestrator() as orch:
        write_bundle(orch.dir / "b", CONNECTIONS)
        lines = [
            "hello there",
            "",
            json.dumps(
                {
                    "event": "custom",
                    "text": "from json",
                    "instanceKey": "k1",
                    "properties": {"n": 2, "flag": False, "skip": [1]},
                }
            ),
            "   ",
            "{not json",
        ]
        (orch.dir / "in.txt").write_text("\n".join(lines) + "\n")
        proc = await orch.spawn("cli-file", orch.dir / "b", {"CLI_INPUT": str(orch.dir / "in.txt")})
        assert await proc.wait() == 0, proc.logs()
        events = [e for _, e in orch.events]
        assert [(e.name, e.message.text, e.instance_key, e.properties) for e in events] == [
            ("stdin_message", "hello there", "cli:0", {}),
            ("custom", "from json", "k1", {"n": "2", "flag": "false"}),
            ("stdin_message", "{not json", "cli:4", {}),
        ]
        assert not any(e.reply for e in events)


async def test_cli_fifo_stays_open_and_writes_replies() -> None:
    async with FakeOrchestrator() as orch:
        write_bundle(orch.dir / "b", CONNECTIONS)
        fifo, out = orch.dir / "in.fifo", orch.dir / "out.txt"
        os.mkfifo(fifo)
        proc = await orch.spawn(
            "cli-fifo", orch.dir / "b", {"CLI_INPUT": str(fifo), "CLI_OUTPUT": str(out)}
        )
        await orch.wait_ready("cli-fifo", proc)
        for text in ("first", "second"):  # two writers, one after the other
            with open(fifo, "w") as writer:
                writer.write(text + "\n")
            await orch.wait_events(1 if text == "first" else 2, proc=proc)
        for _ in range(100):
            if out.exists() and out.read_text().count("\n") == 2:
                break
            await asyncio.sleep(0.05)
        assert out.read_text() == "echo: first\necho: second\n"
        assert [e.instance_key for _, e in orch.events] == ["term:0", "term:1"]
        await orch.stop("cli-fifo", proc)
