"""Runs one tool call against the registry and the step's catalog; never raises.

Order (upstream `ToolExecutor`): catalog check, argument parsing and validation, handler lookup,
handler call. Every failure becomes a structured error the LLM reads, and the turn goes on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from typing import Any

import fastjsonschema
import msgspec

from agentproc.messages import ToolCall
from agentproc.tool_registry import ToolRegistry
from goondan.tools import ToolContext, ToolErrorInfo, ToolResult

DEFAULT_ERROR_MESSAGE_LIMIT = 1000
_TRUNCATION_SUFFIX = "... (truncated)"


def truncate_error_message(message: str, limit: int) -> str:
    """Unchanged at or under `limit`; else exactly `limit` characters ending in the suffix
    (a plain cut when the limit is shorter than the suffix)."""
    if len(message) <= limit:
        return message
    if limit <= len(_TRUNCATION_SUFFIX):
        return message[:limit]
    return message[: limit - len(_TRUNCATION_SUFFIX)] + _TRUNCATION_SUFFIX


async def execute_tool_call(
    registry: ToolRegistry,
    catalog: Collection[str],
    call: ToolCall,
    make_context: Callable[[ToolCall], ToolContext],
) -> ToolResult:
    if call.name not in catalog:
        return ToolResult.fail(
            ToolErrorInfo(
                code="E_TOOL_NOT_IN_CATALOG",
                name="ToolNotInCatalogError",
                message=f"Tool '{call.name}' is not available in the current Tool Catalog.",
                suggestion="Call one of the tools offered in this step: "
                + ", ".join(sorted(catalog)),
            )
        )
    entry = registry.get(call.name)
    if entry is None:
        return ToolResult.fail(
            ToolErrorInfo(
                code="E_TOOL_NOT_FOUND",
                name="ToolNotFoundError",
                message=f"Tool '{call.name}' has no handler in this agent's Tool Registry.",
            )
        )
    try:
        args = msgspec.json.decode(call.arguments or "{}")
    except msgspec.DecodeError as exc:
        return _invalid_args(call.name, f"arguments are not valid JSON ({exc})")
    if not isinstance(args, dict):
        return _invalid_args(call.name, "arguments must be a JSON object")
    try:
        entry.validate(args)
    except fastjsonschema.JsonSchemaValueException as exc:
        return _invalid_args(call.name, exc.message, schema=entry.parameters)

    ctx = make_context(call)
    try:
        if entry.is_async:
            output = await entry.handler(ctx, args)
        else:
            # Sync handlers run off the loop so a slow one never blocks other instances.
            output = await asyncio.to_thread(entry.handler, ctx, args)
    except asyncio.CancelledError:
        raise
    except BaseException as exc:  # noqa: BLE001 - handler errors are data, never crashes
        return ToolResult.fail(_error_info(exc, entry.error_message_limit))
    try:
        msgspec.json.encode(output)  # the LLM reads JSON: refuse what cannot become JSON
    except (TypeError, ValueError) as exc:
        return ToolResult.fail(
            ToolErrorInfo(
                code="E_TOOL_BAD_OUTPUT",
                name=type(exc).__name__,
                message=f"Tool '{call.name}' returned a value that is not JSON: {exc}",
            )
        )
    return ToolResult.ok(output)


def _invalid_args(name: str, problem: str, schema: dict[str, Any] | None = None) -> ToolResult:
    suggestion = "Fix the arguments to match the tool's parameters and call it again."
    if schema is not None:
        required = schema.get("required", [])
        allowed = list(schema.get("properties", {}))
        suggestion += f" required={required}, allowed={allowed}"
    return ToolResult.fail(
        ToolErrorInfo(
            code="E_TOOL_INVALID_ARGS",
            name="ToolInputValidationError",
            message=f"Invalid arguments for tool '{name}': {problem.replace('data', 'args', 1)}",
            suggestion=suggestion,
        )
    )


def _error_info(exc: BaseException, limit: int) -> ToolErrorInfo:
    message = str(exc) or "Unknown tool execution error"
    code = getattr(exc, "code", None)
    return ToolErrorInfo(
        code=code if isinstance(code, str) and code else "E_TOOL",
        name=type(exc).__name__,
        message=truncate_error_message(message, limit),
        suggestion=_str_or_none(getattr(exc, "suggestion", None)),
        help_url=_str_or_none(getattr(exc, "help_url", None)),
    )


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None
