"""`json-query` tool of @goondan/base: query, pick, count and flatten JSON given as a string.

Paths use dots and brackets: `users[0].name`, `.items`, `$.a.b`, `["odd key"]`, `items[-1]`;
`.` (or empty, or `$`) is the whole document.
"""

from __future__ import annotations

import json
import re
from typing import Any

from goondan import ErrorCode, ToolContext, ToolError

_MISSING = object()
_TOKEN = re.compile(
    r"""\.?(?P<name>[^.\[\]]+)         # .name or name
      | \[\s*(?P<index>-?\d+)\s*\]     # [0], [-1]
      | \[\s*(?P<quote>["'])(?P<key>(?:\\.|(?!(?P=quote)).)*)(?P=quote)\s*\]  # ["key"]
      | \.(?=\[|$)                     # a dot before a bracket or at the end
    """,
    re.VERBOSE,
)


def query(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = args.get("path", ".")
    value = _lookup(_parse(args["data"]), path)
    found = value is not _MISSING
    return {"path": path, "found": found, "value": value if found else None}


def pick(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    data = _parse(args["data"])
    if not isinstance(data, dict):
        raise ToolError(
            f"pick needs a JSON object, got {_type(data)}",
            code=ErrorCode.E_JSON_TYPE,
            suggestion="use json-query__query to reach the object first",
        )
    keys = args["keys"]
    return {"keys": keys, "result": {key: data[key] for key in keys if key in data}}


def count(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    path = args.get("path", ".")
    value = _lookup(_parse(args["data"]), path)
    if value is _MISSING or value is None:
        return {"path": path, "count": 0, "type": "null"}
    if isinstance(value, (list, dict, str)):
        return {"path": path, "count": len(value), "type": _type(value)}
    return {"path": path, "count": 1, "type": _type(value)}


def flatten(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    data = _parse(args["data"])
    if not isinstance(data, list):
        raise ToolError(
            f"flatten needs a JSON array, got {_type(data)}", code=ErrorCode.E_JSON_TYPE
        )
    depth = args.get("depth", 1)
    if depth < 0 or depth != int(depth):
        raise ToolError(
            f"depth must be a whole number >= 0, got {depth}", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    result = _flatten(data, int(depth))
    return {"depth": int(depth), "count": len(result), "result": result}


def _flatten(items: list[Any], depth: int) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if isinstance(item, list) and depth > 0:
            out.extend(_flatten(item, depth - 1))
        else:
            out.append(item)
    return out


def _parse(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ToolError(
            f"data is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
            code=ErrorCode.E_INVALID_JSON,
            suggestion="pass the JSON document as a string",
        ) from None


def _lookup(data: Any, path: str) -> Any:
    current = data
    for step in _steps(path):
        if isinstance(step, int):
            if not isinstance(current, list) or not -len(current) <= step < len(current):
                return _MISSING
            current = current[step]
        else:
            if not isinstance(current, dict) or step not in current:
                return _MISSING
            current = current[step]
    return current


def _steps(path: str) -> list[str | int]:
    text = path.strip()
    if text.startswith("$"):
        text = text[1:]
    if text in ("", "."):
        return []
    steps: list[str | int] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ToolError(
                f"cannot parse path {path!r} at position {pos}: {text[pos:]!r}",
                code=ErrorCode.E_INVALID_PATH,
                suggestion='use dots and brackets, e.g. users[0].name or ["a b"]',
            )
        if match["name"] is not None:
            steps.append(match["name"])
        elif match["index"] is not None:
            steps.append(int(match["index"]))
        elif match["key"] is not None:
            steps.append(re.sub(r"\\(.)", r"\1", match["key"]))
        pos = match.end()
    return steps


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


handlers = {"query": query, "pick": pick, "count": count, "flatten": flatten}
