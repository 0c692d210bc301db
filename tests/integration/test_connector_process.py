"""The connector process against a real ROUTER: start-up, ready, heartbeats, emit/request,
refusals, start errors, crashes, shutdown and SIGTERM, and secrets kept out of its logs."""

from __future__ import annotations

import json
import signal

import pytest

from goondan.settings import Settings
from ipc import wire
from tests.fakes.fake_orchestrator import FakeOrchestrator, write_bundle

pytestmark = pytest.mark.timeout(30)

TOKEN = "s3cr3t-T0KEN-value-9f8e7d"

PROBE = """
import asyncio
import logging

from goondan import ConnectorConfigError, ConnectorContext, EventRefused, ReplyFailed


async def main(ctx: ConnectorContext) -> None:
    mode = ctx.config.get("MODE", "serve")
    token = ctx.secrets["TOKEN"]
    ctx.logger.info("using the token", token=token, header=f"Bearer {token}",
                    nested={"list": [token]})
    ctx.logger.warning("token in the message: " + token)
    try:
        raise RuntimeError(f"bad token {token}")
    except RuntimeError:
        ctx.logger.exception("failure with the token")
    logging.getLogger("some.library").warning("library saw %s", token)
    if mode == "crash":
        raise RuntimeError("boom " + token)
    if mode == "config":
        raise ConnectorConfigError("PORT is not a port")
    ack = await ctx.emit("probe", text="hello", instance_key="probe:1",
                         properties={"n": 1, "ok": True, "name": "x"})
    reply = await ctx.request("probe", text="question", instance_key="probe:2")
    try:
        await ctx.request("probe", text="fail", instance_key="probe:3")
        failed = "no"
    except ReplyFailed as exc:
        failed = exc.code
    try:
        await ctx.emit("refuse-me", text="x", instance_key="probe:4")
        refused = "no"
    except EventRefused as exc:
        refused = exc.code
    await ctx.emit("report", text=reply.text, instance_key="report",
                   properties={"agent": ack.agent, "failed": failed, "refused": refused,
                               "replyAgent": reply.agent})
    if mode == "return":
        return
    await ctx.stopping.wait()
    await ctx.emit("report", text="stopping seen", instance_key="report")
"""

CONNECTION = """
apiVersion: goondan.ai/v1
kind: Connector
metadata:
  name: probe
spec:
  entry: ./probe.py
  events:
    - name: probe
    - name: report
---
apiVersion: goondan.ai/v1
kind: Connection
metadata:
  name: probe-conn
spec:
  connectorRef: "Connector/probe"
  config:
    MODE:
      valueFrom:
        env: PROBE_MODE
  secrets:
    TOKEN:
      valueFrom:
        env: PROBE_TOKEN
  ingress:
    rules:
      - route: {}
"""


def _setup(orch: FakeOrchestrator) -> None:
    write_bundle(orch.dir / "b", CONNECTION, {"probe.py": PROBE})

    def answer(event: wire.ConnectorEvent) -> str | wire.ErrorInfo:
        if event.message.text == "fail":
            return wire.ErrorInfo("E_AGENT_CRASHED", "the agent died")
        return f"echo: {event.message.text}"

    orch.answer = answer
    orch.refuse = lambda e: (
        wire.ErrorInfo("E_NO_ROUTE", "no rule") if e.name == "refuse-me" else None
    )


def _assert_no_secret(logs: str) -> None:
    assert TOKEN not in logs
    assert "[redacted]" in logs


async def test_emit_request_and_shutdown() -> None:
    async with FakeOrchestrator() as orch:
        _setup(orch)
        env = {"PROBE_MODE": "serve", "PROBE_TOKEN": TOKEN}
        proc = await orch.spawn("probe-conn", orch.dir / "b", env)
        ready = await orch.wait_ready("probe-conn", proc)
        assert ready == wire.Ready(wire.PROTOCOL_VERSION, proc.pid, "connection:probe-conn")
        events = await orch.wait_events(5, proc=proc)
        hello, question, fail, refused, report = events
        assert hello.name == "probe" and hello.message.text == "hello"
        assert hello.instance_key == "probe:1" and not hello.reply
        assert hello.properties == {"n": "1", "ok": "true", "name": "x"}
        assert question.reply and fail.reply
        assert refused.name == "refuse-me"
        assert report.message.text == "echo: question"
        assert report.properties == {
            "agent": "assistant",
            "failed": "E_AGENT_CRASHED",
            "refused": "E_NO_ROUTE",
            "replyAgent": "assistant",
        }
        envelopes = [env for env, _ in orch.events]
        assert all(e.from_ == "connection:probe-conn" for e in envelopes)
        assert len({e.correlation_id for e in envelopes}) == 5
        assert all(e.trace_id for e in envelopes)
        await orch.stop("probe-conn", proc)
        assert orch.events[-1][1].message.text == "stopping seen"
        _assert_no_secret(proc.logs())


async def test_heartbeats_then_main_returning_exits_0() -> None:
    async with FakeOrchestrator() as orch:
        _setup(orch)
        orch.answer_delay_s = 1.3  # long enough for a heartbeat
        proc = await orch.spawn(
            "probe-conn",
            orch.dir / "b",
            {"PROBE_MODE": "return", "PROBE_TOKEN": TOKEN},
            settings=Settings.from_mapping({"agent": {"heartbeat_interval_s": 1.0}}),
        )
        await orch.wait_ready("probe-conn", proc)
        assert await proc.wait() == 0, proc.logs()
        assert orch.heartbeats.get("connection:probe-conn", 0) >= 1
        assert "connection:probe-conn" not in orch.shutdown_acks
        _assert_no_secret(proc.logs())


async def test_missing_env_is_a_start_error_naming_the_variable() -> None:
    async with FakeOrchestrator() as orch:
        _setup(orch)
        proc = await orch.spawn("probe-conn", orch.dir / "b", {"PROBE_MODE": "serve"})
        error = await orch.wait_start_error("probe-conn")
        assert await proc.wait() == 3
        assert error.code == "E_CONNECTOR_START"
        assert "secrets.TOKEN" in error.message and "PROBE_TOKEN" in error.message
        assert "connection:probe-conn" not in orch.ready


async def test_unknown_connection_and_missing_main_are_start_errors() -> None:
    async with FakeOrchestrator() as orch:
        _setup(orch)
        proc = await orch.spawn("nope", orch.dir / "b")
        error = await orch.wait_start_error("nope")
        assert await proc.wait() == 3
        assert "no Connection named 'nope'" in error.message and "probe-conn" in error.message
        (orch.dir / "b" / "probe.py").write_text("def main(ctx):\n    pass\n")
        proc = await orch.spawn(
            "probe-conn", orch.dir / "b", {"PROBE_MODE": "x", "PROBE_TOKEN": TOKEN}
        )
        error = await orch.wait_start_error("probe-conn")
        assert await proc.wait() == 3
        assert "async def main(ctx)" in error.message


async def test_crash_exits_1_and_config_error_exits_3_both_redacted() -> None:
    async with FakeOrchestrator() as orch:
        _setup(orch)
        proc = await orch.spawn(
            "probe-conn", orch.dir / "b", {"PROBE_MODE": "crash", "PROBE_TOKEN": TOKEN}
        )
        await orch.wait_ready("probe-conn", proc)
        assert await proc.wait() == 1
        logs = proc.logs()
        _assert_no_secret(logs)
        assert "connector crashed" in logs and "boom [redacted]" in logs
        lines = [json.loads(line) for line in logs.splitlines() if line.startswith("{")]
        assert any(line.get("logger") == "some.library" for line in lines)

        proc = await orch.spawn(
            "probe-conn", orch.dir / "b", {"PROBE_MODE": "config", "PROBE_TOKEN": TOKEN}
        )
        error = await orch.wait_start_error("probe-conn")
        assert await proc.wait() == 3
        assert "PORT is not a port" in error.message


async def test_sigterm_stops_cleanly_without_an_ack() -> None:
    async with FakeOrchestrator() as orch:
        _setup(orch)
        proc = await orch.spawn(
            "probe-conn", orch.dir / "b", {"PROBE_MODE": "serve", "PROBE_TOKEN": TOKEN}
        )
        await orch.wait_events(5, proc=proc)
        proc.proc.send_signal(signal.SIGINT)  # ignored: the orchestrator decides
        proc.proc.send_signal(signal.SIGTERM)
        assert await proc.wait() == 0, proc.logs()
        assert orch.events[-1][1].message.text == "stopping seen"
        assert "connection:probe-conn" not in orch.shutdown_acks
