"""ObjectRef parsing, shared by validation and the runtime so both read refs the same way.

Accepted forms (upstream `object-ref.ts`):
    "Kind/name"                                   exactly one "/", text on both sides
    {kind, name, package?, apiVersion?}           object form; `package` selects a package scope
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from goondan.bundle.codes import API_VERSION
from goondan.bundle.model import ObjectRef

_OBJECT_KEYS = ("kind", "name", "package", "apiVersion")
_NO_SPACE = re.compile(r"^\S+$")


def parse_ref(raw: Any) -> ObjectRef:
    """Parse an ObjectRefLike; raise `ValueError` saying what is wrong and the expected form."""
    if isinstance(raw, ObjectRef):
        return raw
    if isinstance(raw, str):
        return _parse_string(raw)
    if isinstance(raw, Mapping):
        return _parse_object(raw)
    raise ValueError(
        f'a reference must be a string "Kind/name" or a mapping {{kind, name}}, '
        f"got {type_name(raw)}"
    )


def _parse_string(raw: str) -> ObjectRef:
    parts = raw.split("/")
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise ValueError(
            f"reference '{raw}' must have the form \"Kind/name\" with exactly one '/' "
            f"(use the object form {{kind, name, package}} for a package's resource)"
        )
    kind, name = parts
    for label, text in (("kind", kind), ("name", name)):
        if not _NO_SPACE.match(text):
            raise ValueError(f"reference '{raw}': the {label} must not contain spaces")
    return ObjectRef(kind=kind, name=name)


def _parse_object(raw: Mapping[Any, Any]) -> ObjectRef:
    unknown = [str(k) for k in raw if k not in _OBJECT_KEYS]
    if unknown:
        raise ValueError(
            f"reference has unknown field(s) {', '.join(unknown)}; "
            f"allowed: kind, name, package, apiVersion"
        )
    values: dict[str, str] = {}
    for key in _OBJECT_KEYS:
        if key not in raw:
            continue
        value = raw[key]
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"reference field '{key}' must be a non-empty string")
        values[key] = value
    missing = [k for k in ("kind", "name") if k not in values]
    if missing:
        raise ValueError(f"reference is missing {' and '.join(missing)}: write {{kind, name}}")
    if "apiVersion" in values and values["apiVersion"] != API_VERSION:
        raise ValueError(
            f"reference apiVersion '{values['apiVersion']}' is not supported; use {API_VERSION}"
        )
    return ObjectRef(kind=values["kind"], name=values["name"], package=values.get("package"))


def format_ref(ref: ObjectRef) -> str:
    """The YAML a user would write for `ref` (object form when a package is named)."""
    if ref.package:
        return f'{{kind: {ref.kind}, name: {ref.name}, package: "{ref.package}"}}'
    return f'"{ref.kind}/{ref.name}"'


def type_name(value: Any) -> str:
    """A YAML-ish name for a Python value's type, for error messages."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return type(value).__name__
