"""The control socket's commands: one request/reply envelope, one registry of handlers.

`goondan status/stop/restart` are thin clients of this; `send` uses a plain `delegate`.
`AgentCalls` is the other direction: a command to an agent process (`instance.drop`).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from ipc import wire
from ipc.error_codes import ErrorCode

# A command's handler takes the args Struct `wire.CLI_COMMANDS` declares for it, and returns
# the declared result Struct.
Handler = Callable[[Any], Awaitable[Any]]


class CommandError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ControlCommands:
    """`{command: handler}` for the commands `declared` names (`wire.CLI_COMMANDS`)."""

    def __init__(
        self, handlers: Mapping[str, Handler], declared: Mapping[str, wire.Command]
    ) -> None:
        if set(handlers) != set(declared):
            raise ValueError(f"handlers for {sorted(handlers)}, commands {sorted(declared)}")
        self._handlers = {name: (declared[name], h) for name, h in handlers.items()}

    async def run(self, command: wire.Control) -> wire.ControlReply:
        entry = self._handlers.get(command.command)
        if entry is None:
            known = ", ".join(sorted(self._handlers))
            message = f"unknown command '{command.command}' (known: {known})"
            return wire.ControlReply(
                False, error=wire.ErrorInfo(ErrorCode.E_UNKNOWN_COMMAND, message)
            )
        declared, handler = entry
        try:
            result = await handler(wire.decode_args(command, declared.args))
            if not isinstance(result, declared.result):
                raise TypeError(f"'{command.command}' returned {type(result).__name__}")
            return wire.ControlReply(True, result)
        except wire.BadArgs as exc:
            return wire.ControlReply(False, error=wire.ErrorInfo(ErrorCode.E_BAD_REQUEST, str(exc)))
        except CommandError as exc:
            return wire.ControlReply(False, error=wire.ErrorInfo(exc.code, str(exc)))
        except Exception as exc:  # a bug: answer instead of leaving the client waiting
            structlog.get_logger().exception("control command failed", command=command.command)
            error = wire.ErrorInfo(ErrorCode.E_INTERNAL, f"{type(exc).__name__}: {exc}")
            return wire.ControlReply(False, error=error)


class AgentCalls:
    """Commands the orchestrator sends to an agent process, each answered by its reply."""

    def __init__(self, send: Callable[[str, bytes], bool]) -> None:
        self._send = send  # (agent, frame) -> False when the agent is not there
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[wire.ControlReply]] = {}

    async def call(self, agent: str, command: wire.Control, timeout_s: float) -> wire.ControlReply:
        cid = f"call-{next(self._ids)}"
        frame = wire.encode(wire.CONTROL, wire.ORCHESTRATOR, agent, command, correlation_id=cid)
        future: asyncio.Future[wire.ControlReply] = asyncio.get_running_loop().create_future()
        self._waiting[cid] = future
        try:
            if not self._send(agent, frame):
                error = wire.ErrorInfo(ErrorCode.E_AGENT_GONE, f"agent '{agent}' is not running")
                return wire.ControlReply(False, error=error)
            async with asyncio.timeout(timeout_s):
                return await future
        except TimeoutError:
            message = f"agent '{agent}' did not answer '{command.command}' in {timeout_s:g} s"
            return wire.ControlReply(False, error=wire.ErrorInfo(ErrorCode.E_TIMEOUT, message))
        finally:
            self._waiting.pop(cid, None)

    def on_reply(self, env: wire.Envelope) -> bool:
        """An agent's `control_reply`; False when nobody waits for it (late, or unknown)."""
        future = self._waiting.pop(env.correlation_id or "", None)
        if future is None or future.done():
            return False
        future.set_result(wire.decode_payload(env, wire.ControlReply))
        return True
