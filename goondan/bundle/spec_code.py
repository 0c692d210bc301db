"""Spec parsers for the kinds that point at Python code: Tool, Extension, Connector.

`entry` paths are only read here; whether they stay inside the bundle and exist is checked in
`files.py`, once every resource's root is known.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from goondan.bundle import codes
from goondan.bundle.fields import Checker
from goondan.bundle.files import check_file
from goondan.bundle.model import (
    ConnectorEventSpec,
    ConnectorSpec,
    ExtensionSpec,
    ToolExport,
    ToolSpec,
)
from goondan.bundle.names import LLM_TOOL_NAME, TOOL_SEPARATOR, llm_tool_name
from goondan.bundle.schemas import compile_schema
from goondan.bundle.spec_agents import SPEC

DEFAULT_ERROR_MESSAGE_LIMIT = 1000  # upstream default for errorMessageLimit
_EVENT_PROPERTY_TYPES = ("string", "number", "integer", "boolean")
_LLM_NAME_WHY = (
    "OpenAI and Anthropic reject tool names outside ^[a-zA-Z0-9_-]{1,64}$ "
    "(letters, digits, '_' and '-', at most 64 characters)"
)


def _entry(chk: Checker, data: dict[str, Any]) -> str | None:
    """`spec.entry`: a .py file inside the resource's root."""
    entry = chk.optional_string(data, SPEC, "entry")
    if entry is not None and not check_file(
        chk, (*SPEC, "entry"), entry, chk.root, what="entry", python=True
    ):
        return None
    return entry


def parse_tool(chk: Checker, spec: Any, name: str | None) -> ToolSpec | None:
    allowed = (
        "entry",
        "exports",
        "mcp",
        "include",
        "exclude",
        "errorMessageLimit",
        "timeoutMs",
        "sequential",
    )
    data = chk.mapping(SPEC, spec, allowed)
    if data is None:
        return None
    mark = chk.mark()
    mcp = None
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    if data.get("mcp") is not None:
        # `entry` XOR `mcp`: an MCP Tool's exports are the server's tools.
        for key in ("entry", "exports"):
            if data.get(key) is not None:
                chk.error(
                    (*SPEC, key),
                    f"'{key}' cannot be set beside 'mcp': the MCP server's tools are the exports",
                    f"remove '{key}', or remove 'mcp' for a Python Tool",
                )
        from goondan.bundle.spec_mcp import parse_filters, parse_mcp  # MCP Tools only

        mcp = parse_mcp(chk, data["mcp"])
        include, exclude = parse_filters(chk, data)
        entry = None
    else:
        for key in ("entry", "exports"):
            if data.get(key) is None:
                chk.error(
                    (*SPEC, key),
                    f"required field '{key}' is missing",
                    f"add '{key}' (or 'mcp' for a Tool whose tools come from an MCP server)",
                )
        for key in ("include", "exclude"):
            if data.get(key) is not None:
                chk.error((*SPEC, key), f"'{key}' filters an MCP server's tools: it needs 'mcp'")
        entry = _entry(chk, data)
    limit: int | None = DEFAULT_ERROR_MESSAGE_LIMIT
    if data.get("errorMessageLimit") is not None:
        limit = chk.integer((*SPEC, "errorMessageLimit"), data["errorMessageLimit"], minimum=1)
    timeout_ms = None
    if data.get("timeoutMs") is not None:
        timeout_ms = chk.integer((*SPEC, "timeoutMs"), data["timeoutMs"], minimum=1)
    sequential = False
    if data.get("sequential") is not None:
        sequential = chk.boolean((*SPEC, "sequential"), data["sequential"]) is True
    tool_name_ok = name is not None and _check_tool_name(chk, name)
    exports: list[ToolExport] = []
    if data.get("exports") is not None and mcp is None:
        exports = _exports(chk, data["exports"], name if tool_name_ok else None)
    if not chk.clean_since(mark) or (entry is None and mcp is None) or limit is None:
        return None
    return ToolSpec(
        entry=entry,
        exports=tuple(exports),
        error_message_limit=limit,
        timeout_ms=timeout_ms,
        sequential=sequential,
        mcp=mcp,
        include=include,
        exclude=exclude,
    )


def _check_tool_name(chk: Checker, name: str) -> bool:
    path = ("metadata", "name")
    if TOOL_SEPARATOR in name:
        chk.error(
            path,
            f"Tool name '{name}' must not contain '{TOOL_SEPARATOR}': the LLM sees "
            f"'{{tool}}{TOOL_SEPARATOR}{{export}}' and must be able to split it",
            "use single '-' or '_' separators",
            codes.INVALID_NAME,
        )
        return False
    if not LLM_TOOL_NAME.match(name):
        chk.error(
            path,
            f"Tool name '{name}' cannot be part of an LLM tool name: {_LLM_NAME_WHY}",
            "rename it with letters, digits, '-' and '_' only",
            codes.INVALID_NAME,
        )
        return False
    return True


def _exports(chk: Checker, value: Any, tool: str | None) -> list[ToolExport]:
    path = (*SPEC, "exports")
    out: list[ToolExport] = []
    seen: set[str] = set()
    for i, item in enumerate(chk.sequence(path, value, min_items=1) or []):
        ipath = (*path, i)
        data = chk.mapping(
            ipath,
            item,
            ("name", "description", "parameters"),
            ("name", "description", "parameters"),
        )
        if data is None:
            continue
        name = chk.optional_string(data, ipath, "name")
        if name is not None:
            if name in seen:
                chk.error(
                    (*ipath, "name"),
                    f"export '{name}' is declared twice in this Tool",
                    "give each export a unique name",
                )
            seen.add(name)
            _check_export_name(chk, (*ipath, "name"), tool, name)
        description = chk.optional_string(data, ipath, "description")
        parameters = _parameters(chk, (*ipath, "parameters"), data.get("parameters"))
        if name and description and parameters is not None:
            out.append(ToolExport(name=name, description=description, parameters=parameters))
    return out


def _check_export_name(
    chk: Checker, path: tuple[str | int, ...], tool: str | None, name: str
) -> None:
    if TOOL_SEPARATOR in name:
        chk.error(
            path,
            f"export name '{name}' must not contain '{TOOL_SEPARATOR}': the LLM sees "
            f"'{{tool}}{TOOL_SEPARATOR}{{export}}' and must be able to split it",
            "use single '-' or '_' separators",
        )
        return
    if tool is None:  # the tool's own name is already reported
        return
    full = llm_tool_name(tool, name)
    if not LLM_TOOL_NAME.match(full):
        chk.error(
            path,
            f"LLM tool name '{full}' is invalid: {_LLM_NAME_WHY}",
            "shorten the Tool or export name"
            if len(full) > 64
            else "use letters, digits, '-' and '_' only",
        )


def _parameters(chk: Checker, path: tuple[str | int, ...], value: Any) -> dict[str, Any] | None:
    """A JSON Schema for the arguments: `type: object` at the top, and a valid schema."""
    if value is None:
        return None  # reported as missing
    data = chk.mapping(path, value, (), open_keys=True)
    if data is None:
        return None
    if data.get("type") != "object":
        chk.error(
            (*path, "type") if "type" in data else path,
            "parameters must be a JSON Schema with 'type: object' (tool arguments are "
            f"always an object), got type {data.get('type')!r}",
            "write 'type: object' with 'properties: {...}'",
        )
        return None
    problem = _schema_problem(json.dumps(data, sort_keys=True, default=str))
    unknown = _unknown_type(data, ()) if problem else None  # only then: loads are many
    if unknown is not None:
        where, kind = unknown
        chk.error(
            (*path, *where),
            f"unknown JSON Schema type {kind!r}",
            f"use one of: {', '.join(sorted(_JSON_TYPES))}",
        )
        return None
    if problem:
        chk.error(
            path,
            f"parameters is not a valid JSON Schema: {problem}",
            "see https://json-schema.org/understanding-json-schema/",
        )
        return None
    return data


_JSON_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
# Keywords whose value is a schema, a list of schemas, or a map of names to schemas.
_ONE_SCHEMA = frozenset(
    {"additionalItems", "additionalProperties", "contains", "else", "if", "items", "not"}
    | {"propertyNames", "then", "unevaluatedItems", "unevaluatedProperties"}
)
_LIST_OF_SCHEMAS = frozenset({"allOf", "anyOf", "items", "oneOf", "prefixItems"})
_NAMED_SCHEMAS = frozenset(
    {"$defs", "definitions", "dependentSchemas", "patternProperties", "properties"}
)

_SchemaPath = tuple[str | int, ...]


def _unknown_type(schema: Any, where: _SchemaPath) -> tuple[_SchemaPath, str] | None:
    """Where a `type` names no JSON type, and what it names: fastjsonschema says only
    "Unknown type", not which nor where."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    for one in kind if isinstance(kind, list) else [kind]:
        if isinstance(one, str) and one not in _JSON_TYPES:
            return (*where, "type"), one
    for key, value in schema.items():
        children: list[tuple[_SchemaPath, Any]] = []
        if key in _LIST_OF_SCHEMAS and isinstance(value, list):
            children = [((*where, key, i), item) for i, item in enumerate(value)]
        elif key in _ONE_SCHEMA:
            children = [((*where, key), value)]
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            children = [((*where, key, name), item) for name, item in value.items()]
        for child_where, child in children:
            found = _unknown_type(child, child_where)
            if found is not None:
                return found
    return None


@lru_cache(maxsize=512)
def _schema_problem(schema_json: str) -> str | None:
    """Compile the schema the way the agent process will; cached (base tools load every time)."""
    try:
        compile_schema(json.loads(schema_json))
    except Exception as exc:  # fastjsonschema raises assorted errors for malformed schemas
        return str(exc) or type(exc).__name__
    return None


def parse_extension(chk: Checker, spec: Any, name: str | None) -> ExtensionSpec | None:
    data = chk.mapping(SPEC, spec, ("entry", "config"), ("entry",))
    if data is None:
        return None
    mark = chk.mark()
    entry = _entry(chk, data)
    config: dict[str, Any] = {}
    if data.get("config") is not None:
        config = chk.mapping((*SPEC, "config"), data["config"], (), open_keys=True) or {}
    if not chk.clean_since(mark) or entry is None:
        return None
    return ExtensionSpec(entry=entry, config=config)


def parse_connector(chk: Checker, spec: Any, name: str | None) -> ConnectorSpec | None:
    data = chk.mapping(SPEC, spec, ("entry", "events"), ("entry", "events"))
    if data is None:
        return None
    mark = chk.mark()
    entry = _entry(chk, data)
    events: list[ConnectorEventSpec] = []
    seen: set[str] = set()
    path = (*SPEC, "events")
    items = (
        chk.sequence(path, data["events"], min_items=1) if data.get("events") is not None else []
    )
    for i, item in enumerate(items or []):
        ipath = (*path, i)
        event = chk.mapping(ipath, item, ("name", "properties"), ("name",))
        if event is None:
            continue
        event_name = chk.optional_string(event, ipath, "name")
        if event_name is not None and event_name in seen:
            chk.error(
                (*ipath, "name"),
                f"event '{event_name}' is declared twice",
                "give each event a unique name",
            )
        properties = _event_properties(chk, (*ipath, "properties"), event.get("properties"))
        if event_name is not None:
            seen.add(event_name)
            events.append(ConnectorEventSpec(name=event_name, properties=properties))
    if not chk.clean_since(mark) or entry is None:
        return None
    return ConnectorSpec(entry=entry, events=tuple(events))


def _event_properties(chk: Checker, path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    data = chk.mapping(path, value, (), open_keys=True) or {}
    for key, prop in data.items():
        ppath = (*path, key)
        decl = chk.mapping(ppath, prop, ("type", "optional", "description"), ("type",))
        if decl is None:
            continue
        kind = decl.get("type")
        if kind is not None and kind not in _EVENT_PROPERTY_TYPES:
            chk.error(
                (*ppath, "type"),
                f"unknown property type {kind!r}",
                f"use one of {', '.join(_EVENT_PROPERTY_TYPES)}",
            )
        if decl.get("optional") is not None:
            chk.boolean((*ppath, "optional"), decl["optional"])
    return data
