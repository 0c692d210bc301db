"""The Tool Registry: every executable handler of this agent, loaded once at start.

Each Tool resource's `entry` module defines `handlers = {"export": fn}`; each export becomes
`{resource}__{export}`. Argument validators are compiled once here, not per call.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
from collections.abc import Callable
from typing import Any

import fastjsonschema
import msgspec

from agentproc.messages import ToolDefinition
from goondan.bundle.model import Resource, ToolSpec

Handler = Callable[..., Any]


class ToolLoadError(Exception):
    """A Tool resource whose entry cannot be imported or lacks a handler; the agent cannot start."""


class ToolEntry(msgspec.Struct, frozen=True):
    name: str  # "{resource}__{export}"
    resource: str
    export: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    is_async: bool
    validate: Callable[[Any], Any]
    error_message_limit: int

    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.description, self.parameters)


class ToolRegistry:
    def __init__(self, entries: list[ToolEntry]) -> None:
        self._entries = {entry.name: entry for entry in entries}

    @classmethod
    def from_resources(cls, tools: list[Resource]) -> ToolRegistry:
        entries: list[ToolEntry] = []
        for resource in tools:
            entries.extend(_load_tool(resource))
        return cls(entries)

    def get(self, name: str) -> ToolEntry | None:
        return self._entries.get(name)

    def names(self) -> list[str]:
        return list(self._entries)

    def definitions(self) -> list[ToolDefinition]:
        return [entry.definition() for entry in self._entries.values()]


def _load_tool(resource: Resource) -> list[ToolEntry]:
    spec: ToolSpec = resource.spec
    handlers = _import_handlers(resource)
    entries = []
    for export in spec.exports:
        handler = handlers.get(export.name)
        if handler is None or not callable(handler):
            raise ToolLoadError(
                f"{resource.label}: {resource.entry_path()} has no handler for export "
                f"'{export.name}'; add it to `handlers = {{\"{export.name}\": fn}}`"
            )
        try:
            validator = fastjsonschema.compile(export.parameters)
        except fastjsonschema.JsonSchemaDefinitionException as exc:
            raise ToolLoadError(
                f"{resource.label}: export '{export.name}' has an invalid parameters schema: {exc}"
            ) from None
        entries.append(
            ToolEntry(
                name=f"{resource.name}__{export.name}",
                resource=resource.name,
                export=export.name,
                description=export.description,
                parameters=export.parameters,
                handler=handler,
                is_async=inspect.iscoroutinefunction(handler),
                validate=validator,
                error_message_limit=spec.error_message_limit,
            )
        )
    return entries


def _import_handlers(resource: Resource) -> dict[str, Handler]:
    path = resource.entry_path()
    module_name = f"goondan_tool__{_safe(resource.package)}__{_safe(resource.name)}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ToolLoadError(f"{resource.label}: cannot import {path} (is it a .py file?)")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:  # user code: report it, don't crash with a traceback
        raise ToolLoadError(
            f"{resource.label}: importing {path} failed: {type(exc).__name__}: {exc}"
        ) from exc
    handlers = getattr(module, "handlers", None)
    if not isinstance(handlers, dict):
        raise ToolLoadError(
            f'{resource.label}: {path} must define `handlers = {{"export_name": fn, ...}}`'
        )
    return handlers


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text)
