"""`goondan cancel`: stop running turns, and the turns they wait on, down the chain.

The orchestrator asks each agent that may run a matching turn to cancel it (`turn.cancel`),
and answers itself the matching requests still waiting for an agent's process. A cancelled
turn answers its requester with `E_TURN_CANCELLED` like any answer, so the request is settled
(and journaled as done). The delegations a cancelled turn was waiting on are the requests in
flight from that agent with the same trace id: their targets are asked to cancel those
requests by id, and so on down the chain. A connector may cancel only the traces its own
events started (`trace_cancel`, the webhook's `POST {PATH}/cancel`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import structlog

from ipc import wire
from orchestrator.control import AgentCalls
from orchestrator.router import Router


async def cancel_turns(
    args: wire.TurnCancelArgs,
    agents: Iterable[str],
    ready: Callable[[str], bool],
    router: Router,
    calls: AgentCalls,
    timeout_s: float,
) -> list[wire.CancelledTurn]:
    """Cancel what `args` matches on `agents` (asking those that are `ready`), then what those
    turns wait on."""
    log = structlog.get_logger().bind(component="cancel")
    names = list(agents)
    cancelled = router.cancel_waiting(names, args.instance_key, args.trace_id)
    asks = [(agent, args) for agent in names if ready(agent)]
    asked: set[str] = set()  # request ids already asked for
    while asks:
        replies = await asyncio.gather(
            *(calls.call(agent, wire.control("turn.cancel", a), timeout_s) for agent, a in asks)
        )
        found: list[wire.CancelledTurn] = []
        for (agent, _), reply in zip(asks, replies, strict=True):
            if not reply.ok:
                error = reply.error
                log.warning("an agent could not cancel", agent=agent, error=error and error.message)
                continue
            found += wire.decode_result(reply, wire.Cancelled).turns
        cancelled += found
        asks = []
        for turn in found:
            caller = turn.agent.encode()
            for pending in list(router.pending.values()):
                if (
                    pending.requester.channel == "agent"
                    and pending.requester.identity == caller
                    and pending.trace_id == turn.trace_id
                    and pending.oid not in asked
                ):
                    asked.add(pending.oid)
                    waiting = router.cancel_undelivered(pending.oid)
                    if waiting is not None:
                        cancelled.append(waiting)
                    else:
                        asks.append((pending.target, wire.TurnCancelArgs(request_id=pending.oid)))
    return cancelled
