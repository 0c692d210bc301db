"""Errors of agent-to-agent requests, one class per code on the wire.

A `DelegateError` is a `ToolError`, so a tool that lets one escape gives the LLM the same
structured error the orchestrator produced.
"""

from __future__ import annotations

from goondan.tools import ToolError
from ipc.error_codes import ErrorCode


class DelegateError(ToolError):
    code = ErrorCode.AGENT_REQUEST_ERROR


class AgentNotFound(DelegateError):
    code = ErrorCode.AGENT_NOT_FOUND


class CircularCall(DelegateError):
    code = ErrorCode.CIRCULAR_CALL_DETECTED


class RequestTimeout(DelegateError):
    code = ErrorCode.AGENT_REQUEST_TIMEOUT


class AgentCrashed(DelegateError):
    code = ErrorCode.E_AGENT_CRASHED


class DeliveryFailed(DelegateError):
    code = ErrorCode.IPC_DELIVERY_FAILED


_BY_CODE: dict[str, type[DelegateError]] = {
    cls.code: cls
    for cls in (AgentNotFound, CircularCall, RequestTimeout, AgentCrashed, DeliveryFailed)
}


def delegate_error(code: str, message: str, suggestion: str | None = None) -> DelegateError:
    """The exception for a wire error code (unknown codes keep their code on the base class)."""
    cls = _BY_CODE.get(code, DelegateError)
    return cls(message, code=code, suggestion=suggestion)
