"""The file operations the instance stores share: append-only logs and durable renames."""

from __future__ import annotations

import os
from pathlib import Path

_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT


def open_append(path: Path, *, new_directory: bool = False) -> int:
    """An fd that appends to `path` (0600), creating it and its directories as needed.

    Opens first and creates directories only when that fails: the common case (the directory
    is there) costs one system call, not a mkdir per level. A caller that knows the directory
    is not there yet (`new_directory`) skips the open that would fail."""
    if not new_directory:
        try:
            return os.open(path, _APPEND, 0o600)
        except FileNotFoundError:
            pass
    path.parent.mkdir(parents=True, exist_ok=True)
    return os.open(path, _APPEND, 0o600)


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
