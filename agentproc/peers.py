"""`ctx.runtime`: requests to other agents, always through the orchestrator.

Each outgoing `delegate` gets a local correlation id (a counter); the orchestrator answers it
with exactly one `delegate_result`. We also keep our own deadline a little past the request's
timeout, so a request never hangs even if the orchestrator is gone. An async request returns at
once; its answer is turned into a message for the caller's instance inbox, which the loop adds
to the conversation before its next step (or next turn).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import msgspec

from agentproc.messages import Message
from agentproc.runtime_context import (
    CALLER_INSTANCE_KEY,
    CALLER_TURN_ID,
    EVENT_ID,
    EVENT_METADATA,
    EVENT_TYPE,
    new_event_id,
)
from agentproc.tracing import current_span
from goondan.delegation import DelegateError, RequestTimeout, delegate_error
from goondan.logs import log_context
from goondan.settings import DEFAULTS
from goondan.tools import DelegateReply
from ipc import wire
from ipc.error_codes import ErrorCode
from ipc.tasks import TaskSet


class PeerClient:
    """Outstanding requests of this process, keyed by local correlation id."""

    def __init__(
        self,
        agent_name: str,
        send: Callable[[bytes], None],
        *,
        request_timeout_ms: int = DEFAULTS.daemon.request_timeout_ms,
        orchestrator_timeout_s: float = DEFAULTS.agent.orchestrator_timeout_s,
        backstop_s: float = DEFAULTS.agent.request_backstop_s,
    ) -> None:
        """`request_timeout_ms`: of a request that names none; `backstop_s`: how long past a
        request's limit we wait for the orchestrator's timeout answer (a vanished
        orchestrator); `orchestrator_timeout_s`: for the orchestrator's own commands."""
        self.agent_name = agent_name
        self._send = send
        self.request_timeout_ms = request_timeout_ms
        self._orchestrator_timeout_s = orchestrator_timeout_s
        self._backstop_s = backstop_s
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[wire.DelegateResult]] = {}
        self._calls: dict[str, asyncio.Future[wire.ControlReply]] = {}
        self.async_requests = TaskSet("async agent requests")  # `request_async`'s, all turns'

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
        span_id: str | None = None,
    ) -> wire.DelegateResult:
        future: asyncio.Future[wire.DelegateResult] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = future
        frame = wire.encode(
            wire.DELEGATE,
            self.agent_name,
            target,
            payload,
            correlation_id=cid,
            trace_id=trace_id,
            span_id=span_id,  # the caller's tool span: the callee's turn names it as parent
        )
        try:
            self._send(frame)
            # Not `asyncio.wait_for`: on 3.11 it returns the answer when the answer and a cancel
            # of this turn arrive together (`goondan cancel` of a trace reaches the callee, whose
            # cancelled answer and our own cancel can come in one read), and the turn cancelled
            # on request would go on as if it were not.
            async with asyncio.timeout(timeout_ms / 1000 + self._backstop_s):
                return await future
        except TimeoutError:
            raise RequestTimeout(
                f"Agent request to '{target}' timed out after {timeout_ms}ms "
                "(no answer from the orchestrator)"
            ) from None
        finally:
            self._waiting.pop(cid, None)

    async def call_orchestrator(self, command: str, args: wire.SpawnArgs | wire.ListArgs) -> Any:
        """A command for the orchestrator itself (`spawn`, `list`); raises `DelegateError`."""
        cid = f"c{next(self._ids)}"
        future: asyncio.Future[wire.ControlReply] = asyncio.get_running_loop().create_future()
        self._calls[cid] = future
        frame = wire.encode(
            wire.CONTROL,
            self.agent_name,
            wire.ORCHESTRATOR,
            wire.control(command, args),
            correlation_id=cid,
        )
        try:
            self._send(frame)
            async with asyncio.timeout(self._orchestrator_timeout_s):  # as in `request`
                reply = await future
        except TimeoutError:
            raise DelegateError(f"the orchestrator did not answer '{command}'") from None
        finally:
            self._calls.pop(cid, None)
        if not reply.ok:
            error = reply.error or wire.ErrorInfo(ErrorCode.AGENT_REQUEST_ERROR, "request refused")
            raise delegate_error(error.code, error.message, error.suggestion)
        return reply.result

    def send_event(
        self,
        target: str,
        payload: wire.Event,
        trace_id: str | None,
        span_id: str | None = None,
    ) -> None:
        self._send(
            wire.encode(
                wire.EVENT, self.agent_name, target, payload, trace_id=trace_id, span_id=span_id
            )
        )

    def resolve(self, correlation_id: str | None, result: wire.DelegateResult) -> bool:
        future = self._waiting.get(correlation_id or "")
        if future is None or future.done():
            return False  # late answer to a request we already gave up on
        future.set_result(result)
        return True

    def resolve_call(self, correlation_id: str | None, reply: wire.ControlReply) -> bool:
        future = self._calls.get(correlation_id or "")
        if future is None or future.done():
            return False
        future.set_result(reply)
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
        deliver_async: Callable[[Message], None],
    ) -> None:
        self._peers = peers
        self._instance_key = instance_key
        self._trace_id = trace_id
        self._call_chain = call_chain
        self._catalog = catalog
        self._deliver_async = deliver_async

    async def request(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
        event_type: str | None = None,
        metadata: dict[str, Any] | None = None,
        event_id: str | None = None,
    ) -> DelegateReply:
        cid = self._peers.new_correlation_id()
        about = self._about(event_id, event_type, metadata)
        return await self._request(cid, target, input, instance_key, timeout_ms, about)

    def request_async(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        timeout_ms: int | None = None,
        event_type: str | None = None,
        metadata: dict[str, Any] | None = None,
        event_id: str | None = None,
    ) -> str:
        """Send the request and return its correlation id at once; the answer (or error)
        reaches the conversation as an `inter_agent_response` message before a later step."""
        cid = self._peers.new_correlation_id()
        about = self._about(event_id, event_type, metadata)
        self._peers.async_requests.spawn(
            self._answer_later(cid, target, input, instance_key, timeout_ms, about),
            name=f"async request {cid} to {target}",
        )
        return cid

    def _about(
        self, event_id: str | None, event_type: str | None, metadata: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The request's metadata: what the target's `ctx.runtime` says about it."""
        about: dict[str, Any] = {
            EVENT_ID: event_id or new_event_id(),
            CALLER_INSTANCE_KEY: self._instance_key,
        }
        turn = log_context.get()  # the calling turn's, set for its whole run (goondan.logs)
        if turn is not None and "turnId" in turn:
            about[CALLER_TURN_ID] = turn["turnId"]
        if event_type:
            about[EVENT_TYPE] = event_type
        if metadata:
            about[EVENT_METADATA] = metadata
        return about

    async def _answer_later(
        self,
        cid: str,
        target: str,
        input: str,
        instance_key: str | None,
        timeout_ms: int | None,
        about: dict[str, Any],
    ) -> None:
        """An async request: its answer, error or cancellation goes to the conversation."""
        try:
            reply = await self._request(cid, target, input, instance_key, timeout_ms, about)
        except asyncio.CancelledError as exc:
            self._deliver_async(_async_message(cid, target, None, exc))
            raise
        except Exception as exc:
            self._deliver_async(_async_message(cid, target, None, exc))
        else:
            self._deliver_async(_async_message(cid, target, reply, None))

    async def _request(
        self,
        cid: str,
        target: str,
        input: str,
        instance_key: str | None,
        timeout_ms: int | None,
        about: dict[str, Any],
    ) -> DelegateReply:
        timeout = timeout_ms or self._peers.request_timeout_ms
        key = instance_key or self._instance_key
        me = self._peers.agent_name
        payload = wire.Delegate(
            input=input,
            instance_key=key,
            source=wire.Source("agent", me),
            call_chain=(*self._call_chain, me),
            timeout_ms=timeout,
            metadata=about,
        )
        result = await self._peers.request(
            target,
            payload,
            cid=cid,
            trace_id=self._trace_id,
            timeout_ms=timeout,
            span_id=current_span.get(),
        )
        if result.status == "error":
            error = result.error or wire.ErrorInfo(ErrorCode.AGENT_REQUEST_ERROR, "unknown error")
            raise delegate_error(error.code, error.message, error.suggestion)
        return DelegateReply(
            target, result.response or "", cid, result.instance_key or key, about[EVENT_ID]
        )

    async def send(
        self,
        target: str,
        input: str,
        *,
        instance_key: str | None = None,
        event_type: str | None = None,
        metadata: dict[str, Any] | None = None,
        event_id: str | None = None,
    ) -> str:
        me = self._peers.agent_name
        about = self._about(event_id, event_type, metadata)
        payload = wire.Event(
            input=input,
            instance_key=instance_key or self._instance_key,
            source=wire.Source("agent", me),
            metadata=about,
        )
        self._peers.send_event(target, payload, self._trace_id, current_span.get())
        event: str = about[EVENT_ID]
        return event

    async def spawn(
        self, target: str, *, instance_key: str | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        args = wire.SpawnArgs(target, instance_key, self._instance_key, cwd)
        result: dict[str, Any] = await self._peers.call_orchestrator("spawn", args)
        return result

    async def list(self, *, include_all: bool = False) -> dict[str, Any]:
        args = wire.ListArgs(include_all, self._instance_key)
        result: dict[str, Any] = await self._peers.call_orchestrator("list", args)
        return result

    def catalog(self) -> dict[str, Any]:
        return self._catalog


def _async_message(
    cid: str, target: str, reply: DelegateReply | None, exc: BaseException | None
) -> Message:
    """The conversation's message for an async request's `reply`, or the `exc` it ended in."""
    body: dict[str, Any] = {"type": "inter_agent_response", "requestId": cid, "fromAgentId": target}
    if isinstance(exc, asyncio.CancelledError):
        body.update(status="error", error={"code": ErrorCode.E_CANCELLED, "message": "cancelled"})
    elif exc is not None:
        code = getattr(exc, "code", ErrorCode.AGENT_REQUEST_ERROR)
        status = "timeout" if code == ErrorCode.AGENT_REQUEST_TIMEOUT else "error"
        body.update(status=status, error={"code": code, "message": str(exc)})
    else:
        assert reply is not None
        body.update(status="ok", response=reply.response)
    return Message(
        id=f"async-{cid}-{int(time.time() * 1000)}",
        role="user",
        content=json.dumps(body, ensure_ascii=False),
        metadata={"__goondanInterAgentResponse": msgspec.to_builtins(body)},
    )
