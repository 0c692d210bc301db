"""Reading an extension's `config` with clear errors (`ExtensionConfigError` -> E_EXT_CONFIG)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from goondan import ExtensionConfigError


def integer(config: Mapping[str, Any], key: str, default: int, *, minimum: int = 0) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ExtensionConfigError(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def boolean(config: Mapping[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise ExtensionConfigError(f"{key} must be true or false, got {value!r}")
    return value


def string(
    config: Mapping[str, Any], key: str, default: str, *, choices: Sequence[str] = ()
) -> str:
    value = config.get(key, default)
    if not isinstance(value, str):
        raise ExtensionConfigError(f"{key} must be a string, got {value!r}")
    if choices and value not in choices:
        raise ExtensionConfigError(f"{key} must be one of {', '.join(choices)}, got {value!r}")
    return value


def strings(config: Mapping[str, Any], key: str) -> list[str]:
    value = config.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ExtensionConfigError(f"{key} must be a list of names, got {value!r}")
    return list(dict.fromkeys(value))
