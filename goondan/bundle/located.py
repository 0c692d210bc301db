"""Plain YAML data that remembers where it came from: file, document and the line of each key."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# A path into one document: ("spec", "tools", 1, "ref") is `spec.tools[1].ref`.
YPath = tuple[str | int, ...]


@dataclass(frozen=True)
class YamlDoc:
    file: Path  # absolute
    index: int  # 0-based position among the file's documents
    data: Any  # dict / list / str / int / float / bool / None, as JSON would have them
    lines: dict[YPath, int] = field(default_factory=dict)  # 1-based line of each key and item

    @property
    def line(self) -> int:
        return self.lines.get((), 1)

    def line_of(self, path: YPath) -> int:
        """Line of `path`, else of its nearest ancestor (a missing key points at its parent)."""
        for end in range(len(path), -1, -1):
            hit = self.lines.get(path[:end])
            if hit is not None:
                return hit
        return 1


def format_ypath(path: YPath) -> str:
    """`("spec", "tools", 1, "ref")` -> `spec.tools[1].ref`."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def display_path(file: Path) -> str:
    """How error messages name a file: relative to the working directory when under it."""
    try:
        return os.path.relpath(file) if file.is_relative_to(Path.cwd()) else str(file)
    except (OSError, ValueError):  # cwd deleted, or another drive
        return str(file)
