"""The control socket's commands: one request/reply envelope, one registry of handlers.

`goondan status/stop/restart` are thin clients of this; `send` uses a plain `delegate`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from ipc import messages as wire

Handler = Callable[[dict[str, Any]], Awaitable[Any]]


class CommandError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class ControlCommands:
    def __init__(self, handlers: dict[str, Handler]) -> None:
        self._handlers = handlers

    async def run(self, command: wire.Control) -> wire.ControlReply:
        handler = self._handlers.get(command.command)
        if handler is None:
            known = ", ".join(sorted(self._handlers))
            message = f"unknown command '{command.command}' (known: {known})"
            return wire.ControlReply(False, error=wire.ErrorInfo("E_UNKNOWN_COMMAND", message))
        try:
            return wire.ControlReply(True, await handler(command.args))
        except CommandError as exc:
            return wire.ControlReply(False, error=wire.ErrorInfo(exc.code, str(exc)))
        except Exception as exc:  # a bug: answer instead of leaving the client waiting
            structlog.get_logger().exception("control command failed", command=command.command)
            error = wire.ErrorInfo("E_INTERNAL", f"{type(exc).__name__}: {exc}")
            return wire.ControlReply(False, error=error)
