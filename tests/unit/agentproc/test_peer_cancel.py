"""A turn cancelled on request while it waits for another agent stays cancelled, even when
the other agent's answer arrives in the same moment (as when `goondan cancel` of a trace
reaches both, and the callee's cancelled answer and the caller's cancel are read together)."""

from __future__ import annotations

import asyncio

import pytest

from agentproc.peers import PeerClient
from ipc import wire


async def test_a_cancel_that_arrives_with_the_answer_is_not_lost() -> None:
    sent: list[bytes] = []
    peers = PeerClient("front", sent.append)
    request = wire.Delegate("work", "k", wire.Source("agent", "front"))
    waiting = asyncio.ensure_future(
        peers.request("back", request, cid="1", trace_id="t" * 32, timeout_ms=60_000)
    )
    await asyncio.sleep(0)  # the request is out; the turn waits for its answer
    assert len(sent) == 1
    # One read brings both: the callee's (cancelled) answer, then our turn's cancel.
    error = wire.ErrorInfo("E_TURN_CANCELLED", "cancelled")
    assert peers.resolve("1", wire.DelegateResult("error", "back", error=error))
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert peers.outstanding == 0


async def test_an_answer_still_comes_back_when_nothing_cancels() -> None:
    peers = PeerClient("front", lambda frame: None)
    request = wire.Delegate("work", "k", wire.Source("agent", "front"))
    waiting = asyncio.ensure_future(
        peers.request("back", request, cid="1", trace_id=None, timeout_ms=60_000)
    )
    await asyncio.sleep(0)
    assert peers.resolve("1", wire.DelegateResult("ok", "back", "done"))
    assert (await waiting).response == "done"
