"""ConnectorContext without a process: frames out through `send`, answers in through `handle`."""

from __future__ import annotations

import asyncio

import pytest

from goondan import (
    ConnectorContext,
    EventNotAcknowledged,
    EventRefused,
    ReplyFailed,
    ReplyTimeout,
    stringify_properties,
)
from goondan.connectors import build_event
from ipc import wire


class Wire:
    """Collects what the context sends and answers it like the orchestrator would."""

    def __init__(self) -> None:
        self.sent: list[wire.Envelope] = []
        self.ctx = ConnectorContext(
            connection_name="conn",
            connector_name="probe",
            config={"A": "1"},
            secrets={"TOKEN": "t"},
            send=self.send,
            ack_timeout_s=0.2,
        )
        self.arrived = asyncio.Event()

    def send(self, frame: bytes) -> None:
        self.sent.append(wire.decode(frame))
        self.arrived.set()

    async def next(self) -> tuple[wire.Envelope, wire.ConnectorEvent]:
        await asyncio.wait_for(self.arrived.wait(), 1)
        self.arrived.clear()
        env = self.sent[-1]
        return env, wire.decode_payload(env, wire.ConnectorEvent)

    def answer(self, type_: str, payload: object, cid: str | None) -> bool:
        frame = wire.encode(
            type_,
            wire.ORCHESTRATOR,
            "connection:conn",
            payload,  # type: ignore[arg-type]
            correlation_id=cid,
        )
        return self.ctx.handle(wire.decode(frame))


async def test_emit_sends_a_connector_event_and_returns_the_ack() -> None:
    w = Wire()
    task = asyncio.create_task(
        w.ctx.emit(
            "user_message",
            text="hi",
            instance_key="chat:1",
            properties={"n": 3, "b": True, "f": 1.5, "none": None},
        )
    )
    env, event = await w.next()
    assert env.type == wire.CONNECTOR_EVENT and env.from_ == "connection:conn"
    assert env.to == wire.ORCHESTRATOR and env.correlation_id and env.trace_id
    assert event == wire.ConnectorEvent(
        "user_message",
        wire.ConnectorMessage("text", text="hi"),
        "chat:1",
        {"n": "3", "b": "true", "f": "1.5"},
        reply=False,
    )
    assert w.answer(
        wire.EVENT_ACK, wire.EventAck(True, agent="a", instance_key="routed"), env.correlation_id
    )
    ack = await task
    assert (ack.accepted, ack.agent, ack.instance_key) == (True, "a", "routed")
    assert ack.correlation_id == env.correlation_id and ack.trace_id == env.trace_id
    assert w.ctx.in_flight == 0


async def test_correlation_ids_are_unique_and_late_answers_are_dropped() -> None:
    w = Wire()
    first = asyncio.create_task(w.ctx.emit("e", text="1", instance_key="k"))
    env1, _ = await w.next()
    second = asyncio.create_task(w.ctx.emit("e", text="2", instance_key="k"))
    env2, _ = await w.next()
    assert env1.correlation_id != env2.correlation_id
    w.answer(wire.EVENT_ACK, wire.EventAck(True), env2.correlation_id)
    w.answer(wire.EVENT_ACK, wire.EventAck(True), env1.correlation_id)
    await first, await second
    assert w.answer(wire.EVENT_ACK, wire.EventAck(True), env1.correlation_id)  # late: dropped
    assert not w.ctx.handle(wire.decode(wire.encode(wire.HEARTBEAT, "x", "y")))


async def test_refusal_and_missing_ack_raise() -> None:
    w = Wire()
    task = asyncio.create_task(w.ctx.emit("e", text="x", instance_key="k"))
    env, _ = await w.next()
    w.answer(
        wire.EVENT_ACK,
        wire.EventAck(False, error=wire.ErrorInfo("E_NO_ROUTE", "no rule matched")),
        env.correlation_id,
    )
    with pytest.raises(EventRefused) as refused:
        await task
    assert refused.value.code == "E_NO_ROUTE" and "no rule matched" in str(refused.value)
    with pytest.raises(EventNotAcknowledged, match="did not acknowledge event 'e'"):
        await w.ctx.emit("e", text="x", instance_key="k")
    assert w.ctx.in_flight == 0


async def test_request_returns_the_reply_or_raises_its_error() -> None:
    w = Wire()
    task = asyncio.create_task(w.ctx.request("e", text="q", instance_key="k"))
    env, event = await w.next()
    assert event.reply
    # The answer may even come before the ack has been processed.
    w.answer(wire.EVENT_ACK, wire.EventAck(True, agent="bot"), env.correlation_id)
    w.answer(
        wire.DELEGATE_RESULT,
        wire.DelegateResult("ok", "bot", "the answer", None, "k"),
        env.correlation_id,
    )
    reply = await task
    assert (reply.text, reply.agent, reply.instance_key) == ("the answer", "bot", "k")

    task = asyncio.create_task(w.ctx.request("e", text="q", instance_key="k"))
    env, _ = await w.next()
    w.answer(wire.EVENT_ACK, wire.EventAck(True), env.correlation_id)
    error = wire.ErrorInfo("E_AGENT_CRASHED", "the agent died")
    w.answer(
        wire.DELEGATE_RESULT, wire.DelegateResult("error", "bot", error=error), env.correlation_id
    )
    with pytest.raises(ReplyFailed) as failed:
        await task
    assert failed.value.code == "E_AGENT_CRASHED"

    task = asyncio.create_task(w.ctx.request("e", text="q", instance_key="k", timeout_s=0.05))
    env, _ = await w.next()
    w.answer(wire.EVENT_ACK, wire.EventAck(True), env.correlation_id)
    with pytest.raises(ReplyTimeout):
        await task
    assert w.ctx.in_flight == 0


async def test_start_request_confirms_first_and_replies_later() -> None:
    w = Wire()
    task = asyncio.create_task(w.ctx.start_request("e", text="q", instance_key="k"))
    env, _ = await w.next()
    w.answer(wire.EVENT_ACK, wire.EventAck(True), env.correlation_id)
    pending = await task
    assert not pending.done() and pending.ack.correlation_id == env.correlation_id
    w.answer(wire.DELEGATE_RESULT, wire.DelegateResult("ok", "bot", "later"), env.correlation_id)
    assert (await pending.reply()).text == "later"


def test_build_event_validates_and_accepts_the_upstream_shape() -> None:
    with pytest.raises(ValueError, match="instance_key"):
        build_event("e", text="x")
    with pytest.raises(ValueError, match="name"):
        build_event("", text="x", instance_key="k")
    with pytest.raises(ValueError, match="needs text"):
        build_event("e", instance_key="k")
    with pytest.raises(ValueError, match="url"):
        build_event("e", instance_key="k", message={"type": "image"})
    with pytest.raises(ValueError, match="name"):
        build_event("e", instance_key="k", message={"type": "file", "url": "https://x/f"})
    with pytest.raises(TypeError, match="property 'p'"):
        build_event("e", text="x", instance_key="k", properties={"p": {"nested": 1}})
    event = build_event(
        {
            "name": "user_message",
            "instanceKey": "tg:1",
            "message": {"type": "image", "url": "https://x/a.png"},
            "properties": {"chat_id": 1},
        }
    )
    assert event.message == wire.ConnectorMessage("image", url="https://x/a.png")
    assert event.properties == {"chat_id": "1"} and event.instance_key == "tg:1"
    with pytest.raises(TypeError):
        build_event({"name": "e"}, text="x")


def test_stringify_properties_drops_invalid_values_only_when_asked() -> None:
    values = {"a": 1, "b": False, "c": "x", "d": [1], "e": None}
    assert stringify_properties(values, drop_invalid=True) == {"a": "1", "b": "false", "c": "x"}
    with pytest.raises(TypeError):
        stringify_properties(values)


async def test_sleep_and_unless_stopping_wake_on_stop() -> None:
    w = Wire()
    assert await w.ctx.sleep(0.01) is True
    assert await w.ctx.unless_stopping(asyncio.sleep(0, result="done")) == "done"
    never = asyncio.get_running_loop().create_future()
    waiter = asyncio.create_task(w.ctx.unless_stopping(never))
    sleeper = asyncio.create_task(w.ctx.sleep(30))
    await asyncio.sleep(0.01)
    w.ctx.stopping.set()
    assert await waiter is None and never.cancelled()
    assert await sleeper is False
