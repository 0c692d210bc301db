"""Configuration errors: what is wrong, where (file, line, YAML path) and what to do."""

from __future__ import annotations

from typing import Literal

import msgspec


class ConfigError(msgspec.Struct, frozen=True):
    """One problem in a bundle. `path` is a YAML path such as `Agent/coder.spec.tools[1].ref`."""

    code: str  # E_CONFIG_* (upstream codes)
    message: str
    file: str | None = None
    line: int | None = None
    path: str | None = None
    suggestion: str | None = None
    # "warning": shown, never fails validation (a Tool handler that no export declares).
    severity: Literal["error", "warning"] = "error"

    def render(self) -> str:
        """`goondan.yaml:12: Agent/coder.spec.tools[1].ref: ... (E_CONFIG_REF_NOT_FOUND)`."""
        where = ""
        if self.file:
            where = self.file + (f":{self.line}" if self.line else "") + ": "
        path = f"{self.path}: " if self.path else ""
        text = f"{where}{path}{self.message} ({self.code})"
        if self.suggestion:
            text += f"\n  hint: {self.suggestion}"
        return text


class BundleInvalid(Exception):
    """Raised by `load_bundle` with every problem found (fail-fast on the bundle, not the first)."""

    def __init__(self, errors: list[ConfigError]) -> None:
        self.errors = errors
        super().__init__("\n".join(e.render() for e in errors))
