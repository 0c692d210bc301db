"""The Tool Registry: every executable handler of this agent.

Config tools come from the agent's Tool resources, loaded once at start: each resource's
`entry` module defines `handlers = {"export": fn}`, and each export becomes
`{resource}__{export}`. An MCP Tool's exports are its server's tools (`agentproc.mcp_tools`),
replaced as a group when the server says its list changed. Extensions add tools at run time
(`api.tools.register`); a config tool keeps its name if an extension registers the same one.
Argument validators are compiled once, when a tool is registered, not per call.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any, Literal

import fastjsonschema
import msgspec

from agentproc.messages import ToolDefinition
from goondan.bundle.model import Resource, ToolSpec
from goondan.bundle.names import LLM_TOOL_NAME, TOOL_SEPARATOR
from goondan.tools import ToolCatalogItem, ToolSource

Handler = Callable[..., Any]
Source = Literal["config", "extension", "runtime"]
DEFAULT_ERROR_MESSAGE_LIMIT = 1000


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
    error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT
    timeout_ms: int | None = None  # None: the agent's default
    sequential: bool = False
    source: Source = "config"
    origin: ToolSource | None = None  # what the catalog shows as `source` instead

    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.description, self.parameters)

    def catalog_item(self) -> ToolCatalogItem:
        source = self.origin if self.origin is not None else self.source
        return ToolCatalogItem(self.name, self.description, self.parameters, source)


def check_tool_name(name: str) -> str | None:
    """Why `name` cannot be a tool name, or None: `{resource}__{export}`, one separator, both
    parts non-empty, and the whole within what OpenAI and Anthropic accept."""
    resource, sep, export = name.partition(TOOL_SEPARATOR)
    if not sep or not resource or not export:
        return f"'{name}' must have the form '{{name}}{TOOL_SEPARATOR}{{tool}}'"
    if TOOL_SEPARATOR in export:
        return f"'{name}' contains '{TOOL_SEPARATOR}' more than once"
    if not LLM_TOOL_NAME.match(name):
        return f"'{name}' must match ^[a-zA-Z0-9_-]{{1,64}}$ (what LLM APIs accept)"
    return None


def make_entry(
    name: str,
    description: str,
    parameters: dict[str, Any],
    handler: Handler,
    *,
    error_message_limit: int = DEFAULT_ERROR_MESSAGE_LIMIT,
    timeout_ms: int | None = None,
    sequential: bool = False,
    source: Source = "config",
    origin: ToolSource | None = None,
) -> ToolEntry:
    """A registry entry with its validator compiled. Raises ValueError for a bad name, handler
    or schema."""
    problem = check_tool_name(name)
    if problem is not None:
        raise ValueError(problem)
    if not callable(handler):
        raise ValueError(f"the handler of '{name}' is not callable")
    try:
        validator = quick_validator(parameters, fastjsonschema.compile(parameters))
    except Exception as exc:  # fastjsonschema raises assorted errors for malformed schemas
        raise ValueError(f"'{name}' has an invalid parameters schema: {exc}") from None
    resource, _, export = name.partition(TOOL_SEPARATOR)
    return ToolEntry(
        name=name,
        resource=resource,
        export=export,
        description=description,
        parameters=parameters,
        handler=handler,
        is_async=inspect.iscoroutinefunction(handler),
        validate=validator,
        error_message_limit=error_message_limit,
        timeout_ms=timeout_ms,
        sequential=sequential,
        source=source,
        origin=origin,
    )


# JSON Schema types and the Python types decoded JSON has for them, for `quick_validator`:
# a value of one of these types is always valid for the type (bool is not an int here).
_EXACT_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
    "object": (dict,),
    "array": (list,),
}
_NOTES = {"description", "title"}  # keywords that constrain nothing
_ABSENT = object()  # a missing property's value: its type is in no `_EXACT_TYPES` entry


def quick_validator(schema: Any, compiled: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`compiled`, preceded by a quicker check when `schema` is a flat object schema (only
    typed properties, `required` and `additionalProperties: false`, as most tools declare).

    The quick check accepts only arguments that `compiled` accepts unchanged (no defaults
    to fill in), and hands everything else to `compiled`, so errors and results are the
    compiled validator's own; it skips the generic code's sets and per-keyword branches."""
    plan = _flat_object(schema)
    if plan is None:
        return compiled
    types, required, closed = plan
    if closed and required == types.keys():
        count, declared = len(types), tuple(types.items())

        def validate_exact(data: Any) -> Any:
            # Exactly the declared properties: as many keys, each one of them, well typed.
            if type(data) is dict and len(data) == count:
                for key, allowed in declared:
                    if type(data.get(key, _ABSENT)) not in allowed:
                        break
                else:
                    return data
            return compiled(data)

        return validate_exact

    def validate(data: Any) -> Any:
        if type(data) is dict and data.keys() >= required:
            for key, value in data.items():
                expected = types.get(key)
                if expected is None:
                    if closed:
                        break
                elif type(value) not in expected:
                    break
            else:
                return data
        return compiled(data)

    return validate


def _flat_object(
    schema: Any,
) -> tuple[dict[str, tuple[type, ...]], frozenset[str], bool] | None:
    """(types by property, required names, whether other properties are refused), or None
    when the schema says anything more."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    if not set(schema) <= {"type", "properties", "required", "additionalProperties", *_NOTES}:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if not isinstance(properties, dict) or not isinstance(additional, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(n, str) for n in required):
        return None
    types: dict[str, tuple[type, ...]] = {}
    for key, sub in properties.items():
        if not isinstance(sub, dict) or not set(sub) <= {"type", *_NOTES}:
            return None
        declared = sub.get("type")
        names: list[Any] = declared if isinstance(declared, list) else [declared]
        if not names or not all(isinstance(n, str) and n in _EXACT_TYPES for n in names):
            return None
        types[key] = tuple(t for n in names for t in _EXACT_TYPES[n])
    return types, frozenset(required), not additional


class ToolRegistry:
    def __init__(self, entries: list[ToolEntry]) -> None:
        self._config = {entry.name: entry for entry in entries if entry.source == "config"}
        self._dynamic = {entry.name: entry for entry in entries if entry.source != "config"}
        # What `get` reads, config tools over the others; changed in place, so that `get` can
        # be its own method: one C call per tool call, no Python frame.
        self._by_name: dict[str, ToolEntry] = {}
        self.get: Callable[[str], ToolEntry | None] = self._by_name.get
        self._merge()
        self.version = 0  # bumped on every change, so a cached catalog knows to rebuild
        # Catalog refreshes under way (an MCP server's `list_changed`): the next step waits
        # for them, so it offers the new list.
        self.refreshing: set[asyncio.Task[None]] = set()

    @classmethod
    def from_resources(cls, tools: list[Resource]) -> ToolRegistry:
        entries: list[ToolEntry] = []
        for resource in tools:
            if resource.spec.mcp is None:  # MCP Tools are added once their servers answer
                entries.extend(_load_tool(resource))
        return cls(entries)

    def replace_group(self, resource: str, entries: list[ToolEntry]) -> None:
        """Swap the config tools of Tool `resource` for `entries` (an MCP server's new list),
        keeping the group's place in the declared order."""
        merged: dict[str, ToolEntry] = {}
        placed = False
        for name, entry in self._config.items():
            if entry.resource == resource:
                if not placed:
                    merged.update((e.name, e) for e in entries)
                    placed = True
                continue
            merged[name] = entry
        if not placed:
            merged.update((e.name, e) for e in entries)
        self._config = merged
        self._merge()
        self.version += 1

    async def settle(self, timeout_s: float = 10.0) -> None:
        """Wait (a bounded time) for the catalog refreshes under way."""
        pending = set(self.refreshing)
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    def register(self, entry: ToolEntry) -> bool:
        """Add (or replace) an extension or runtime tool. False when a config tool already
        has the name: the config tool wins."""
        if entry.name in self._config:
            return False
        self._dynamic[entry.name] = entry
        self._merge()
        self.version += 1
        return True

    def _merge(self) -> None:
        self._by_name.clear()
        self._by_name.update(self._dynamic)
        self._by_name.update(self._config)  # a config tool wins over a same-named other

    def names(self) -> list[str]:
        return [*self._config, *(n for n in self._dynamic if n not in self._config)]

    def entries(self) -> Iterator[ToolEntry]:
        """Config tools in declared order, then the others in registration order."""
        yield from self._config.values()
        yield from self._dynamic.values()

    def definitions(self) -> list[ToolDefinition]:
        return [entry.definition() for entry in self.entries()]


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
            entry = make_entry(
                f"{resource.name}{TOOL_SEPARATOR}{export.name}",
                export.description,
                export.parameters,
                handler,
                error_message_limit=spec.error_message_limit,
                timeout_ms=spec.timeout_ms,
                sequential=spec.sequential,
            )
        except ValueError as exc:
            raise ToolLoadError(f"{resource.label}: export '{export.name}': {exc}") from None
        entries.append(msgspec.structs.replace(entry, resource=resource.name, export=export.name))
    return entries


def import_entry_module(resource: Resource, prefix: str) -> Any:
    """Import a resource's `entry` file as a fresh module. Raises ImportError with a message
    naming the resource and the cause (user code: no traceback needed)."""
    path = resource.entry_path()
    module_name = f"{prefix}__{_safe(resource.package)}__{_safe(resource.name)}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"{resource.label}: cannot import {path} (is it a .py file?)")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise ImportError(
            f"{resource.label}: importing {path} failed: {type(exc).__name__}: {exc}"
        ) from exc
    return module


def _import_handlers(resource: Resource) -> dict[str, Handler]:
    try:
        module = import_entry_module(resource, "goondan_tool")
    except ImportError as exc:
        raise ToolLoadError(str(exc)) from exc
    handlers = getattr(module, "handlers", None)
    if not isinstance(handlers, dict):
        raise ToolLoadError(
            f"{resource.label}: {resource.entry_path()} must define "
            f'`handlers = {{"export_name": fn, ...}}`'
        )
    return handlers


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in text)
