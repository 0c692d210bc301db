"""Tool arguments: parse the model's JSON, and say concretely what is wrong with it.

The compiled validator (fastjsonschema) is the fast accept path, but it stops at the first
error. When it rejects, `problems` walks the schema itself to list what a model needs to fix
all at once: `args.x: required property is missing`, `args.mode: must be one of a, b`.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

MAX_LISTED = 5  # problems named in the message; the rest are counted
_decoder = msgspec.json.Decoder()


class ArgumentsError(ValueError):
    """The arguments text is not a JSON object."""


def parse_arguments(text: str) -> dict[str, Any]:
    """The call's arguments as a dict; empty text means no arguments. Raises ArgumentsError."""
    if not text or not text.strip():
        return {}
    try:
        value = _decoder.decode(text)
    except msgspec.DecodeError as exc:
        raise ArgumentsError(f"arguments are not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ArgumentsError("arguments must be a JSON object")
    return value


def problems(schema: dict[str, Any], value: Any, path: str = "args") -> list[str]:
    """Every problem found in `value` against `schema` (a practical subset of JSON Schema:
    type, enum, const, required, properties, additionalProperties, items, bounds, lengths,
    pattern, anyOf/oneOf/allOf). Unknown keywords are left to the compiled validator."""
    out: list[str] = []
    _check(schema, value, path, out)
    return out


def summarize(found: list[str]) -> str:
    """At most MAX_LISTED problems joined with '; ', plus how many more there are."""
    listed = "; ".join(found[:MAX_LISTED])
    extra = len(found) - MAX_LISTED
    return f"{listed}; +{extra} more issue{'s' if extra > 1 else ''}" if extra > 0 else listed


def _check(schema: Any, value: Any, path: str, out: list[str]) -> None:
    if not isinstance(schema, dict):
        return
    if "enum" in schema:
        options = schema["enum"]
        if isinstance(options, list) and not any(_same(value, o) for o in options):
            out.append(f"{path}: must be one of {', '.join(_show(o) for o in options)}")
            return
    if "const" in schema and not _same(value, schema["const"]):
        out.append(f"{path}: must be {_show(schema['const'])}")
        return
    expected = schema.get("type")
    if expected is not None and not _type_ok(expected, value):
        wanted = " or ".join(expected) if isinstance(expected, list) else str(expected)
        out.append(f"{path}: must be {_article(wanted)}, got {_json_type(value)}")
        return
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            if not any(not problems(option, value, path) for option in options):
                out.append(f"{path}: does not match any of the allowed forms")
    for option in schema.get("allOf", ()) if isinstance(schema.get("allOf"), list) else ():
        _check(option, value, path, out)
    if isinstance(value, dict):
        _check_object(schema, value, path, out)
    elif isinstance(value, list):
        _check_array(schema, value, path, out)
    elif isinstance(value, str):
        _check_string(schema, value, path, out)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_number(schema, value, path, out)


def _check_object(schema: dict[str, Any], value: dict[str, Any], path: str, out: list[str]) -> None:
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    for name in schema.get("required", ()) if isinstance(schema.get("required"), list) else ():
        if name not in value:
            out.append(f"{path}.{name}: required property is missing")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        child = f"{path}.{name}"
        if name in properties:
            _check(properties[name], item, child, out)
        elif extra is False:
            allowed = ", ".join(properties) or "none"
            out.append(f"{child}: unexpected property (allowed: {allowed})")
        elif isinstance(extra, dict):
            _check(extra, item, child, out)


def _check_array(schema: dict[str, Any], value: list[Any], path: str, out: list[str]) -> None:
    low, high = schema.get("minItems"), schema.get("maxItems")
    if isinstance(low, int) and len(value) < low:
        out.append(f"{path}: must have at least {low} item{'s' if low != 1 else ''}")
    if isinstance(high, int) and len(value) > high:
        out.append(f"{path}: must have at most {high} item{'s' if high != 1 else ''}")
    items = schema.get("items")
    if isinstance(items, dict):
        for index, item in enumerate(value):
            _check(items, item, f"{path}[{index}]", out)


def _check_string(schema: dict[str, Any], value: str, path: str, out: list[str]) -> None:
    low, high = schema.get("minLength"), schema.get("maxLength")
    if isinstance(low, int) and len(value) < low:
        out.append(f"{path}: must be at least {low} character{'s' if low != 1 else ''} long")
    if isinstance(high, int) and len(value) > high:
        out.append(f"{path}: must be at most {high} character{'s' if high != 1 else ''} long")
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        try:
            if re.search(pattern, value) is None:
                out.append(f"{path}: must match the pattern {pattern}")
        except re.error:
            pass


def _check_number(schema: dict[str, Any], value: float, path: str, out: list[str]) -> None:
    for key, sign in _BOUNDS:
        bound = schema.get(key)
        if not isinstance(bound, int | float) or isinstance(bound, bool):
            continue
        inside = {
            ">=": value >= bound,
            "<=": value <= bound,
            ">": value > bound,
            "<": value < bound,
        }[sign]
        if not inside:
            out.append(f"{path}: must be {sign} {bound}, got {_show(value)}")


_BOUNDS = (
    ("minimum", ">="),
    ("maximum", "<="),
    ("exclusiveMinimum", ">"),
    ("exclusiveMaximum", "<"),
)


def _type_ok(expected: Any, value: Any) -> bool:
    if isinstance(expected, list):
        return any(_type_ok(one, value) for one in expected)
    if expected == "string":
        return isinstance(value, str)
    if expected == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if expected == "number":
        return (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(float(value))
        )
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "array":
        return isinstance(value, list)
    if expected == "object":
        return isinstance(value, dict)
    if expected == "null":
        return value is None
    return True  # an unknown type name: not ours to judge


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _same(value: Any, option: Any) -> bool:
    return bool(value == option and isinstance(value, bool) == isinstance(option, bool))


def _show(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1] in "aeiou" else f"a {noun}"
