"""Field checkers for one resource document: each reports problems and returns what it could read.

Checkers never raise: they append a `ConfigError` (with file, line and YAML path) to the
document's `Checker` and return None (or a best-effort value) so that one run reports every
problem of the bundle, not just the first.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from goondan.bundle import codes
from goondan.bundle.errors import ConfigError
from goondan.bundle.located import YamlDoc, YPath, display_path, format_ypath
from goondan.bundle.model import ObjectRef, SecretRef, ValueSource
from goondan.bundle.refs import format_ref, parse_ref, type_name
from goondan.bundle.suggest import closest


@dataclass(frozen=True)
class RefSite:
    """One reference found in a document, checked against the other resources later."""

    path: YPath
    ref: ObjectRef
    expected_kind: str


@dataclass
class Checker:
    doc: YamlDoc
    label: str  # `Agent/coder`, the prefix of every error path
    errors: list[ConfigError] = field(default_factory=list)
    root: Path = Path(".")  # what `entry` / `systemRef` paths are relative to
    refs: list[RefSite] = field(default_factory=list)

    # -- reporting ----------------------------------------------------------------------------

    def error(
        self,
        path: YPath,
        message: str,
        suggestion: str | None = None,
        code: str = codes.SCHEMA_INVALID,
    ) -> None:
        self.errors.append(
            ConfigError(
                code=code,
                message=message,
                file=display_path(self.doc.file),
                line=self.doc.line_of(path),
                path=self.where(path),
                suggestion=suggestion,
            )
        )

    def where(self, path: YPath) -> str:
        return f"{self.label}.{format_ypath(path)}" if path else self.label

    def mark(self) -> int:
        """Pass to `clean_since` to know whether a section produced errors."""
        return len(self.errors)

    def clean_since(self, mark: int) -> bool:
        return len(self.errors) == mark

    # -- containers ---------------------------------------------------------------------------

    def mapping(
        self,
        path: YPath,
        value: Any,
        allowed: Collection[str],
        required: Collection[str] = (),
        *,
        open_keys: bool = False,
    ) -> dict[str, Any] | None:
        """A mapping with only `allowed` keys (unless `open_keys`) and every `required` one."""
        if not isinstance(value, dict):
            self.error(path, f"must be a mapping, got {type_name(value)}", self._keys_hint(allowed))
            return None
        if not open_keys:
            for key in value:
                if key not in allowed:
                    hit = closest(key, allowed)
                    hint = f"did you mean '{hit}'?" if hit else self._keys_hint(allowed)
                    self.error((*path, key), f"unknown field '{key}'", hint)
        for key in required:
            if key not in value or value[key] is None:
                self.error((*path, key), f"required field '{key}' is missing", f"add '{key}'")
        return value

    @staticmethod
    def _keys_hint(allowed: Collection[str]) -> str | None:
        return f"allowed fields: {', '.join(allowed)}" if allowed else None

    def sequence(self, path: YPath, value: Any, min_items: int = 0) -> list[Any] | None:
        if not isinstance(value, list):
            self.error(path, f"must be a list, got {type_name(value)}", "write it as a YAML list")
            return None
        if len(value) < min_items:
            self.error(
                path,
                f"must list at least {min_items} item{'s' if min_items != 1 else ''}",
                "add an item",
            )
        return value

    # -- scalars ------------------------------------------------------------------------------

    def string(self, path: YPath, value: Any, *, what: str = "a non-empty string") -> str | None:
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, str):
            self.error(path, f"must be {what}, got an empty string")
        elif isinstance(value, bool | int | float):  # YAML read `yes` / `1.0` as non-strings
            self.error(path, f"must be {what}, got {type_name(value)}", "quote the value")
        else:
            self.error(path, f"must be {what}, got {type_name(value)}")
        return None

    def optional_string(self, data: dict[str, Any], path: YPath, key: str) -> str | None:
        """`data[key]` when present (absent and null are the same in YAML), else None."""
        value = data.get(key)
        return None if value is None else self.string((*path, key), value)

    def string_map(self, path: YPath, value: Any) -> dict[str, str]:
        """labels / annotations: string to string."""
        data = self.mapping(path, value, (), open_keys=True)
        if data is None:
            return {}
        out: dict[str, str] = {}
        for key, item in data.items():
            if isinstance(item, str):
                out[key] = item
            else:
                self.error((*path, key), f"must be a string, got {type_name(item)}", "quote it")
        return out

    def integer(self, path: YPath, value: Any, *, minimum: int) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"must be an integer >= {minimum}, got {type_name(value)}")
            return None
        if value < minimum:
            self.error(path, f"must be an integer >= {minimum}, got {value}")
            return None
        return value

    def number(
        self,
        path: YPath,
        value: Any,
        *,
        low: float | None = None,
        high: float | None = None,
        strict_low: bool = False,
    ) -> float | None:
        """A number in [low, high] (or (low, high] with `strict_low`)."""
        bounds = _describe_bounds(low, high, strict_low)
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(path, f"must be a number{bounds}, got {type_name(value)}")
            return None
        if not math.isfinite(value):
            # YAML's .nan passes every range comparison and .inf is no usable duration or size.
            self.error(path, f"must be a finite number{bounds}, got {value}")
            return None
        too_low = low is not None and (value <= low if strict_low else value < low)
        if too_low or (high is not None and value > high):
            self.error(path, f"must be a number{bounds}, got {value}")
            return None
        return float(value)

    def boolean(self, path: YPath, value: Any) -> bool | None:
        if not isinstance(value, bool):
            self.error(path, f"must be true or false, got {type_name(value)}")
            return None
        return value

    # -- Goondan shapes -----------------------------------------------------------------------

    def ref(self, path: YPath, value: Any, expected_kind: str) -> ObjectRef | None:
        """An ObjectRefLike that must point at a resource of `expected_kind`."""
        try:
            ref = parse_ref(value)
        except ValueError as exc:
            self.error(
                path,
                str(exc),
                f'write "{expected_kind}/<name>" or {{kind: {expected_kind}, name: <name>}}',
                codes.INVALID_REF,
            )
            return None
        if ref.kind != expected_kind:
            fixed = ObjectRef(kind=expected_kind, name=ref.name, package=ref.package)
            self.error(
                path,
                f"must reference a {expected_kind}, not a {ref.kind} ({format_ref(ref)})",
                f"use {format_ref(fixed)} or point it at a {expected_kind} resource",
                codes.INVALID_REF,
            )
            return None
        self.refs.append(RefSite(path=path, ref=ref, expected_kind=expected_kind))
        return ref

    def value_source(self, path: YPath, value: Any) -> ValueSource | None:
        """`{value}` | `{valueFrom: {env}}` | `{valueFrom: {secretRef: {ref, key}}}`."""
        data = self.mapping(path, value, ("value", "valueFrom"))
        if data is None:
            return None
        example = 'write {value: "..."} or {valueFrom: {env: NAME}}'
        if ("value" in data) == ("valueFrom" in data):
            both = "value" in data
            self.error(
                path,
                "set exactly one of 'value' and 'valueFrom'"
                + (" (they are mutually exclusive)" if both else ""),
                example,
            )
            return None
        if "value" in data:
            literal = data["value"]
            if isinstance(literal, bool):
                return ValueSource(value="true" if literal else "false")
            if isinstance(literal, str | int | float):
                return ValueSource(value=str(literal))
            self.error((*path, "value"), f"must be a string, got {type_name(literal)}")
            return None
        src_path = (*path, "valueFrom")
        src = self.mapping(src_path, data["valueFrom"], ("env", "secretRef"))
        if src is None:
            return None
        if ("env" in src) == ("secretRef" in src):
            self.error(src_path, "set exactly one of 'env' and 'secretRef'", example)
            return None
        if "env" in src:
            env = self.string((*src_path, "env"), src["env"], what="an environment variable name")
            return ValueSource(env=env) if env else None
        return self._secret_ref((*src_path, "secretRef"), src["secretRef"])

    def _secret_ref(self, path: YPath, value: Any) -> ValueSource | None:
        data = self.mapping(path, value, ("ref", "key"), ("ref", "key"))
        if data is None or "ref" not in data or "key" not in data:
            return None
        ref = self.string((*path, "ref"), data["ref"])
        key = self.string((*path, "key"), data["key"])
        if ref is not None:
            kind, _, name = ref.partition("/")
            if kind != "Secret" or not name or "/" in name:
                self.error(
                    (*path, "ref"),
                    f"secret reference '{ref}' must have the form \"Secret/<name>\"",
                    'write ref: "Secret/<name>"',
                    codes.INVALID_REF,
                )
                return None
        if ref is None or key is None:
            return None
        return ValueSource(secret_ref=SecretRef(ref=ref, key=key))


def _describe_bounds(low: float | None, high: float | None, strict_low: bool) -> str:
    if low is not None and high is not None:
        return f" between {low:g} and {high:g}"
    if low is not None:
        return f" {'>' if strict_low else '>='} {low:g}"
    if high is not None:
        return f" <= {high:g}"
    return ""
