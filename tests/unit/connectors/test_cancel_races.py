"""A connector task cancelled while it waits for the orchestrator stays cancelled, even when
the answer it waited for arrives in the same moment (one read can bring both): a connector
asked to stop must stop, not go on with an answer it was no longer waiting for."""

from __future__ import annotations

import asyncio

import pytest

from ipc import wire
from tests.unit.connectors.test_context import Wire


async def test_a_cancel_that_arrives_with_the_ack_is_not_lost() -> None:
    w = Wire()
    task = asyncio.create_task(w.ctx.emit("user_message", text="hi", instance_key="k"))
    env, _ = await w.next()
    assert w.answer(wire.EVENT_ACK, wire.EventAck(True, agent="a"), env.correlation_id)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_cancel_that_arrives_with_the_reply_is_not_lost() -> None:
    w = Wire()
    starting = asyncio.create_task(w.ctx.start_request("user_message", text="hi", instance_key="k"))
    env, _ = await w.next()
    assert w.answer(wire.EVENT_ACK, wire.EventAck(True, agent="a"), env.correlation_id)
    pending = await starting
    waiting = asyncio.create_task(pending.reply(timeout_s=5))
    await asyncio.sleep(0)  # waiting for the reply
    result = wire.DelegateResult("ok", "a", "hello")
    assert w.answer(wire.DELEGATE_RESULT, result, env.correlation_id)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_cancel_that_arrives_with_the_stop_is_not_lost() -> None:
    w = Wire()
    sleeping = asyncio.create_task(w.ctx.sleep(60))
    await asyncio.sleep(0)
    w.ctx.stopping.set()
    sleeping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeping
