"""`ctx.runtime`: requests to other agents, always through the orchestrator.

Each outgoing `delegate` gets a local correlation id (a counter); the orchestrator answers it
with exactly one `delegate_result`. We also keep our own deadline a little past the request's
timeout, so a request never hangs even if the orchestrator is gone.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

from goondan.delegation import RequestTimeout, delegate_error
from goondan.tools import DelegateReply
from ipc import messages as wire

DEFAULT_TIMEOUT_MS = 60_000
_BACKSTOP_S = 2.0  # our deadline beyond the orchestrator's, for a vanished orchestrator


class PeerClient:
    """Outstanding requests of this process, keyed by local correlation id."""

    def __init__(self, agent_name: str, send: Callable[[bytes], None]) -> None:
        self.agent_name = agent_name
        self._send = send
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[wire.DelegateResult]] = {}

    @property
    def outstanding(self) -> int:
        return len(self._waiting)

    def new_correlation_id(self) -> str:
        return str(next(self._ids))

    async def request(
        self,
        target: str,
        payload: wire.Delegate,
        *,
        cid: str,
        trace_id: str | None,
        timeout_ms: int,
    ) -> wire.DelegateResult:
        future: asyncio.Future[wire.DelegateResult] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = future
        frame = wire.encode(
            wire.DELEGATE, self.agent_name, target, payload, correlation_id=cid, trace_id=trace_id
        )
        try:
            self._send(frame)
            return await asyncio.wait_for(future, timeout_ms / 1000 + _BACKSTOP_S)
        except TimeoutError:
            raise RequestTimeout(
                f"Agent request to '{target}' timed out after {timeout_ms}ms "
                "(no answer from the orchestrator)"
            ) from None
        finally:
            self._waiting.pop(cid, None)

    def send_event(self, target: str, payload: wire.Event, trace_id: str | None) -> None:
        self._send(wire.encode(wire.EVENT, self.agent_name, target, payload, trace_id=trace_id))

    def resolve(self, correlation_id: str | None, result: wire.DelegateResult) -> bool:
        future = self._waiting.get(correlation_id or "")
        if future is None or future.done():
            return False  # late answer to a request we already gave up on
        future.set_result(result)
        return True


class TurnRuntime:
    """The `AgentRuntime` a tool sees during one turn: it carries the turn's call chain."""

    def __init__(
        self,
        peers: PeerClient,
        *,
        instance_key: str,
        trace_id: str,
        call_chain: tuple[str, ...],
        catalog: dict[str, Any],
    ) -> None:
        self._peers = peers
        self._instance_key = instance_key
        self._trace_id = trace_id
        self._call_chain = call_chain
        self._catalog = catalog

    async def request(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
    ) -> DelegateReply:
        timeout = timeout_ms or DEFAULT_TIMEOUT_MS
        key = instance_key or self._instance_key
        me = self._peers.agent_name
        payload = wire.Delegate(
            input=input,
            instance_key=key,
            source=wire.Source("agent", me),
            call_chain=(*self._call_chain, me),
            timeout_ms=timeout,
        )
        cid = self._peers.new_correlation_id()
        result = await self._peers.request(
            target, payload, cid=cid, trace_id=self._trace_id, timeout_ms=timeout
        )
        if result.status == "error":
            error = result.error or wire.ErrorInfo("AGENT_REQUEST_ERROR", "unknown error")
            raise delegate_error(error.code, error.message, error.suggestion)
        return DelegateReply(target, result.response or "", cid, result.instance_key or key)

    async def send(self, target: str, input: str, *, instance_key: str | None = None) -> None:
        me = self._peers.agent_name
        payload = wire.Event(
            input=input,
            instance_key=instance_key or self._instance_key,
            source=wire.Source("agent", me),
        )
        self._peers.send_event(target, payload, self._trace_id)

    def catalog(self) -> dict[str, Any]:
        return self._catalog
