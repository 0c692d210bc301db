"""`text-transform` tool of @goondan/base: replace, slice, split, join, trim and case."""

from __future__ import annotations

from typing import Any

from goondan import ErrorCode, ToolContext, ToolError

TRIM_MODES = ("both", "start", "end")
CASES = ("upper", "lower")


def replace(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    text, search = args["text"], args["search"]
    if search == "":
        raise ToolError("search must not be empty", code=ErrorCode.E_TOOL_INVALID_ARGS)
    replacement = args.get("replacement", "")
    found = text.count(search)
    replacements = found if args.get("all", False) else min(found, 1)
    result = text.replace(search, replacement, replacements) if replacements else text
    return {"original": text, "result": result, "replacements": replacements}


def slice_text(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """JavaScript `slice` semantics: negative positions count from the end, out-of-range clamps."""
    text = args["text"]
    start, end, _ = slice(
        _index(args.get("start", 0), "start"), _index(args.get("end", len(text)), "end")
    ).indices(len(text))
    end = max(start, end)
    result = text[start:end]
    return {"original": text, "result": result, "start": start, "end": end, "length": len(result)}


def split(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    """At most `maxParts` parts; the last one keeps the rest of the text (nothing is lost)."""
    text = args["text"]
    delimiter = args.get("delimiter", "\n")
    max_parts = args.get("maxParts")
    if max_parts is not None and (max_parts < 1 or max_parts != int(max_parts)):
        raise ToolError(
            f"maxParts must be a whole number >= 1, got {max_parts}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    if delimiter == "":
        parts = list(text)
        if max_parts is not None and len(parts) > max_parts:
            parts = [*parts[: int(max_parts) - 1], "".join(parts[int(max_parts) - 1 :])]
    else:
        parts = text.split(delimiter, -1 if max_parts is None else int(max_parts) - 1)
    return {"delimiter": delimiter, "count": len(parts), "parts": parts}


def join(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    delimiter = args.get("delimiter", "\n")
    parts = [_text_of(part) for part in args["parts"]]
    return {"delimiter": delimiter, "count": len(parts), "result": delimiter.join(parts)}


def trim(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    text = args["text"]
    mode = args.get("mode", "both")
    if mode not in TRIM_MODES:
        raise ToolError(
            f"mode must be one of {', '.join(TRIM_MODES)}, got {mode!r}",
            code=ErrorCode.E_TOOL_INVALID_ARGS,
        )
    result = {"both": text.strip, "start": text.lstrip, "end": text.rstrip}[mode]()
    return {
        "original": text,
        "result": result,
        "mode": mode,
        "trimmedLength": len(text) - len(result),
    }


def case(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
    text, to = args["text"], args["to"]
    if to not in CASES:
        raise ToolError(
            f"to must be one of {', '.join(CASES)}, got {to!r}", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    return {"original": text, "result": text.upper() if to == "upper" else text.lower(), "to": to}


def _index(value: float, name: str) -> int:
    if value != int(value):
        raise ToolError(
            f"{name} must be a whole number, got {value}", code=ErrorCode.E_TOOL_INVALID_ARGS
        )
    return int(value)


def _text_of(value: Any) -> str:
    """As JavaScript's String(): true -> "true", 2.0 -> "2"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (str, int, float)):
        return str(value)
    raise ToolError(
        f"parts may hold only strings, numbers and booleans, got {value!r}",
        code=ErrorCode.E_TOOL_INVALID_ARGS,
    )


handlers = {
    "replace": replace,
    "slice": slice_text,
    "split": split,
    "join": join,
    "trim": trim,
    "case": case,
}
